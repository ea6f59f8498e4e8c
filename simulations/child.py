"""Entry point of one simulation process: a scenario table (JSON) on stdin, its summary (JSON) on stdout.

Exit status 2: the scenario is invalid; 3: it would not fit in memory.
"""

from __future__ import annotations

import json
import logging
import sys

from dlcp.simulations import runner, scenario


def main() -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    table = json.loads(sys.stdin.read())
    try:
        s = scenario.from_table(table)
    except scenario.ScenarioError as exc:
        print(exc, file=sys.stderr)
        return 2
    try:
        out = runner.simulate(s)
    except runner.MemoryRefused as exc:
        print(exc, file=sys.stderr)
        return 3
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
