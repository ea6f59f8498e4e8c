"""Tofino's trim sessions (``p4src/tna/trim_sessions.p4``): ``port_sessions``, one entry per switch port.

On Tofino a trimmed header is a truncated mirror copy, sent through the mirror
session of its egress port. The program does not compute the session from the
port (Tofino 2's session ids are 8 bits, the ports 9): the controller gives each
port of a ``tofino`` switch its own session, ``TRIM_SESSION_BASE`` upwards in port
order, and writes it here. The sessions themselves (mirror to the port, truncated,
in ``TRIM_QUEUE``) are set up through the vendor's tools (docs/switch.md). v1model
targets truncate the packet themselves and have no such table.
"""

from __future__ import annotations

import finsy as fy

from dlcp.controller.entries import FABRIC, Entry
from dlcp.controller.model import SwitchSpec
from dlcp.p4 import names, sizes


def sessions(spec: SwitchSpec) -> dict[int, int]:
    """Port -> its trim mirror session on a Tofino switch; empty for the other targets.

    Raises ``ValueError`` when the switch has more ports than there are session ids.
    """
    if spec.target != "tofino":
        return {}
    ports = sorted(spec.ports)
    if len(ports) > sizes.MAX_TRIM_SESSION - sizes.TRIM_SESSION_BASE + 1:
        raise ValueError(
            f"switch.{spec.name}: {len(ports)} ports, but Tofino has trim sessions "
            f"{sizes.TRIM_SESSION_BASE}..{sizes.MAX_TRIM_SESSION} only"
        )
    return {port: sizes.TRIM_SESSION_BASE + i for i, port in enumerate(ports)}


def entries(spec: SwitchSpec) -> list[Entry]:
    return [
        Entry(
            fy.P4TableEntry(
                names.TRIM_SESSIONS,
                match=fy.Match(port=port),
                action=fy.Action(names.SET_TRIM_SESSION, session_id=session),
            ),
            FABRIC,
            f"port {port}: trim mirror session {session}",
        )
        for port, session in sessions(spec).items()
    ]
