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
