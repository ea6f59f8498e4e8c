"""The controller that stays on a running fabric: ``python -m dlcp.testbed.reconciler FABRIC INTERVAL_S``.

It stays connected to every switch of the fabric file as primary and keeps each configured, writing the tables
again after a switch restarts (:func:`dlcp.controller.reconcile.run`, as ``dlcp controller run`` does). It runs in
the fabric's switch namespace, where the switches serve P4Runtime, as its own process (:func:`argv`; the testbed's
fault runs start it, :mod:`dlcp.apps.testbed.faults`), until SIGTERM or SIGINT. Each event but ``unchanged`` is one
JSON line on stdout (:meth:`dlcp.controller.reconcile.Event.as_dict`), as ``dlcp controller run --json`` prints it.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from pathlib import Path

from dlcp.entry import module_argv

log = logging.getLogger(__name__)


def argv(fabric: str | Path, interval_s: float) -> list[str]:
    """The controller process's command line: keep fabric file ``fabric``'s switches configured, checking each every
    ``interval_s`` seconds."""
    return module_argv(__name__, str(fabric), f"{interval_s:g}")


def main(args: list[str] | None = None) -> int:
    """Keep a fabric file's switches configured until SIGTERM or SIGINT (run in the switch namespace).

    Exit status 2: the arguments or the fabric file are invalid; 1: the controller stopped on an error.
    """
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    given = sys.argv[1:] if args is None else args
    try:
        interval = float(given[1]) if len(given) == 2 else math.nan
    except ValueError:
        interval = math.nan
    if not interval > 0 or math.isinf(interval):
        print(f"usage: {__name__} FABRIC INTERVAL_S (seconds between checks of a switch, > 0)", file=sys.stderr)
        return 2
    from dlcp.controller import fabric, reconcile
    from dlcp.controller.session import SwitchError

    logging.getLogger("finsy").setLevel(logging.ERROR)  # it warns on every connect that there is no gNMI
    try:
        fab = fabric.load(given[0])
    except (ValueError, OSError) as exc:
        print(exc, file=sys.stderr)
        return 2

    def show(event: reconcile.Event) -> None:
        if event.kind != "unchanged":
            print(json.dumps(event.as_dict()), flush=True)

    try:
        reconcile.serve(fab, show, interval=interval)
    except SwitchError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
