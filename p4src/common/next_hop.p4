// The rewrite of a routed packet, shared by both architectures: the MACs of
// the next hop the ECMP control chose, TTL - 1, and the IPv4 checksum.
//
// The checksum is updated incrementally (RFC 1624, eqn. 3) rather than
// recomputed: that works for headers with options too (which the parser does
// not extract), and it keeps a checksum error the packet arrived with, so the
// receiver still sees it.
#ifndef DLCP_NEXT_HOP_P4
#define DLCP_NEXT_HOP_P4

#include "headers.p4"

// HC' = ~(~HC + ~m + m'): the checksum after the 16-bit word m becomes m'.
bit<16> csum16_replace(in bit<16> csum, in bit<16> old_word, in bit<16> new_word) {
    bit<32> sum = (bit<32>) ~csum + (bit<32>) ~old_word + (bit<32>) new_word;
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return ~sum[15:0];
}

control NextHopRewrite(inout headers_t hdr, in local_metadata_t meta) {
    apply {
        hdr.ethernet.src_addr = meta.next_hop_src_mac;
        hdr.ethernet.dst_addr = meta.next_hop_dst_mac;
        bit<8> ttl = hdr.ipv4.ttl - 1;
        hdr.ipv4.hdr_checksum = csum16_replace(
            hdr.ipv4.hdr_checksum, hdr.ipv4.ttl ++ hdr.ipv4.protocol, ttl ++ hdr.ipv4.protocol);
        hdr.ipv4.ttl = ttl;
    }
}

#endif  // DLCP_NEXT_HOP_P4
