"""Process entry points: the command line that starts one of DLCP's modules as a process of its own.

Each process has a module entry point beside the code it runs (``python -m dlcp.simulations.child``,
``python -m dlcp.testbed.switch.process``, ...), and that module builds its own command line with
:func:`module_argv`, so a command line is written in one place. The CLI is one more caller of the
functions those entry points run; no layer below it starts the CLI (``tests/test_layers.py``).
"""

from __future__ import annotations

import sys


def module_argv(module: str, *args: str) -> list[str]:
    """``python -P -m MODULE ARGS`` with this interpreter (-P: the current folder never shadows the package)."""
    return [sys.executable, "-P", "-m", module, *args]
