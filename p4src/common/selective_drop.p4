// Selective drop, the part both architectures share: the per (queue, drop
// class) threshold and what to do above it. Where the queue occupancy comes
// from is architecture-specific (v1model/occupancy.p4, tna/occupancy.p4);
// the threshold is looked up first so that the occupancy check and update
// can be one register operation on Tofino.
#ifndef DLCP_SELECTIVE_DROP_P4
#define DLCP_SELECTIVE_DROP_P4

#include "headers.p4"

control SelectiveDrop(in headers_t hdr, inout local_metadata_t meta) {
    action admit_all() {
        meta.on_congestion = ON_CONGESTION_ADMIT;
        meta.drop_threshold = 0;
    }

    // Drop an eligible packet that finds more than `threshold` packets in its queue.
    action drop_above(bit<32> threshold) {
        meta.on_congestion = ON_CONGESTION_DROP;
        meta.drop_threshold = threshold;
    }

    // Same test, but trim the packet to its headers and send it in TRIM_QUEUE
    // (NDP-style): the receiver learns of the loss at once.
    action trim_above(bit<32> threshold) {
        meta.on_congestion = ON_CONGESTION_TRIM;
        meta.drop_threshold = threshold;
    }

    table dlcp_drop_thresholds {
        key = {
            meta.queue: exact @name("queue");
            hdr.dlcp.drop_class: exact @name("drop_class");
        }
        actions = {
            admit_all;
            drop_above;
            trim_above;
        }
        default_action = admit_all();
        size = DLCP_DROP_THRESHOLDS_SIZE;
    }

    apply {
        meta.on_congestion = ON_CONGESTION_ADMIT;
        meta.drop_threshold = 0;
        if (meta.drop_eligible) {
            dlcp_drop_thresholds.apply();
        }
    }
}

#endif  // DLCP_SELECTIVE_DROP_P4
