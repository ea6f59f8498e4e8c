// Per (port, class) packet counters, v1model flavour. Index: port_class_t,
// i.e. egress_port << DLCP_CLASS_BITS | class.
//   dropped, trimmed: counted in ingress where the decision is taken, under
//                     the class (queue) the packet was headed for;
//   forwarded:        counted in egress under the queue the packet left from
//                     (a trimmed header counts as forwarded in TRIM_QUEUE).
#ifndef DLCP_V1MODEL_COUNTERS_P4
#define DLCP_V1MODEL_COUNTERS_P4

control DropCounters(in local_metadata_t meta) {
    counter(PORT_CLASS_SLOTS, CounterType.packets_and_bytes) dropped;
    counter(PORT_CLASS_SLOTS, CounterType.packets_and_bytes) trimmed;

    apply {
        if (meta.trim) {
            trimmed.count((bit<32>) meta.port_class);
        } else if (meta.congested) {
            dropped.count((bit<32>) meta.port_class);
        }
    }
}

control ForwardCounters(in standard_metadata_t sm) {
    counter(PORT_CLASS_SLOTS, CounterType.packets_and_bytes) forwarded;

    apply {
        port_class_t slot = (dlcp_port_t) sm.egress_port ++ (dlcp_class_t) sm.priority;
        forwarded.count((bit<32>) slot);
    }
}

#endif  // DLCP_V1MODEL_COUNTERS_P4
