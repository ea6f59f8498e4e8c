"""``dlcp switch shell ADDR``: p4runtime-shell against a DLCP switch (a verb of ``dlcp switch``).

``add_shell_verb`` is called by the ``switch`` area's ``register`` to add the verb.
"""

from __future__ import annotations

import argparse


def add_shell_verb(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    shell = verbs.add_parser(
        "shell",
        help="open p4runtime-shell (its own venv, `make venv-p4rt-shell`) against a DLCP switch",
        description=(
            "Open p4runtime-shell against the switch at ADDR. If the switch has no pipeline yet, the shell "
            "pushes DLCP's P4Info (p4src/v1model/dlcp.p4info.txtpb); otherwise it reads it from the switch. "
            "With the default election id the shell is a read-only backup whenever a controller is connected."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    shell.add_argument("address", metavar="ADDR", help="the switch's P4Runtime address, HOST:PORT")
    shell.add_argument("--device-id", type=int, default=1, help="P4Runtime device id (>= 1)")
    shell.add_argument("--election-id", default="0,1", metavar="H,L", help="election id, high and low 64 bits")
    shell.set_defaults(func=_shell)


def _shell(args: argparse.Namespace) -> int:
    from dlcp.testbed.switch.p4rt import shell

    host, sep, port = args.address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"ADDR {args.address!r}: expected HOST:PORT with a port in 1..65535")
    if not 1 <= args.device_id < 1 << 64:
        raise ValueError(f"--device-id {args.device_id}: out of range 1..2**64-1 (P4Runtime device ids)")
    try:
        election_id = shell.parse_election_id(args.election_id)
    except ValueError as exc:
        raise ValueError(f"--election-id: {exc}") from None
    return shell.open_shell(args.address, args.device_id, election_id).returncode
