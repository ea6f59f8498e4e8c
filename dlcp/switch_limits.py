"""Limits and defaults of DLCP's software switch (``testbed/switch``).

Defined in the core so that the configuration (``dlcp.testbed.switch.config``)
and the CLI's help text read the same values.
"""

from __future__ import annotations

from pathlib import Path

from dlcp.p4 import sizes

MAX_PORT = (1 << sizes.PORT_BITS) - 2
"""Highest usable port number: 9-bit ports, and v1model reserves 511 as its drop port."""
MIN_RATE_BPS = 1_000
MAX_RATE_BPS = 1_000_000_000_000
MIN_BUFFER = 16 * 1024
MAX_BUFFER = 256 * 1024 * 1024
DEFAULT_BUFFER = 4 * 1024 * 1024
MAX_DELAY_NS = 10_000_000_000
DEFAULT_MAX_FRAME = 9216
"""Largest frame the switch takes (jumbo frames of a 9000-byte MTU fit); bigger ones are counted as oversize."""
MAX_MAX_FRAME = 65536
DEFAULT_BURST_S = 0.001
"""A shaper's bucket holds this much time at its rate (and at least two largest frames)."""
DEFAULT_RX_BLOCK = 1 << 20
DEFAULT_RX_BLOCKS = 16
DEFAULT_STATS_DIR = Path("/run/dlcp")
"""Where a running switch's statistics socket lives (``switch-<device id>.sock``)."""

# The software switch's P4Runtime server (dlcp.testbed.switch.p4rt.server): what one client may ask of it.
# A legitimate controller stays far below each; they bound the memory and the time one request can take.
P4RT_MAX_MESSAGE_BYTES = 64 << 20
"""Largest request the server receives (gRPC's limit: above it, RESOURCE_EXHAUSTED before any parsing)."""
P4RT_MAX_STREAMS = 16
"""Open StreamChannels at most; more get RESOURCE_EXHAUSTED (each holds a worker thread)."""
P4RT_MAX_WRITE_UPDATES = 65_536
"""Updates in one Write, an update that writes every cell of a counter counting as its cells. Everything
DLCP's program can hold (its tables, action profile and counter cells) is about 17,000 updates."""
P4RT_MAX_READ_ENTITIES = 65_536
"""Entities one Read may ask for, and entities one Read may answer (everything installed is about 17,000)."""
P4RT_MAX_ENTRY_METADATA_BYTES = 4096
"""A table entry's opaque ``metadata``: kept with the entry, so the tables' sizes times this bound its memory."""
P4RT_MAX_PENDING_STREAM_BYTES = 1 << 20
"""Messages queued to one stream and not yet taken by its client; above it the server reads no further
message from that stream until the client reads (a PacketOut that is refused comes back in full)."""
P4RT_MAX_PENDING_STREAM_MESSAGES = 1024
"""Messages queued to a stream whose client reads none (announcements of other controllers' arbitration):
above it the stream is cancelled."""
