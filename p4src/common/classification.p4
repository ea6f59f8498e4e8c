// DLCP recognition and classification: which packets are DLCP, which egress
// queue each goes to and whether it is drop-eligible. Pure tables, no
// externs, so both architectures share it.
#ifndef DLCP_CLASSIFICATION_P4
#define DLCP_CLASSIFICATION_P4

#include "headers.p4"

control Classification(in headers_t hdr, inout local_metadata_t meta) {
    // ---- recognition: by UDP destination port ----
    action mark_dlcp() {
        meta.is_dlcp = true;
    }

    // Ports other than DLCP_UDP_PORT that carry DLCP (`transport.port` of a job).
    table dlcp_ports {
        key = {
            hdr.udp.dst_port: exact @name("dst_port");
        }
        actions = {
            mark_dlcp;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = DLCP_PORTS_SIZE;
    }

    // ---- classification ----
    action set_queue(dlcp_class_t queue) {
        meta.queue = queue;
        meta.drop_eligible = false;
    }

    action mark_drop_eligible(dlcp_class_t queue) {
        meta.queue = queue;
        meta.drop_eligible = true;
    }

    // The default: the packet's own priority class is its queue, and nothing
    // is drop-eligible until the controller says so.
    action use_packet_priority() {
        meta.queue = (dlcp_class_t) hdr.dlcp.priority;
        meta.drop_eligible = false;
    }

    // Keys: job, packet type, priority class, drop class and role. The role is
    // the message kind: PUSH/PULL are the parameter-server roles,
    // REDUCE_SCATTER/ALL_GATHER the collective ones.
    table dlcp_classes {
        key = {
            hdr.dlcp.job_id: ternary @name("job_id");
            hdr.dlcp.packet_type: ternary @name("packet_type");
            hdr.dlcp.priority: ternary @name("priority");
            hdr.dlcp.drop_class: ternary @name("drop_class");
            hdr.dlcp.kind: ternary @name("kind");
        }
        actions = {
            set_queue;
            mark_drop_eligible;
            use_packet_priority;
        }
        default_action = use_packet_priority();
        size = DLCP_CLASSES_SIZE;
    }

    apply {
        meta.is_dlcp = false;
        meta.queue = DEFAULT_QUEUE;
        meta.drop_eligible = false;
        // A malformed DLCP packet (wrong version, unknown type, priority or
        // drop class out of range) is forwarded as ordinary UDP: queue
        // DEFAULT_QUEUE, 5-tuple hash, never drop-eligible. The receiver
        // drops and counts a bad version or type; it ignores the classes
        // (docs/switch.md, "Malformed packets"). Checked before the port, not
        // after it (clearing is_dlcp again): on Tofino a second write of
        // is_dlcp would cost a stage on the way to the ECMP hash.
        if (hdr.dlcp.isValid() && hdr.dlcp.version == DLCP_VERSION && hdr.dlcp.packet_type <= DLCP_TYPE_MAX
                && hdr.dlcp.priority < DLCP_NUM_PRIORITY_CLASSES && hdr.dlcp.drop_class < DLCP_NUM_DROP_CLASSES) {
            if (hdr.udp.dst_port == DLCP_UDP_PORT) {
                meta.is_dlcp = true;
            } else {
                dlcp_ports.apply();
            }
        }
        if (meta.is_dlcp) {
            dlcp_classes.apply();
            // Whatever the table says, control packets, retransmissions and
            // drop class 0 are never drop-eligible (docs/protocol.md section 4).
            if (hdr.dlcp.packet_type != DLCP_TYPE_DATA || (hdr.dlcp.flags & DLCP_FLAG_RETX) != 0
                    || hdr.dlcp.drop_class == 0) {
                meta.drop_eligible = false;
            }
            // A header trimmed upstream keeps its original priority field but
            // belongs with the control traffic, ahead of every data queue.
            if (hdr.dlcp.packet_type == DLCP_TYPE_TRIMMED) {
                meta.queue = TRIM_QUEUE;
            }
        }
        // ECMP entropy: DLCP data packets are sprayed per packet (docs/protocol.md
        // section 6), on seq ^ msg_id, so that one-packet messages (all seq 0)
        // spread too (one XOR: Tofino fits no second one in the same action);
        // every other packet, DLCP control included, stays on its 5-tuple's path.
        meta.ecmp_entropy = 0;
        if (meta.is_dlcp && hdr.dlcp.packet_type == DLCP_TYPE_DATA) {
            meta.ecmp_entropy = hdr.dlcp.seq ^ hdr.dlcp.msg_id;
        }
        if (hdr.udp.isValid()) {
            meta.l4_src_port = hdr.udp.src_port;
            meta.l4_dst_port = hdr.udp.dst_port;
        } else if (hdr.tcp.isValid()) {
            meta.l4_src_port = hdr.tcp.src_port;
            meta.l4_dst_port = hdr.tcp.dst_port;
        } else {
            meta.l4_src_port = 0;
            meta.l4_dst_port = 0;
        }
    }
}

#endif  // DLCP_CLASSIFICATION_P4
