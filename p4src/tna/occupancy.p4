// Queue occupancy, TNA flavour.
//
// On Tofino 1 the traffic manager reports a queue's depth only to egress
// (eg_intr_md.enq_qdepth / deq_qdepth, in 80-byte cells), and ingress and
// egress cannot share a register. The drop-or-trim decision must be taken in
// ingress (a trimmed header goes to TRIM_QUEUE through a mirror session), so
// ingress keeps its own estimate, a virtual queue per (port, class):
//   * every admitted packet adds 1 (the same register operation that tests
//     the threshold, so test and update are atomic at line rate);
//   * the packet generator's timer app sends drain packets, one per (port,
//     class) slot per period, and each subtracts its `packets` field (not
//     below 0). The controller sets period and amount from the port speed
//     (docs/switch.md, "Tofino").
// The virtual queue drains each class at the configured rate whatever the
// other classes do, so under strict priority it under-estimates low classes.
// On Tofino 2, ghost threads give ingress the real depth (not used here).
#ifndef DLCP_TNA_OCCUPANCY_P4
#define DLCP_TNA_OCCUPANCY_P4

// The register operation answers with the verdict itself, ON_CONGESTION_DROP
// or _TRIM when the queue is above the threshold and ON_CONGESTION_ADMIT
// otherwise, rather than a congested bit: the counters and the trim, drop or
// forward that follow test it directly in the next stage, where a bit would
// first be turned into meta.congested and meta.trim (one stage more). Those
// two v1model fields are not used on TNA.
control QueueOccupancy(in local_metadata_t meta, in bool is_drain, in port_class_t drain_slot,
                       in bit<32> drain_packets, out congestion_action_t verdict) {
    // Same controller-visible name as the v1model register.
    @name(".queue_occupancy")
    Register<bit<32>, port_class_t>(PORT_CLASS_SLOTS, 0) queue_occupancy;

    // p4c's def-use analysis does not see that the control's parameters are
    // set when a register action runs, hence the @noWarn on those that read them.
    RegisterAction<bit<32>, port_class_t, congestion_action_t>(queue_occupancy) admit_or_drop = {
        @noWarn("uninitialized-use")
        void apply(inout bit<32> value, out congestion_action_t result) {
            if (value > meta.drop_threshold) {
                result = ON_CONGESTION_DROP;
            } else {
                value = value + 1;
                result = ON_CONGESTION_ADMIT;
            }
        }
    };

    RegisterAction<bit<32>, port_class_t, congestion_action_t>(queue_occupancy) admit_or_trim = {
        @noWarn("uninitialized-use")
        void apply(inout bit<32> value, out congestion_action_t result) {
            if (value > meta.drop_threshold) {
                result = ON_CONGESTION_TRIM;
            } else {
                value = value + 1;
                result = ON_CONGESTION_ADMIT;
            }
        }
    };

    RegisterAction<bit<32>, port_class_t, congestion_action_t>(queue_occupancy) count = {
        void apply(inout bit<32> value, out congestion_action_t result) {
            value = value + 1;
            result = ON_CONGESTION_ADMIT;
        }
    };

    RegisterAction<bit<32>, port_class_t, congestion_action_t>(queue_occupancy) drain = {
        @noWarn("uninitialized-use")
        void apply(inout bit<32> value, out congestion_action_t result) {
            if (value > drain_packets) {
                value = value - drain_packets;
            } else {
                value = 0;
            }
            result = ON_CONGESTION_ADMIT;
        }
    };

    // A packet routing drops is not counted in (it never reaches a queue).
    apply {
        verdict = ON_CONGESTION_ADMIT;
        if (is_drain) {
            drain.execute(drain_slot);
        } else if (!meta.routed_drop) {
            if (meta.on_congestion == ON_CONGESTION_DROP) {
                verdict = admit_or_drop.execute(meta.port_class);
            } else if (meta.on_congestion == ON_CONGESTION_TRIM) {
                verdict = admit_or_trim.execute(meta.port_class);
            } else {
                count.execute(meta.port_class);
            }
        }
    }
}

#endif  // DLCP_TNA_OCCUPANCY_P4
