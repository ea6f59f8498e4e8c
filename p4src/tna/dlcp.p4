// DLCP data plane for Tofino (TNA). The same controls, tables, actions and
// keys as ../v1model/dlcp.p4, so one controller drives both; what the
// controller must additionally set up on Tofino (queues, trim mirror
// sessions, the drain app of the packet generator) is in docs/switch.md.
//
// This file only includes and wires the controls.
#include <core.p4>
// The Tofino compiler's driver sets __TARGET_TOFINO__ to the chip: 1 for
// Tofino (--arch tna), 2 for Tofino 2 (--arch t2na).
#if __TARGET_TOFINO__ == 2
#include <t2na.p4>
#else
#include <tna.p4>
#endif

#include "../common/headers.p4"
#include "../common/parser.p4"
#include "../common/routing.p4"
#include "../common/next_hop.p4"
#include "../common/classification.p4"
#include "../common/selective_drop.p4"
#include "../common/trimming.p4"
#include "headers.p4"
#include "ecmp.p4"
#include "occupancy.p4"
#include "counters.p4"
#include "trim_sessions.p4"

parser DlcpIngressParser(packet_in pkt, out ingress_headers_t hdr, out ingress_metadata_t meta,
                         out ingress_intrinsic_metadata_t ig_intr_md) {
    PacketParser() packet_parser;

    state start {
        meta = { ... };  // zero every field: the controls read some before they write them
        pkt.extract(ig_intr_md);
        pkt.advance(PORT_METADATA_SIZE);
        transition select(ig_intr_md.ingress_port) {
            PKTGEN_PORT: parse_drain;
            default: parse_packet;
        }
    }

    state parse_drain {
        pkt.extract(hdr.pktgen);
        pkt.extract(hdr.drain);
        transition accept;
    }

    state parse_packet {
        packet_parser.apply(pkt, hdr.pkt);
        transition accept;
    }
}

control DlcpIngress(inout ingress_headers_t hdr, inout ingress_metadata_t meta,
                    in ingress_intrinsic_metadata_t ig_intr_md,
                    in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                    inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                    inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    Routing() routing;
    Classification() classification;
    Ecmp() ecmp;
    NextHopRewrite() next_hop_rewrite;
    SelectiveDrop() selective_drop;
    QueueOccupancy() occupancy;
    DropCounters() drop_counters;
    TrimHeaders() trim_headers;
    TrimSessions() trim_sessions;

    apply {
        // A drain packet from the packet generator only drains the occupancy
        // estimate (tna/occupancy.p4): index = batch (port) ++ packet (class).
        bool is_drain = hdr.drain.isValid();
        port_class_t drain_slot = (dlcp_port_t) hdr.pktgen.batch_id ++ (dlcp_class_t) hdr.pktgen.packet_id;
        if (!is_drain) {
            routing.apply(hdr.pkt, meta.dlcp);
            // Classification reads only headers, so unlike on v1model it does
            // not wait for the route: it runs in the same stages as
            // ipv4_routes (its result is unused when routing drops).
            classification.apply(hdr.pkt, meta.dlcp);
            if (!meta.dlcp.routed_drop) {
                ecmp.apply(hdr.pkt, meta.dlcp);
            }
            if (!meta.dlcp.routed_drop) {
                next_hop_rewrite.apply(hdr.pkt, meta.dlcp);
                meta.dlcp.port_class = meta.dlcp.egress_port ++ meta.dlcp.queue;
                selective_drop.apply(hdr.pkt, meta.dlcp);
                // Looked up for every routed packet, beside the threshold, so the trim
                // below only reads it (no stage waits for the verdict to look it up).
                trim_sessions.apply(meta.dlcp, meta.trim_session);
            }
        }
        congestion_action_t verdict;
        occupancy.apply(meta.dlcp, is_drain, drain_slot, hdr.drain.packets, verdict);
        // No `exit`: each outcome is one branch, so the compiler sees the
        // branches exclude each other.
        if (is_drain || meta.dlcp.routed_drop) {
            ig_dprsr_md.drop_ctl = 1;
        } else {
            drop_counters.apply(meta.dlcp, verdict);
            // Three independent tests of the verdict (always one of the three), not
            // an if / else-if chain: the Tofino compiler evaluates them side by side;
            // the chain cost it three stages (12 of 12 ingress stages against 9).
            if (verdict == ON_CONGESTION_TRIM) {
                // Ingress cannot cut the payload: the trim mirror session of the
                // egress port truncates the copy and enqueues it in TRIM_QUEUE;
                // the original is dropped below (drop_ctl bit 0 spares mirror copies).
                // No bridged header: the copy carries the mirror header instead.
                trim_headers.apply(hdr.pkt);
                // meta.trim_session: the port's session, from trim_sessions.
                ig_dprsr_md.mirror_type = MIRROR_TYPE_TRIM;
                meta.mirror_kind = PKT_KIND_TRIMMED;
            }
            if (verdict != ON_CONGESTION_ADMIT) {
                ig_dprsr_md.drop_ctl = 1;
            }
            if (verdict == ON_CONGESTION_ADMIT) {
                ig_tm_md.ucast_egress_port = meta.dlcp.egress_port;
                ig_tm_md.qid = (QueueId_t) meta.dlcp.queue;
                ig_tm_md.ingress_cos = (bit<3>) meta.dlcp.queue;
                hdr.bridge.setValid();
                hdr.bridge.kind = PKT_KIND_BRIDGED;
            }
        }
    }
}

control DlcpIngressDeparser(packet_out pkt, inout ingress_headers_t hdr, in ingress_metadata_t meta,
                            in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    // Mirror() selected by the `if`, not Mirror(MIRROR_TYPE_TRIM): the Tofino
    // compiler adds a Mirror() of its own to this deparser, selected by an
    // `if` on mirror_type, and refuses to mix the two forms ("Inconsistent
    // mirror selectors"). p4c's front end calls the form deprecated.
    Mirror() trim_mirror;
    Checksum() ipv4_checksum;
    PacketDeparser() packet_deparser;

    apply {
        if (ig_dprsr_md.mirror_type == MIRROR_TYPE_TRIM) {
            trim_mirror.emit<bridge_h>(meta.trim_session, {meta.mirror_kind});
        }
        // The incremental update of common/next_hop.p4, ~(~HC + ~m + m'):
        // Checksum.update is the one's complement of the one's complement sum.
        hdr.pkt.ipv4.hdr_checksum = ipv4_checksum.update({
            meta.dlcp.ipv4_checksum_inv, meta.dlcp.ipv4_ttl_inv, meta.dlcp.ipv4_protocol_inv,
            meta.dlcp.ipv4_total_len_inv, hdr.pkt.ipv4.ttl, hdr.pkt.ipv4.protocol, hdr.pkt.ipv4.total_len});
        pkt.emit(hdr.bridge);
        packet_deparser.apply(pkt, hdr.pkt);
    }
}

// Egress only strips the bridged (or mirror) byte and counts: the headers
// were rewritten in ingress, so the rest of the packet is payload to it.
parser DlcpEgressParser(packet_in pkt, out egress_headers_t hdr, out egress_metadata_t meta,
                        out egress_intrinsic_metadata_t eg_intr_md) {
    state start {
        pkt.extract(eg_intr_md);
        pkt.extract(hdr.bridge);
        transition accept;
    }
}

control DlcpEgress(inout egress_headers_t hdr, inout egress_metadata_t meta,
                   in egress_intrinsic_metadata_t eg_intr_md,
                   in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
                   inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
                   inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {
    ForwardCounters() forward_counters;

    apply {
        forward_counters.apply(eg_intr_md);
        hdr.bridge.setInvalid();
    }
}

control DlcpEgressDeparser(packet_out pkt, inout egress_headers_t hdr, in egress_metadata_t meta,
                           in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    apply {
        pkt.emit(hdr);
    }
}

Pipeline(
    DlcpIngressParser(),
    DlcpIngress(),
    DlcpIngressDeparser(),
    DlcpEgressParser(),
    DlcpEgress(),
    DlcpEgressDeparser()
) pipe;

Switch(pipe) main;
