"""Tofino's trim sessions (``p4src/tna/trim_sessions.p4``): the mirror session of each port, and the table naming it.

On Tofino a trimmed header is a truncated mirror copy, sent through the mirror
session of its egress port. The program does not compute the session from the
port (Tofino 2's session ids are 8 bits, the ports 9): the controller gives each
port of a ``tofino`` switch its own session, ``TRIM_SESSION_BASE`` upwards in port
order, and writes

* ``port_sessions``: port -> its session id, which the program reads;
* the session itself, as a P4Runtime clone session (which Tofino's P4Runtime
  server, PI on bf-drivers, makes a mirror session): one copy to the port, in
  ``TRIM_QUEUE``, truncated to the trimmed frame plus the mirror header.

v1model targets truncate the packet themselves and get neither.
"""

from __future__ import annotations

import finsy as fy

from dlcp.controller.entries import FABRIC, Entry
from dlcp.controller.model import SwitchSpec
from dlcp.p4 import names, sizes

TRIM_COPY_BYTES = sizes.TRIMMED_FRAME_BYTES + sizes.TNA_MIRROR_HEADER_BYTES
"""What a trim mirror session keeps of the copy: the mirror header and the trimmed frame."""


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
    """The clone sessions, then the ``port_sessions`` entries that name them."""
    out = []
    by_port = sessions(spec)
    for port, session in by_port.items():
        out.append(
            Entry(
                fy.P4CloneSessionEntry(
                    session,
                    class_of_service=sizes.TRIM_QUEUE,
                    packet_length_bytes=TRIM_COPY_BYTES,
                    replicas=[(port, 0)],
                ),
                FABRIC,
                f"trim mirror session {session}: to port {port}, queue {sizes.TRIM_QUEUE}, {TRIM_COPY_BYTES} bytes",
            )
        )
    for port, session in by_port.items():
        out.append(
            Entry(
                fy.P4TableEntry(
                    names.TRIM_SESSIONS,
                    match=fy.Match(port=port),
                    action=fy.Action(names.SET_TRIM_SESSION, session_id=session),
                ),
                FABRIC,
                f"port {port}: trim mirror session {session}",
            )
        )
    return out
