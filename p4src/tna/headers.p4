// TNA-only headers and metadata: the bridged/mirror header that tells egress
// what it is looking at, and the packet generator's drain packets.
#ifndef DLCP_TNA_HEADERS_P4
#define DLCP_TNA_HEADERS_P4

// The packet generator's port in pipe 0: devport 68 on Tofino 1, 6 on
// Tofino 2. Programs running the drain app on other pipes add 128 per pipe
// (docs/switch.md).
#if __TARGET_TOFINO__ == 2
const PortId_t PKTGEN_PORT = 6;
#else
const PortId_t PKTGEN_PORT = 68;
#endif

// Mirror type of an ingress-to-egress mirror that trims (ingress deparser).
const MirrorType_t MIRROR_TYPE_TRIM = 1;

typedef bit<8> pkt_kind_t;
const pkt_kind_t PKT_KIND_BRIDGED = 1;     // a normal packet from ingress
const pkt_kind_t PKT_KIND_TRIMMED = 2;     // the truncated mirror copy of a trimmed packet

// First byte of every packet that reaches egress: bridged metadata on normal
// packets, the mirror header on trim copies. Egress strips it.
header bridge_h {
    pkt_kind_t kind;
}

// Payload of a drain packet from the packet generator (see occupancy.p4).
header queue_drain_h {
    bit<32> packets;
}

struct ingress_headers_t {
    bridge_h bridge;
    pktgen_timer_header_t pktgen;
    queue_drain_h drain;
    headers_t pkt;
}

struct ingress_metadata_t {
    local_metadata_t dlcp;
    MirrorId_t trim_session;    // the egress port's trim mirror session (trim_sessions.p4)
    // The mirror header's kind (PKT_KIND_TRIMMED), set in ingress: Tofino
    // takes a mirror header's fields from the PHV only, never a constant.
    pkt_kind_t mirror_kind;
}

struct egress_headers_t {
    bridge_h bridge;
}

struct egress_metadata_t {
}

#endif  // DLCP_TNA_HEADERS_P4
