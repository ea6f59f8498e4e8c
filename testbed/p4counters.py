"""BMv2's P4 counters on a testbed, read by DLCP's controller: ``python -m dlcp.testbed.p4counters FABRIC``.

BMv2 serves no statistics socket: DLCP's P4 counters (``forwarded``, ``dropped``, ``trimmed`` per port and
class) are read over P4Runtime. The switches' gRPC servers listen on the loopback of the fabric's switch
namespace, so the reading runs there, as its own process (:func:`argv`; started by
:func:`dlcp.testbed.counters.bmv2_docs`), as the controller that configures them does
(:mod:`dlcp.testbed.controlplane`). It prints one JSON line: every counter cell (``cells``) and, per switch
that could not be read, why (``errors``), as ``dlcp controller stats --json`` does
(:meth:`dlcp.controller.counters.Stats.as_dict`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

from dlcp.entry import module_argv

log = logging.getLogger(__name__)


def read(fabric: str | Path) -> dict[str, Any]:
    """Every switch's P4 counter cells of fabric file ``fabric``, and why a switch could not be read."""
    from dlcp.controller import counters
    from dlcp.controller import fabric as fabric_file

    logging.getLogger("finsy").setLevel(logging.ERROR)  # it warns on every connect that there is no gNMI
    stats = asyncio.run(counters.read(fabric_file.load(fabric)))
    return stats.as_dict()


def argv(fabric: str | Path) -> list[str]:
    """The reading process's command line, for fabric file ``fabric``."""
    return module_argv(__name__, str(fabric))


def main(args: list[str] | None = None) -> int:
    """Read the counters of a fabric file's switches (run in the switch namespace); one JSON line on stdout.

    A switch that cannot be read is named in the document's ``errors``. Exit status 2: the arguments or the fabric
    file are invalid.
    """
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    given = sys.argv[1:] if args is None else args
    if len(given) != 1:
        print(f"usage: {__name__} FABRIC", file=sys.stderr)
        return 2
    try:
        doc = read(given[0])
    except (ValueError, OSError) as exc:  # the fabric file cannot be read or is invalid
        print(exc, file=sys.stderr)
        return 2
    sys.stdout.write(json.dumps(doc) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
