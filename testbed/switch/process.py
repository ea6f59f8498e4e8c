"""Entry point of one software switch process: ``python -m dlcp.testbed.switch.process CONFIG``.

``CONFIG`` is the switch's TOML file (docs/switch.md), parsed here, by the process it configures.
:func:`argv` is the process's command line, the one place it is written; the testbed starts one
per switch of a fabric. ``dlcp switch run`` builds the same :class:`SwitchConfig` from its
options and runs the same :func:`serve`.

Exit status 2: the configuration is invalid or the switch cannot start (the reason on stderr).
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TextIO

from dlcp.entry import module_argv
from dlcp.testbed.switch import config
from dlcp.testbed.switch.service import SwitchService

log = logging.getLogger(__name__)


def argv(config_file: str | Path) -> list[str]:
    """The command line of a switch process running the configuration file ``config_file``."""
    return module_argv(__name__, str(config_file))


def serve(cfg: config.SwitchConfig, out: TextIO | None = None) -> int:
    """Run the switch until SIGINT or SIGTERM; a line on ``out`` (stdout) says where once it runs."""
    out = out or sys.stdout
    service = SwitchService(cfg)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        service.stop()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with service:
            out.write(
                f"dlcp switch {cfg.device_id} running on "
                + ", ".join(f"port {p.port}={p.interface}" for p in cfg.ports)
                + (f"; P4Runtime on {cfg.grpc}" if cfg.grpc else "")
                + f"; statistics: dlcp switch stats --device-id {cfg.device_id}\n"
            )
            out.flush()
            service.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return 0


def main(args: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    given = sys.argv[1:] if args is None else args
    try:
        if len(given) != 1:
            raise ValueError(f"usage: {__name__} CONFIG")
        return serve(config.load(Path(given[0])))
    except (ValueError, OSError) as exc:  # ConfigError too
        print(f"dlcp switch: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
