// The rewrite of a routed packet, shared by both architectures: the MACs of
// the next hop the ECMP control chose, TTL - 1, and what the IPv4 checksum
// update needs.
//
// The checksum is updated incrementally (RFC 1624, eqn. 3) rather than
// recomputed: that works for headers with options too (which the parser does
// not extract), and it keeps a checksum error the packet arrived with, so the
// receiver still sees it. With m the rewritten words (TTL and protocol, and
// the total length of a trimmed packet), HC' = ~(~HC + ~m + m'): ingress
// saves ~HC and ~m before the rewrite (here), and the architecture's checksum
// unit sums those with m' and complements the sum after ingress (v1model:
// update_checksum in DlcpComputeChecksum; TNA: the Checksum extern in the
// ingress deparser). An unchanged word adds ~m + m = 0xffff, which is -0 and
// leaves the sum as it is (the sum is never +0: m' holds a TTL >= 1).
// Not csum16_replace-style arithmetic in an action (as before): a 32-bit sum
// with carry folding is several dependent ALU operations, which Tofino cannot
// do in one action ("action spanning multiple stages").
#ifndef DLCP_NEXT_HOP_P4
#define DLCP_NEXT_HOP_P4

#include "headers.p4"

control NextHopRewrite(inout headers_t hdr, inout local_metadata_t meta) {
    apply {
        meta.ipv4_checksum_inv = ~hdr.ipv4.hdr_checksum;
        meta.ipv4_ttl_inv = ~hdr.ipv4.ttl;
        meta.ipv4_protocol_inv = ~hdr.ipv4.protocol;
        meta.ipv4_total_len_inv = ~hdr.ipv4.total_len;
        hdr.ethernet.src_addr = meta.next_hop_src_mac;
        hdr.ethernet.dst_addr = meta.next_hop_dst_mac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }
}

#endif  // DLCP_NEXT_HOP_P4
