"""The ``dlcp`` command: ``dlcp <area> <verb>``."""

from __future__ import annotations

from dlcp.entry import module_argv

MODULE = "dlcp.cli.main"
"""The CLI's module entry point (``python -m dlcp.cli.main`` is ``dlcp``)."""


def argv(*args: str) -> list[str]:
    """``dlcp ARGS`` as this interpreter runs it: the CLI's own command line (it re-executes itself with it)."""
    return module_argv(MODULE, *args)
