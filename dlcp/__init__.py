"""DLCP: a loss-tolerant, priority-aware communication stack for distributed DNN training.

The core package (``dlcp``) holds the wire format, the priority policy and the
bounded-loss message assembler; it does no I/O. The other layers share its
namespace: ``dlcp.host`` (UDP transport and collectives) and ``dlcp.host.shim``
(PyTorch and MXNet), with ``dlcp.controller``, ``dlcp.testbed`` and
``dlcp.simulations`` for the P4Runtime controller, the emulated cluster and the
simulations. Those live in the top-level folders ``host/``, ``controller/``,
``testbed/`` and ``simulations/``; ``dlcp/host`` and the others are relative
symlinks to them, so every import resolves the same way from a checkout, an
editable install or a wheel.
"""

__version__ = "0.1.0"
