// The header rewrite of a trimmed packet, done in ingress on both
// architectures. The cut itself is architecture-specific: v1model truncates
// the packet (truncate()), TNA mirrors it through a truncating mirror session
// and drops the original (tna/dlcp.p4).
#ifndef DLCP_TRIMMING_P4
#define DLCP_TRIMMING_P4

#include "headers.p4"

control TrimHeaders(inout headers_t hdr) {
    apply {
        // docs/protocol.md section 3: type rewritten from DATA, length unchanged.
        hdr.dlcp.packet_type = DLCP_TYPE_TRIMMED;
        hdr.udp.length = MIN_DLCP_UDP_LENGTH;
        // The IPv4 checksum follows after ingress (common/next_hop.p4 saved the old total length).
        hdr.ipv4.total_len = TRIMMED_IPV4_TOTAL_LEN;
        // IPv4 allows a zero UDP checksum; the payload it covered is gone. The
        // UDP checksum needs no other update: routing changes no field it
        // covers (TTL is not in the pseudo-header), so neither target computes one.
        hdr.udp.checksum = 0;
    }
}

#endif  // DLCP_TRIMMING_P4
