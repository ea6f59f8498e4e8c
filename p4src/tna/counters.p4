// Per (port, class) packet counters, TNA flavour: same names and indices as
// v1model/counters.p4 (index = egress_port << DLCP_CLASS_BITS | class).
//   dropped, trimmed: counted in ingress where the decision is taken, under
//                     the class (queue) the packet was headed for;
//   forwarded:        counted in egress under the queue the packet left from
//                     (a trimmed header counts as forwarded in TRIM_QUEUE).
#ifndef DLCP_TNA_COUNTERS_P4
#define DLCP_TNA_COUNTERS_P4

// verdict: what tna/occupancy.p4 decided (TNA has no meta.trim and meta.congested).
control DropCounters(in local_metadata_t meta, in congestion_action_t verdict) {
    Counter<bit<64>, port_class_t>(PORT_CLASS_SLOTS, CounterType_t.PACKETS_AND_BYTES) dropped;
    Counter<bit<64>, port_class_t>(PORT_CLASS_SLOTS, CounterType_t.PACKETS_AND_BYTES) trimmed;

    apply {
        if (verdict == ON_CONGESTION_TRIM) {
            trimmed.count(meta.port_class);
        }
        if (verdict == ON_CONGESTION_DROP) {
            dropped.count(meta.port_class);
        }
    }
}

control ForwardCounters(in egress_intrinsic_metadata_t eg_intr_md) {
    Counter<bit<64>, port_class_t>(PORT_CLASS_SLOTS, CounterType_t.PACKETS_AND_BYTES) forwarded;

    apply {
        forwarded.count((dlcp_port_t) eg_intr_md.egress_port ++ (dlcp_class_t) eg_intr_md.egress_qid);
    }
}

#endif  // DLCP_TNA_COUNTERS_P4
