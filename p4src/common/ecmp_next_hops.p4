// The body of control Ecmp that both architectures share: the next-hop
// actions, the table next_hops and apply. Only the selector extern differs
// between targets, so v1model/ecmp.p4 and tna/ecmp.p4 each open the control,
// declare `ecmp_selector` in their own extern syntax and include this file
// inside the control's braces. Not a standalone file (no include guard): it is
// a list of control members, and every name in it is the same on both targets.
//
// The selector hashes the 5-tuple plus meta.ecmp_entropy: the DLCP seq ^ msg_id
// for DLCP data packets, 0 for everything else (common/classification.p4),
// so DLCP data is sprayed per packet and every other flow stays on one path.

    // The rewrite itself (MACs, TTL, checksum) is common/next_hop.p4.
    action set_next_hop(dlcp_port_t port, mac_addr_t src_mac, mac_addr_t dst_mac) {
        meta.egress_port = port;
        meta.next_hop_src_mac = src_mac;
        meta.next_hop_dst_mac = dst_mac;
    }

    action drop_packet() {
        meta.routed_drop = true;
    }

    table next_hops {
        key = {
            meta.next_hop_group: exact @name("group");
            hdr.ipv4.src_addr: selector;
            hdr.ipv4.dst_addr: selector;
            hdr.ipv4.protocol: selector;
            meta.l4_src_port: selector;
            meta.l4_dst_port: selector;
            meta.ecmp_entropy: selector;
        }
        actions = {
            set_next_hop;
            drop_packet;
        }
        // No default_action: BMv2 ignores one on a table with an action
        // selector (p4c-bm2-ss warns even about the NoAction the front end
        // adds; docs/switch.md). A miss (unknown or empty group) is handled in
        // apply instead, with the same effect as drop_packet.
        implementation = ecmp_selector;
        size = ECMP_GROUPS;
    }

    apply {
        if (!next_hops.apply().hit) {
            meta.routed_drop = true;
        }
    }
