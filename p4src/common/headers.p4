// Headers and metadata shared by the v1model and TNA programs.
#ifndef DLCP_HEADERS_P4
#define DLCP_HEADERS_P4

#include "constants.p4"
#include "dlcp_header.p4"

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8> IPPROTO_TCP = 6;
const bit<8> IPPROTO_UDP = 17;

typedef bit<48> mac_addr_t;
typedef bit<32> ipv4_addr_t;

header ethernet_h {
    mac_addr_t dst_addr;
    mac_addr_t src_addr;
    bit<16> ether_type;
}

header ipv4_h {
    bit<4> version;
    bit<4> ihl;
    bit<8> tos;
    bit<16> total_len;
    bit<16> identification;
    bit<3> flags;
    bit<13> frag_offset;
    bit<8> ttl;
    bit<8> protocol;
    bit<16> hdr_checksum;
    ipv4_addr_t src_addr;
    ipv4_addr_t dst_addr;
}

// TCP is parsed only as far as its ports, for the ECMP 5-tuple.
header l4_ports_h {
    bit<16> src_port;
    bit<16> dst_port;
}

header udp_h {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

struct headers_t {
    ethernet_h ethernet;
    ipv4_h ipv4;
    l4_ports_h tcp;
    udp_h udp;
    dlcp_h dlcp;  // extracted from every UDP datagram long enough; `is_dlcp` says whether it is one
}

// What happens to a packet once its queue is congested (action of dlcp_drop_thresholds).
typedef bit<2> congestion_action_t;
const congestion_action_t ON_CONGESTION_ADMIT = 0;
const congestion_action_t ON_CONGESTION_DROP = 1;
const congestion_action_t ON_CONGESTION_TRIM = 2;

struct local_metadata_t {
    bool routed_drop;           // no route, TTL expired or not IPv4
    dlcp_port_t egress_port;
    mac_addr_t next_hop_src_mac;
    mac_addr_t next_hop_dst_mac;
    bit<16> next_hop_group;
    bit<16> l4_src_port;
    bit<16> l4_dst_port;
    bit<32> ecmp_entropy;       // DLCP data: seq; everything else: 0 (5-tuple only)
    bool is_dlcp;               // a well-formed DLCP packet on a DLCP port
    dlcp_class_t queue;         // egress queue = priority class
    bool drop_eligible;
    congestion_action_t on_congestion;
    bit<32> drop_threshold;     // occupancy (packets) above which an eligible packet is dropped or trimmed
    bool congested;             // eligible and its queue is above the threshold
    bool trim;                  // congested and the threshold says trim
    port_class_t port_class;    // egress_port ++ queue: index of counters and occupancy
    // The IPv4 checksum update (common/next_hop.p4): the complements of the
    // checksum and of the words ingress rewrites, taken before the rewrite.
    bit<16> ipv4_checksum_inv;
    bit<8> ipv4_ttl_inv;
    bit<8> ipv4_protocol_inv;
    bit<16> ipv4_total_len_inv;
}

#endif  // DLCP_HEADERS_P4
