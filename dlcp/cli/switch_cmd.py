"""``dlcp switch``: run DLCP's software switch, read its statistics, measure its speed."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from dlcp import checks

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from dlcp import switch_limits as config
    from dlcp.apps.bench import switch as bench

    area = sub.add_parser("switch", help="DLCP's software switch: run it, read its statistics, benchmark it")
    verbs = area.add_subparsers(dest="verb", metavar="VERB", required=True)
    fmt = argparse.ArgumentDefaultsHelpFormatter

    run = verbs.add_parser(
        "run",
        help="run the switch on network interfaces (needs root); empty tables until a controller writes them",
        description="Ports are attached with AF_PACKET. PORT is a switch port number (0.."
        f"{config.MAX_PORT}); per-port settings repeat the option, e.g. --rate 1=1gbit --rate 2=10gbit.",
    )
    run.add_argument("--config", type=Path, help="TOML file (docs/switch.md); options given here override it")
    run.add_argument("--port", action="append", default=[], metavar="PORT=IFACE", help="attach IFACE as PORT")
    run.add_argument("--grpc", metavar="ADDR:PORT", help="serve P4Runtime on this address (default: no server)")
    run.add_argument("--device-id", type=int, help="P4Runtime device id; also names the statistics socket (default 1)")
    run.add_argument(
        "--rate",
        action="append",
        default=[],
        metavar="PORT=RATE",
        help="shape PORT to RATE (1gbit, 100mbit; default unlimited)",
    )
    run.add_argument(
        "--buffer",
        action="append",
        default=[],
        metavar="[PORT=]BYTES",
        help=f"egress buffer of every port, or of one (default {config.DEFAULT_BUFFER} B; range "
        f"{config.MIN_BUFFER}..{config.MAX_BUFFER}; 4MiB, 256KiB)",
    )
    run.add_argument(
        "--loss",
        action="append",
        default=[],
        metavar="PORT[:CLASS]=P",
        help="random loss on PORT, all classes or one (0.01 or 1%%; default none)",
    )
    run.add_argument(
        "--delay", action="append", default=[], metavar="PORT=TIME", help="added delay (100us, 2ms; default none)"
    )
    run.add_argument("--seed", type=int, help="seed of the loss draws (default 0: a fixed seed)")
    run.add_argument(
        "--stats-dir", type=Path, help=f"folder of the statistics socket (default {config.DEFAULT_STATS_DIR})"
    )
    run.set_defaults(func=_run)

    st = verbs.add_parser("stats", help="print a running switch's counters", formatter_class=fmt)
    st.add_argument("--device-id", type=int, default=1, help="device id of the switch")
    st.add_argument("--stats-dir", type=Path, default=config.DEFAULT_STATS_DIR, help="folder of its socket")
    st.add_argument("--json", action="store_true", help="print the whole document as JSON")
    st.add_argument("--watch", type=float, metavar="SECONDS", help="print again every SECONDS (Ctrl-C ends)")
    st.set_defaults(func=_stats)

    from dlcp.cli.switch_shell import add_shell_verb

    add_shell_verb(verbs)

    b = verbs.add_parser(
        "bench",
        help="packets/s and Gbit/s of the switch, a plain forwarder and BMv2 on veths (needs root)",
        formatter_class=fmt,
    )
    b.add_argument("--sizes", default=",".join(map(str, bench.SIZES)), help="frame sizes in bytes")
    b.add_argument("--systems", default=",".join(bench.SYSTEMS), help=f"of {', '.join(bench.SYSTEMS)}")
    b.add_argument("--modes", default=",".join(bench.MODES), help=f"of {', '.join(bench.MODES)}")
    b.add_argument("--seconds", type=float, default=2.0, help="length of a stream run")
    b.add_argument("--repeat", type=int, default=3, help="runs of each; the median is kept")
    b.add_argument("--ring-mib", type=int, default=64, help="receive ring per port in MiB (drain mode fills it)")
    b.add_argument("--json", action="store_true", help="print the results as JSON")
    b.set_defaults(func=_bench)


# ---- run ----


def _split(arg: str, text: str) -> tuple[str, str]:
    from dlcp.testbed.switch.config import ConfigError

    key, sep, value = text.partition("=")
    if not sep or not key or not value:
        raise ConfigError(f"{arg} {text}: expected KEY=VALUE")
    return key.strip(), value.strip()


def build_config(args: argparse.Namespace) -> Any:
    """The switch configuration: the TOML file (if any), then the command-line options over it."""
    from dataclasses import replace

    from dlcp.protocol import NUM_PRIORITY_CLASSES
    from dlcp.testbed.switch import config as c

    cfg = c.load(args.config) if args.config else c.SwitchConfig()
    ports = {p.port: p for p in cfg.ports}
    given: set[int] = set()
    for text in args.port:
        key, iface = _split("--port", text)
        port = c.parse_port(key, f"--port {text}")
        if port in given:
            raise c.ConfigError(f"--port {text}: port {port} is given twice")
        given.add(port)
        old = ports.get(port)
        ports[port] = replace(old, interface=iface) if old else c.PortConfig(port=port, interface=iface)
    if not ports:
        raise c.ConfigError("--port: give at least one port (--port 1=IFACE), or a --config file with ports")

    def target(arg: str, text: str, key: str) -> int:
        port = c.parse_port(key, f"{arg} {text}")
        if port not in ports:
            raise c.ConfigError(f"{arg} {text}: no port {port} (attach it with --port {port}=IFACE)")
        return port

    for text in args.buffer:
        if "=" in text:
            key, value = _split("--buffer", text)
            port = target("--buffer", text, key)
            ports[port] = replace(ports[port], buffer_bytes=c.parse_size(value, f"--buffer {text}"))
        else:
            size = c.parse_size(text, f"--buffer {text}")
            ports = {n: replace(p, buffer_bytes=size) for n, p in ports.items()}
    for text in args.rate:
        key, value = _split("--rate", text)
        port = target("--rate", text, key)
        ports[port] = replace(ports[port], rate_bps=c.parse_rate(value, f"--rate {text}"))
    for text in args.delay:
        key, value = _split("--delay", text)
        port = target("--delay", text, key)
        ports[port] = replace(ports[port], delay_ns=c.parse_delay(value, f"--delay {text}"))
    for text in args.loss:
        key, value = _split("--loss", text)
        port_key, _, klass = key.partition(":")
        port = target("--loss", text, port_key)
        p = c.parse_probability(value, f"--loss {text}")
        loss = list(ports[port].loss)
        if klass:
            try:
                k = int(klass)
            except ValueError:
                raise c.ConfigError(f"--loss {text}: class {klass!r} is not a number") from None
            if not 0 <= k < NUM_PRIORITY_CLASSES:
                raise c.ConfigError(f"--loss {text}: class {k} is out of range 0..{NUM_PRIORITY_CLASSES - 1}")
            loss[k] = p
        else:
            loss = [p] * NUM_PRIORITY_CLASSES
        ports[port] = replace(ports[port], loss=tuple(loss))
    if args.grpc is not None:
        c.parse_address(args.grpc, "--grpc")
    over: dict[str, Any] = {"ports": tuple(ports[n] for n in sorted(ports))}
    if args.grpc is not None:
        over["grpc"] = args.grpc
    if args.device_id is not None:
        if not 1 <= args.device_id < 1 << 64:
            raise c.ConfigError(f"--device-id {args.device_id}: out of range 1..2**64-1 (P4Runtime device ids)")
        over["device_id"] = args.device_id
    if args.seed is not None:
        over["seed"] = args.seed
    if args.stats_dir is not None:
        over["stats_dir"] = args.stats_dir
    return replace(cfg, **over).validate()


def _run(args: argparse.Namespace) -> int:
    from dlcp.testbed.switch import process

    return process.serve(build_config(args))


# ---- stats ----


def _stats(args: argparse.Namespace) -> int:
    from dlcp.testbed.switch import stats

    checks.in_range("--device-id", args.device_id, 1, (1 << 64) - 1)
    path = stats.socket_path(args.stats_dir, args.device_id)
    if args.watch is not None:
        checks.positive("--watch", args.watch)
        try:
            if args.json:
                while True:
                    sys.stdout.write(json.dumps(stats.fetch(path)) + "\n")
                    sys.stdout.flush()
                    time.sleep(args.watch)

            def out(text: str) -> None:
                sys.stdout.write(text)
                sys.stdout.flush()

            stats.watch(path, args.watch, out)
        except KeyboardInterrupt:
            return 0
        return 0
    doc = stats.fetch(path)
    sys.stdout.write((json.dumps(doc, indent=1) if args.json else stats.render(doc)) + "\n")
    return 0


# ---- bench ----


def _bench(args: argparse.Namespace) -> int:
    from dlcp.apps.bench import switch as bench

    try:
        sizes = tuple(int(s) for s in args.sizes.split(","))
    except ValueError:
        raise ValueError(f"--sizes {args.sizes}: a comma-separated list of frame sizes in bytes") from None
    for s in sizes:
        if not 60 <= s <= 9014:
            raise ValueError(f"--sizes: {s} is out of range 60..9014 bytes")
    systems = tuple(args.systems.split(","))
    modes = tuple(args.modes.split(","))
    for name, chosen, valid in (("--systems", systems, bench.SYSTEMS), ("--modes", modes, bench.MODES)):
        bad = set(chosen) - set(valid)
        if bad:
            raise ValueError(f"{name}: unknown {sorted(bad)} (valid: {', '.join(valid)})")
    if not 1 <= args.repeat <= 100:
        raise ValueError(f"--repeat {args.repeat}: out of range 1..100")
    if not 0.1 <= args.seconds <= 600:
        raise ValueError(f"--seconds {args.seconds}: out of range 0.1..600")
    if not 4 <= args.ring_mib <= 4096:
        raise ValueError(f"--ring-mib {args.ring_mib}: out of range 4..4096")

    def progress(r: Any) -> None:
        if not args.json:
            sys.stderr.write(f"  {r.system:5} {r.mode:6} {r.frame_bytes:5} B: {r.pps / 1e3:9.1f} kpps\n")

    results, notes = bench.run(sizes, systems, modes, args.seconds, args.repeat, args.ring_mib, progress)
    rows = bench.ratios(results)
    if args.json:
        doc = {"results": [r.as_dict() for r in results], "ratios": rows, "notes": notes}
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
        return 0
    sys.stdout.write(
        f"{'system':7}{'mode':8}{'bytes':>6}{'kpps':>10}{'Gbit/s':>9}{'kpps/CPU-s':>12}{'sender kpps':>13}  note\n"
    )
    for r in sorted(results, key=lambda r: (r.mode, r.frame_bytes, r.system)):
        sys.stdout.write(
            f"{r.system:7}{r.mode:8}{r.frame_bytes:6}{r.pps / 1e3:10.1f}{r.gbit_per_s:9.2f}{r.cpu_pps / 1e3:12.1f}"
            f"{r.offered_pps / 1e3:13.1f}  {r.note}\n"
        )
    for row in rows:
        parts = [f"{row['mode']:6} {row['frame_bytes']:5} B: dlcp {row['dlcp_gbit_per_s']:.2f} Gbit/s"]
        if "vs_plain" in row:
            parts.append(f"{100 * row['vs_plain']:.0f}% of plain")
        if "vs_plain_cpu" in row:
            parts.append(f"{100 * row['vs_plain_cpu']:.0f}% of plain per CPU-second")
        if "vs_bmv2" in row:
            parts.append(f"{row['vs_bmv2']:.0f}x BMv2")
        sys.stdout.write(", ".join(parts) + "\n")
    for n in notes:
        sys.stdout.write(f"note: {n}\n")
    return 0
