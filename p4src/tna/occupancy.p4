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

control QueueOccupancy(inout local_metadata_t meta, in bool is_drain, in port_class_t drain_slot,
                       in bit<32> drain_packets) {
    // Same controller-visible name as the v1model register.
    @name(".queue_occupancy")
    Register<bit<32>, port_class_t>(PORT_CLASS_SLOTS, 0) queue_occupancy;

    // p4c's def-use analysis does not see that the control's parameters are
    // set when a register action runs, hence the @noWarn on the two that read them.
    RegisterAction<bit<32>, port_class_t, bit<1>>(queue_occupancy) admit = {
        @noWarn("uninitialized-use")
        void apply(inout bit<32> value, out bit<1> congested) {
            if (value > meta.drop_threshold) {
                congested = 1;
            } else {
                value = value + 1;
                congested = 0;
            }
        }
    };

    RegisterAction<bit<32>, port_class_t, bit<1>>(queue_occupancy) count = {
        void apply(inout bit<32> value, out bit<1> congested) {
            value = value + 1;
            congested = 0;
        }
    };

    RegisterAction<bit<32>, port_class_t, bit<1>>(queue_occupancy) drain = {
        @noWarn("uninitialized-use")
        void apply(inout bit<32> value, out bit<1> congested) {
            if (value > drain_packets) {
                value = value - drain_packets;
            } else {
                value = 0;
            }
            congested = 0;
        }
    };

    apply {
        bit<1> congested = 0;
        if (is_drain) {
            drain.execute(drain_slot);
        } else if (meta.on_congestion == ON_CONGESTION_ADMIT) {
            count.execute(meta.port_class);
        } else {
            congested = admit.execute(meta.port_class);
        }
        // if/else, not `meta.congested = congested == 1`: Tofino cannot make
        // a bool from a comparison in an action ("source of modify_field invalid").
        meta.congested = false;
        meta.trim = false;
        if (congested == 1) {
            meta.congested = true;
            if (meta.on_congestion == ON_CONGESTION_TRIM) {
                meta.trim = true;
            }
        }
    }
}

#endif  // DLCP_TNA_OCCUPANCY_P4
