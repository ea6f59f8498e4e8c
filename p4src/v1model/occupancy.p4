// Queue occupancy, v1model flavour.
//
// BMv2 reports a queue's depth only in egress (standard_metadata.enq_qdepth /
// deq_qdepth, in packets, per priority queue with --priority-queues), but
// the drop-or-trim decision has to be taken in ingress: a trimmed header must
// be enqueued in TRIM_QUEUE, not behind the data it reports lost. Ingress
// therefore keeps an estimate in a register shared with egress:
//   * ingress adds 1 for every packet it admits to (port, queue);
//   * egress overwrites the slot with deq_qdepth, the true number of packets
//     left behind the one just dequeued, so the estimate cannot drift.
// (v1model has no qid field: BMv2 serves a packet from the priority queue
// standard_metadata.priority names, and that field reaches egress intact.)
// Between two dequeues the estimate is exact (admitted minus departed); the
// only error is a packet between ingress and the enqueue when egress writes.
#ifndef DLCP_V1MODEL_OCCUPANCY_P4
#define DLCP_V1MODEL_OCCUPANCY_P4

// Top level, so that both the ingress and the egress control can reach it.
register<bit<32>>(PORT_CLASS_SLOTS) queue_occupancy;

control QueueOccupancy(inout local_metadata_t meta) {
    apply {
        bit<32> occupancy;
        queue_occupancy.read(occupancy, (bit<32>) meta.port_class);
        meta.congested = meta.on_congestion != ON_CONGESTION_ADMIT && occupancy > meta.drop_threshold;
        meta.trim = meta.congested && meta.on_congestion == ON_CONGESTION_TRIM;
        if (!meta.congested) {
            queue_occupancy.write((bit<32>) meta.port_class, occupancy + 1);
        }
    }
}

control QueueOccupancyFeedback(in standard_metadata_t sm) {
    apply {
        port_class_t slot = (dlcp_port_t) sm.egress_port ++ (dlcp_class_t) sm.priority;
        queue_occupancy.write((bit<32>) slot, (bit<32>) sm.deq_qdepth);
    }
}

#endif  // DLCP_V1MODEL_OCCUPANCY_P4
