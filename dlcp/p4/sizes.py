"""Switch-side constants and sizes shared by the P4 programs, their tests and the software switch.

Wire constants come from :mod:`dlcp.protocol`; what is here is the switch's own
design (queue for non-DLCP traffic, table sizes, index widths). Both are rendered
into ``p4src/common/constants.p4`` by :mod:`dlcp.p4.gen_constants`; nothing in
P4 re-types them.
"""

from __future__ import annotations

from dlcp.frames import ETH_HEADER, IPV4_HEADER, UDP_HEADER
from dlcp.protocol import CONTROL_PRIORITY, HEADER_SIZE, NUM_DROP_CLASSES, NUM_PRIORITY_CLASSES

PORT_BITS = 9
"""Width of a port number: v1model's ``egress_spec`` and TNA's ``PortId_t`` are both 9 bits."""

CLASS_BITS = (NUM_PRIORITY_CLASSES - 1).bit_length()
"""Width of a priority class / egress queue id (3 bits for 8 classes)."""

PORT_CLASS_SLOTS = 1 << (PORT_BITS + CLASS_BITS)
"""Size of every per (port, class) array: index = ``port << CLASS_BITS | class`` (counters, queue occupancy)."""

DEFAULT_QUEUE = 0
"""Queue of non-DLCP traffic and of malformed DLCP packets (forwarded as ordinary UDP)."""

TRIM_QUEUE = CONTROL_PRIORITY
"""Queue of trimmed headers: the top class, so the receiver hears of the loss at once."""

TRIMMED_FRAME_BYTES = ETH_HEADER.size + IPV4_HEADER.size + UDP_HEADER.size + HEADER_SIZE
"""A trimmed packet is cut to Ethernet + IPv4 (no options) + UDP + DLCP header."""

TRIMMED_IPV4_TOTAL_LEN = TRIMMED_FRAME_BYTES - ETH_HEADER.size
"""IPv4 total length of a trimmed packet."""

MIN_DLCP_UDP_LENGTH = UDP_HEADER.size + HEADER_SIZE
"""UDP length below which a datagram cannot hold a DLCP header; the parser leaves it as plain UDP."""

TRIM_SESSION_BASE = 1
"""First trim mirror session id the controller gives a port on Tofino; 0 stands for no session."""

MAX_TRIM_SESSION = 255
"""Largest mirror session id both Tofino chips have: Tofino 2's ids are 8 bits (Tofino 1's 10)."""

TNA_MIRROR_HEADER_BYTES = 1
"""The mirror header a Tofino trim copy carries before the frame (``bridge_h`` in p4src/tna/headers.p4);
the trim mirror session keeps this many bytes more than ``TRIMMED_FRAME_BYTES``."""

TABLE_SIZES: dict[str, int] = {
    # A leaf or spine in a training cluster routes a few hundred host/rack prefixes.
    "IPV4_ROUTES_SIZE": 1024,
    # ECMP groups and their members: one group per destination set, up to 64 uplinks each.
    "ECMP_GROUPS": 256,
    "ECMP_GROUP_SIZE": 64,
    "NEXT_HOPS_SIZE": 1024,
    # UDP ports carried as DLCP besides the default one (one per concurrent job at most).
    "DLCP_PORTS_SIZE": 64,
    # Classification is ternary: a handful of rules per job (type, priority, drop class, role).
    "DLCP_CLASSES_SIZE": 512,
    # One threshold per (queue, drop class).
    "DLCP_DROP_THRESHOLDS_SIZE": NUM_PRIORITY_CLASSES * NUM_DROP_CLASSES,
    # TNA only: the trim mirror session of each egress port, one per session id there is.
    "TRIM_SESSIONS_SIZE": MAX_TRIM_SESSION - TRIM_SESSION_BASE + 1,
}
