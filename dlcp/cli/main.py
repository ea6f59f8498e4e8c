"""Entry point of the ``dlcp`` command. Each area module adds its own sub-commands."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from dlcp import __version__
from dlcp.testbed import userns

# Area modules, each with ``register(subparsers)``; later areas append here.
AREAS: tuple[str, ...] = (
    "dlcp.cli.protocol_cmd",
    "dlcp.cli.bench_cmd",
    "dlcp.cli.train_cmd",
    "dlcp.cli.demo_cmd",
    "dlcp.cli.p4_cmd",
    "dlcp.cli.sim_cmd",
    "dlcp.cli.switch_cmd",
    "dlcp.cli.controller_cmd",
    "dlcp.cli.testbed_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dlcp",
        description="DLCP: bounded-loss, priority-aware communication for distributed training.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"dlcp {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="area", metavar="AREA", required=True)
    for name in AREAS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if userns.requested():  # re-executed without root (dlcp.testbed.userns): in there before any thread starts
        try:
            userns.enter()
        except userns.Unavailable as exc:
            sys.stderr.write(
                f"dlcp: error: the testbed needs root, and cannot become root of a namespace here: {exc}\n"
            )
            return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    args.raw_argv = list(argv) if argv is not None else sys.argv[1:]
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except (ValueError, OSError) as exc:
        logging.getLogger("dlcp").debug("command failed", exc_info=True)
        sys.stderr.write(f"dlcp: error: {exc}\n")
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
