"""Controller-visible names of the DLCP P4 program (as in the P4Info), for the vectors and the controller.

Identical for v1model and TNA, except the ``TNA_*`` names: what only the TNA
program has. ``tests/p4/test_p4info.py`` checks every name here against the
committed P4Info and the P4 sources, so a rename on either side fails a test.
"""

from __future__ import annotations

IPV4_ROUTES = "DlcpIngress.routing.ipv4_routes"
SET_NEXT_HOP_GROUP = "DlcpIngress.routing.set_next_hop_group"
ROUTING_DROP = "DlcpIngress.routing.drop_packet"

NEXT_HOPS = "DlcpIngress.ecmp.next_hops"
SET_NEXT_HOP = "DlcpIngress.ecmp.set_next_hop"
ECMP_DROP = "DlcpIngress.ecmp.drop_packet"
ECMP_SELECTOR = "DlcpIngress.ecmp.ecmp_selector"

DLCP_PORTS = "DlcpIngress.classification.dlcp_ports"
MARK_DLCP = "DlcpIngress.classification.mark_dlcp"
DLCP_CLASSES = "DlcpIngress.classification.dlcp_classes"
SET_QUEUE = "DlcpIngress.classification.set_queue"
MARK_DROP_ELIGIBLE = "DlcpIngress.classification.mark_drop_eligible"
USE_PACKET_PRIORITY = "DlcpIngress.classification.use_packet_priority"

DLCP_DROP_THRESHOLDS = "DlcpIngress.selective_drop.dlcp_drop_thresholds"
ADMIT_ALL = "DlcpIngress.selective_drop.admit_all"
DROP_ABOVE = "DlcpIngress.selective_drop.drop_above"
TRIM_ABOVE = "DlcpIngress.selective_drop.trim_above"

FORWARDED = "DlcpEgress.forward_counters.forwarded"
DROPPED = "DlcpIngress.drop_counters.dropped"
TRIMMED = "DlcpIngress.drop_counters.trimmed"
COUNTERS = (FORWARDED, DROPPED, TRIMMED)

QUEUE_OCCUPANCY = "queue_occupancy"

TABLES = (IPV4_ROUTES, NEXT_HOPS, DLCP_PORTS, DLCP_CLASSES, DLCP_DROP_THRESHOLDS)
ACTIONS = (
    SET_NEXT_HOP_GROUP,
    ROUTING_DROP,
    SET_NEXT_HOP,
    ECMP_DROP,
    MARK_DLCP,
    SET_QUEUE,
    MARK_DROP_ELIGIBLE,
    USE_PACKET_PRIORITY,
    ADMIT_ALL,
    DROP_ABOVE,
    TRIM_ABOVE,
)

# TNA only (p4src/tna/trim_sessions.p4): the egress port's trim mirror session, written by the controller.
TRIM_SESSIONS = "DlcpIngress.trim_sessions.port_sessions"
SET_TRIM_SESSION = "DlcpIngress.trim_sessions.set_trim_session"
NO_TRIM_SESSION = "DlcpIngress.trim_sessions.no_trim_session"

TNA_TABLES = (TRIM_SESSIONS,)
TNA_ACTIONS = (SET_TRIM_SESSION, NO_TRIM_SESSION)
