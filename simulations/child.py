"""Entry point of one simulation process: a scenario table (JSON) on stdin, its summary (JSON) on stdout.

Exit status 2: the scenario is invalid; 3: it would not fit in memory. :func:`argv` is the process's command
line, the one place it is written; :mod:`dlcp.simulations.runner` starts it.
"""

from __future__ import annotations

import json
import logging
import sys

from dlcp.entry import module_argv
from dlcp.simulations import scenario, simulate


def argv() -> list[str]:
    """The command line of a simulation process."""
    return module_argv(__name__)


def main() -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    table = json.loads(sys.stdin.read())
    try:
        s = scenario.from_table(table)
    except scenario.ScenarioError as exc:
        print(exc, file=sys.stderr)
        return 2
    try:
        out = simulate.simulate(s)
    except simulate.MemoryRefused as exc:
        print(exc, file=sys.stderr)
        return 3
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
