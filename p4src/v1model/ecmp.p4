// ECMP next-hop selection, v1model flavour: an action_selector whose hash
// covers the 5-tuple plus meta.ecmp_entropy (the DLCP sequence number for
// DLCP data packets, 0 for everything else; see common/classification.p4).
#ifndef DLCP_V1MODEL_ECMP_P4
#define DLCP_V1MODEL_ECMP_P4

control Ecmp(in headers_t hdr, inout local_metadata_t meta) {
    // CRC32, not CRC16: a CRC is linear, so packets that differ only in a few
    // seq bits reach only the members those bits can reach through the low
    // hash bits. With CRC16, BMv2 put seq 0..63 of one flow on 2 of 4 members;
    // with CRC32 on all 4 (vector ecmp_sprays_dlcp_data_only).
    action_selector(HashAlgorithm.crc32, NEXT_HOPS_SIZE, 16) ecmp_selector;

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
}

#endif  // DLCP_V1MODEL_ECMP_P4
