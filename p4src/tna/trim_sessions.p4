// The trim mirror session of each egress port, TNA only (v1model truncates
// the packet itself and needs no session).
//
// The controller writes one entry per port it may trim on, with the session
// it configured for that port (an ingress-to-egress mirror to that port,
// truncated to the trimmed header, in TRIM_QUEUE: docs/switch.md). The
// session is not computed from the port: Tofino 2's mirror session ids are
// 8 bits, fewer than the 9-bit port ids, and an id tied to the port by
// arithmetic made the compiler's PHV allocation fail there. A port without
// an entry gets session 0, which no controller configures: its trimmed
// headers are not sent (the original is still dropped and counted trimmed).
#ifndef DLCP_TNA_TRIM_SESSIONS_P4
#define DLCP_TNA_TRIM_SESSIONS_P4

control TrimSessions(in local_metadata_t meta, out MirrorId_t session) {
    action set_trim_session(MirrorId_t session_id) {
        session = session_id;
    }

    action no_trim_session() {
        session = 0;
    }

    table port_sessions {
        key = {
            meta.egress_port: exact @name("port");
        }
        actions = {
            set_trim_session;
            no_trim_session;
        }
        default_action = no_trim_session();
        size = TRIM_SESSIONS_SIZE;
    }

    apply {
        port_sessions.apply();
    }
}

#endif  // DLCP_TNA_TRIM_SESSIONS_P4
