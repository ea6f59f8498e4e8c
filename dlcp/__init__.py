"""DLCP: a loss-tolerant, priority-aware communication stack for distributed DNN training.

The core package (``dlcp``) holds the wire format, the priority policy and the
bounded-loss message assembler. It does no I/O; the host transport
(``dlcp.host``), the switch programs, the software switch and the simulator all
reuse it.
"""

__version__ = "0.1.0"
