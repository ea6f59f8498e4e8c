"""The controller's part in a testbed: configure the switches of a running fabric.

The switches serve P4Runtime on the loopback of the fabric's switch namespace,
so the controller runs there, as its own process (``python -m
dlcp.testbed.controlplane FABRIC SWITCH``, :func:`argv`; started by
:meth:`Testbed.apply` and ``dlcp testbed apply``): every gRPC socket it opens
is then in that namespace, whatever threads grpc starts.

BMv2 (``--switch bmv2``): the controller pushes DLCP's program (the JSON ``up``
compiled, :func:`dlcp.testbed.layout.bmv2_program`) with the P4Info, then the
links' buffers and rates as queue depths and rates over the switch's Thrift
server. A ``simple_switch_grpc`` built without Thrift (p4-toolchain.md's recipe)
serves none: each switch's report then says, under ``queues_not_applied``, that
BMv2 cannot take its links' rates and buffers, and the testbed has the kernel carry
them out on the switch's ports (:mod:`dlcp.testbed.shaping`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from dlcp.controller.model import Fabric
from dlcp.entry import module_argv
from dlcp.testbed import layout
from dlcp.testbed.spec import SWITCH_KINDS, SpecError, TestbedSpec
from dlcp.testbed.spec import load as load_spec

log = logging.getLogger(__name__)

THRIFT_WAIT_S = 3.0
"""How long BMv2's Thrift servers get to open after the program is pushed (they open only then)."""


def for_bmv2(fabric: Fabric, program: str) -> Fabric:
    """The fabric with every switch a BMv2 running ``program`` (the file's targets are the software switch's)."""
    switches = {n: replace(s, target="bmv2", p4blob=program, thrift=None) for n, s in fabric.switches.items()}
    return replace(fabric, switches=switches)


def configure(spec: TestbedSpec, timeout_s: float = 30.0, down: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Apply the fabric and its jobs to every switch; raises with every switch that failed.

    ``down``: links known to be down (taken down by a fault scenario); routes and ECMP groups avoid them."""
    from dlcp.controller import apply

    logging.getLogger("finsy").setLevel(logging.ERROR)  # it warns on every connect that there is no gNMI
    fabric = spec.fabric.with_links_down(down) if down else spec.fabric
    bmv2 = spec.settings.switch == "bmv2"
    if bmv2:
        fabric = for_bmv2(fabric, str(layout.bmv2_program(spec.name)))
    reports = asyncio.run(apply.configure(fabric, timeout=timeout_s))
    bad = [r for r in reports if r.status != "ok"]
    if bad:
        raise RuntimeError("; ".join(f"switch {r.switch} ({r.address}): {r.status}: {r.error}" for r in bad))
    out = [r.as_dict() for r in reports]
    if bmv2:
        for doc, (name, result) in zip(out, bmv2_queues(fabric, timeout_s).items(), strict=True):
            assert doc["switch"] == name
            doc.update(result)
    return out


def _listening(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=0.5).close()
    except OSError:
        return False
    return True


def bmv2_queues(fabric: Fabric, timeout_s: float) -> dict[str, dict[str, Any]]:
    """Per switch (file order): ``{"queues": [...]}`` as set over Thrift, or ``{"queues_not_applied": why}``."""
    from dlcp.controller import queues

    thrift = {name: layout.bmv2_thrift(i) for i, name in enumerate(fabric.switches, 1)}
    deadline = time.monotonic() + THRIFT_WAIT_S
    up = {n for n, a in thrift.items() if _listening(a)}
    while len(up) < len(thrift) and time.monotonic() < deadline:
        time.sleep(0.2)
        up |= {n for n, a in thrift.items() if n not in up and _listening(a)}
    out: dict[str, dict[str, Any]] = {}
    for name, address in thrift.items():
        if name not in up:
            out[name] = {
                "queues_not_applied": f"simple_switch_grpc serves no Thrift at {address} (built without Thrift), so "
                "BMv2 cannot take its links' rates and buffers"
            }
            continue
        try:
            lines = queues.configure_bmv2(fabric, replace(fabric.switches[name], thrift=address), timeout_s)
        except queues.QueueError as exc:
            out[name] = {"queues_not_applied": str(exc)}
        else:
            out[name] = {"queues": lines}
    return out


def argv(fabric: str | Path, switch: str, down: Sequence[str] = ()) -> list[str]:
    """The controller process's command line: configure the switches (of kind ``switch``) of a fabric file, routing
    around the links ``down``."""
    return module_argv(__name__, str(fabric), switch, *down)


def main(args: list[str] | None = None) -> int:
    """Configure the switches of a fabric file (run in the switch namespace); one JSON line of reports on stdout.

    Exit status 2: the arguments or the fabric file are invalid.
    """
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    given = sys.argv[1:] if args is None else args
    if len(given) < 2 or given[1] not in SWITCH_KINDS:
        print(f"usage: {__name__} FABRIC {{{','.join(SWITCH_KINDS)}}} [DOWN-LINK ...]", file=sys.stderr)
        return 2
    try:
        spec = load_spec(given[0], switch=given[1])  # type: ignore[arg-type]
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return 2
    down = given[2:]
    unknown = [name for name in down if name not in spec.fabric.links]
    if unknown:
        print(f"{unknown[0]}: no such link in {spec.path} (links: {', '.join(spec.fabric.links)})", file=sys.stderr)
        return 2
    sys.stdout.write(json.dumps(configure(spec, down=down)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
