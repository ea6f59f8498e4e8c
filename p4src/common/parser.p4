// The packet parser and deparser shared by both architectures. Each
// architecture's top-level parser handles its intrinsic metadata and then
// applies PacketParser.
#ifndef DLCP_PARSER_P4
#define DLCP_PARSER_P4

#include "headers.p4"

parser PacketParser(packet_in pkt, out headers_t hdr) {
    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        // Options and fragments are routed, never looked into: the L4 header is
        // not at a fixed offset, or not there at all.
        transition select(hdr.ipv4.ihl, hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (5, 0, IPPROTO_UDP): parse_udp;
            (5, 0, IPPROTO_TCP): parse_tcp;
            default: accept;
        }
    }

    state parse_tcp {
        pkt.extract(hdr.tcp);
        transition accept;
    }

    state parse_udp {
        pkt.extract(hdr.udp);
        // Any datagram long enough to hold a DLCP header has one extracted; the
        // ingress decides by UDP port (a constant and the dlcp_ports table)
        // whether it is DLCP. A shorter one stays plain UDP, so a truncated
        // DLCP datagram is forwarded like any other UDP datagram.
        // Lengths 0 .. MIN_DLCP_UDP_LENGTH - 1 (0 .. 47) as value/mask cases:
        // Tofino's parser matches a field against values and masks only; a
        // comparison (`length < 48`) or a range is "use of uninitialized
        // parser value in a select" there. tests/p4/test_parser_cases.py
        // checks that these cases cover exactly the lengths below the constant.
        transition select(hdr.udp.length) {
            0x0000 &&& 0xffe0: accept;  // 0 .. 31
            0x0020 &&& 0xfff0: accept;  // 32 .. 47
            default: parse_dlcp;
        }
    }

    state parse_dlcp {
        pkt.extract(hdr.dlcp);
        transition accept;
    }
}

control PacketDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.tcp);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.dlcp);
    }
}

#endif  // DLCP_PARSER_P4
