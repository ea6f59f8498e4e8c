// DLCP data plane for BMv2 simple_switch / simple_switch_grpc (v1model).
// Run simple_switch with --priority-queues 8 (docs/switch.md): the program
// sets standard_metadata.priority to the packet's class, and without priority
// queues BMv2 drops every packet whose priority is not 0.
//
// This file only includes and wires the controls; each feature is in its own
// file, shared (../common) or v1model-specific (./).
#include <core.p4>
#include <v1model.p4>

#include "../common/headers.p4"
#include "../common/parser.p4"
#include "../common/routing.p4"
#include "../common/next_hop.p4"
#include "../common/classification.p4"
#include "../common/selective_drop.p4"
#include "../common/trimming.p4"
#include "ecmp.p4"
#include "occupancy.p4"
#include "counters.p4"

parser DlcpIngressParser(packet_in pkt, out headers_t hdr, inout local_metadata_t meta,
                         inout standard_metadata_t sm) {
    PacketParser() packet_parser;

    state start {
        packet_parser.apply(pkt, hdr);
        transition accept;
    }
}

// Checksums are not verified: a router forwards what it receives, and the
// receiver's UDP stack checks the datagram.
control DlcpVerifyChecksum(inout headers_t hdr, inout local_metadata_t meta) {
    apply { }
}

control DlcpIngress(inout headers_t hdr, inout local_metadata_t meta, inout standard_metadata_t sm) {
    Routing() routing;
    Classification() classification;
    Ecmp() ecmp;
    NextHopRewrite() next_hop_rewrite;
    SelectiveDrop() selective_drop;
    QueueOccupancy() occupancy;
    DropCounters() drop_counters;
    TrimHeaders() trim_headers;

    apply {
        routing.apply(hdr, meta);
        if (!meta.routed_drop) {
            classification.apply(hdr, meta);
            ecmp.apply(hdr, meta);
        }
        if (meta.routed_drop) {
            mark_to_drop(sm);
            return;
        }
        next_hop_rewrite.apply(hdr, meta);
        meta.port_class = meta.egress_port ++ meta.queue;
        selective_drop.apply(hdr, meta);
        occupancy.apply(meta);
        drop_counters.apply(meta);
        if (meta.trim) {
            trim_headers.apply(hdr);
            truncate((bit<32>) TRIMMED_FRAME_BYTES);
            meta.queue = TRIM_QUEUE;
        } else if (meta.congested) {
            mark_to_drop(sm);
            return;
        }
        sm.egress_spec = meta.egress_port;
        sm.priority = meta.queue;
    }
}

control DlcpEgress(inout headers_t hdr, inout local_metadata_t meta, inout standard_metadata_t sm) {
    QueueOccupancyFeedback() occupancy_feedback;
    ForwardCounters() forward_counters;

    apply {
        occupancy_feedback.apply(sm);
        forward_counters.apply(sm);
    }
}

// The incremental IPv4 checksum update of common/next_hop.p4: csum16 is the
// one's complement of the one's complement sum, so this is ~(~HC + ~m + m').
control DlcpComputeChecksum(inout headers_t hdr, inout local_metadata_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { meta.ipv4_checksum_inv, meta.ipv4_ttl_inv, meta.ipv4_protocol_inv, meta.ipv4_total_len_inv,
              hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.total_len },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

control DlcpDeparser(packet_out pkt, in headers_t hdr) {
    PacketDeparser() packet_deparser;

    apply {
        packet_deparser.apply(pkt, hdr);
    }
}

V1Switch(
    DlcpIngressParser(),
    DlcpVerifyChecksum(),
    DlcpIngress(),
    DlcpEgress(),
    DlcpComputeChecksum(),
    DlcpDeparser()
) main;
