// IPv4 longest-prefix routing to an ECMP group of next hops. The next hop
// itself (port, MAC rewrite, TTL) is chosen by the architecture's ECMP control.
#ifndef DLCP_ROUTING_P4
#define DLCP_ROUTING_P4

#include "headers.p4"

control Routing(in headers_t hdr, inout local_metadata_t meta) {
    action set_next_hop_group(bit<16> group) {
        meta.next_hop_group = group;
    }

    action drop_packet() {
        meta.routed_drop = true;
    }

    table ipv4_routes {
        key = {
            hdr.ipv4.dst_addr: lpm @name("dst_addr");
        }
        actions = {
            set_next_hop_group;
            drop_packet;
        }
        default_action = drop_packet();
        size = IPV4_ROUTES_SIZE;
    }

    apply {
        meta.routed_drop = false;
        meta.next_hop_group = 0;
        meta.egress_port = 0;
        // A router forwards IPv4 only; TTL 0 or 1 would expire here.
        if (!hdr.ipv4.isValid() || hdr.ipv4.ttl <= 1) {
            meta.routed_drop = true;
        } else {
            ipv4_routes.apply();
        }
    }
}

#endif  // DLCP_ROUTING_P4
