"""``dlcp testbed``: an emulated cluster in network namespaces behind DLCP switches (docs/testbed.md)."""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlcp import flow_sizes
from dlcp.cli import argv as cli_argv
from dlcp.models import MODELS

log = logging.getLogger(__name__)


def _reported(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A fabric that cannot be built or a job that fails ends the command with its message, status 1."""

    @functools.wraps(func)
    def run(args: argparse.Namespace) -> int:
        from dlcp.testbed.jobs import WorkerFailed
        from dlcp.testbed.lifecycle import TestbedError

        try:
            return func(args)
        except (TestbedError, WorkerFailed) as exc:
            sys.stderr.write(f"dlcp: error: {exc}\n")
            return 1

    return run


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    area = sub.add_parser(
        "testbed",
        help="an emulated cluster: hosts in network namespaces behind DLCP switches (needs root)",
        description="Fabric files are the controller's (docs/controller.md) with a [testbed] table (docs/testbed.md).",
    )
    verbs = area.add_subparsers(dest="verb", metavar="VERB", required=True)
    fmt = argparse.ArgumentDefaultsHelpFormatter

    def fabric_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("fabric", metavar="FABRIC", help="fabric file (TOML)")
        p.add_argument("--switch", choices=("dlcp", "bmv2"), help="switch kind (default: testbed.switch, else dlcp)")

    up = verbs.add_parser("up", help="create the fabric and leave it running", formatter_class=fmt)
    fabric_arg(up)
    up.set_defaults(func=_reported(_up))

    down = verbs.add_parser("down", help="remove a fabric (or what a killed run left of it)", formatter_class=fmt)
    down.add_argument("fabric", metavar="FABRIC", help="fabric file or fabric name")
    down.set_defaults(func=_down)

    st = verbs.add_parser("status", help="fabrics that are up, their hosts and switches", formatter_class=fmt)
    st.add_argument("--json", action="store_true", help="print JSON")
    st.set_defaults(func=_status)

    ex = verbs.add_parser(
        "exec",
        help="run a command on a host of a running fabric (a switch name: in the switches' namespace)",
        formatter_class=fmt,
    )
    ex.add_argument("--fabric", help="fabric name (needed only when several fabrics are up)")
    ex.add_argument("host", metavar="HOST")
    ex.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND...")
    ex.set_defaults(func=_exec)

    rn = verbs.add_parser(
        "run",
        help="run COMMAND on every host of a job (one node per host namespace) and gather the results",
        description="Each process gets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (torchrun's PET_* too), "
        "DLCP_HOST and DLCP_CONFIG (the job's host configuration); {rank}, {world}, {host}, {ip} and {master} in "
        "COMMAND are replaced. The fabric is brought up first and taken down after unless it was up already.",
        formatter_class=fmt,
    )
    fabric_arg(rn)
    rn.add_argument("--job", type=int, help="job id (default: the fabric's first job)")
    rn.add_argument("--out", default="out/testbed", help="results folder (a run gets a subfolder)")
    rn.add_argument("--timeout", type=float, default=600.0, help="seconds the command may run")
    rn.add_argument("--keep", action="store_true", help="leave the fabric up afterwards")
    rn.add_argument(
        "--torchrun", action="store_true",
        help="COMMAND is a training script (and its arguments): each host runs it under its own torchrun node "
        "(--nnodes N --node-rank i, one process per node, the c10d rendezvous on the job's first host)",
    )  # fmt: skip
    rn.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND...")
    rn.set_defaults(func=_reported(_run))

    ap = verbs.add_parser("apply", help="(re)write the switches' tables from the fabric file", formatter_class=fmt)
    fabric_arg(ap)
    ap.add_argument(
        "--down", action="append", default=[], metavar="LINK",
        help="a link known to be down (repeatable): routes and ECMP groups avoid it",
    )  # fmt: skip
    ap.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    ap.set_defaults(func=_reported(_apply))

    tr = verbs.add_parser(
        "traffic",
        help="background TCP and UDP flows between the hosts of a running fabric, and incast toward the servers",
        description="Defaults come from the fabric file's [testbed.traffic] table (docs/testbed.md).",
        formatter_class=fmt,
    )
    tr.add_argument("fabric", metavar="FABRIC", help="fabric file (the fabric must be up)")
    tr.add_argument("--load", type=float, help="offered load as a fraction of the slowest host link (0..1)")
    tr.add_argument("--cdf", choices=flow_sizes.NAMES, help="flow-size distribution")
    tr.add_argument("--incast", type=int, help="senders per incast burst toward the job's servers (0: none)")
    tr.add_argument("--duration", type=float, help="seconds to run")
    tr.add_argument("--flows", type=int, help="at most this many flows")
    tr.add_argument("--udp-share", type=float, help="fraction of flows sent over UDP")
    tr.add_argument("--seed", type=int, help="random seed")
    tr.add_argument("--json", action="store_true", help="print the report as JSON")
    tr.set_defaults(func=_traffic)

    bb = verbs.add_parser(
        "bench",
        help="DLCP vs DDP's default (gloo all-reduce) on the testbed: incast, loss, leaf-spine",
        description="Every scenario but incast-resnet runs gloo all-reduce (DDP's default: the baseline), full "
        "DLCP ring and PS, and DLCP ring and PS with the switch features off, taking turns --repeat times. "
        "Scenarios: incast (a star, web-search flows and incast toward h1's 200 Mbit/s link), loss (1% random loss "
        "on h1's 1 Gbit/s link), leaf-spine (2 leaves, 2 spines, 200 Mbit/s leaf-spine links, 4 workers "
        "alternating between the leaves), loss-200mbit (only when named), incast-resnet (only when named: incast "
        "with resnet18, DLCP ring and PS with the layer priorities on and with one priority class; the wait for "
        "the front layers' bucket). Each ratio is computed within a repeat and reported as median and range over "
        "the repeats that have both sides; a goal holds when it holds in 2 of 3 repeats. A run in which a rank "
        "fails is reported (rank named) and the others go on; the command then exits 1. --switch bmv2 runs "
        "incast and leaf-spine on BMv2 at rates it carries (--rates bmv2); --switch dlcp --rates bmv2 runs the "
        "software switch at the same rates, to compare (docs/testbed.md).",
        formatter_class=fmt,
    )
    bb.add_argument("--repeat", type=int, default=3, help="turns of every way in each scenario")
    bb.add_argument(
        "--scenario", action="append", choices=("incast", "loss", "leaf-spine", "loss-200mbit", "incast-resnet"),
        help="only this one (repeatable; default incast, loss and leaf-spine)",
    )  # fmt: skip
    bb.add_argument(
        "--switch", choices=("dlcp", "bmv2"), default="dlcp",
        help="DLCP's software switch, or BMv2 simple_switch_grpc where installed (at --rates bmv2 only)",
    )  # fmt: skip
    bb.add_argument(
        "--rates", choices=("full", "bmv2"),
        help="full: the scenarios' rates as described; bmv2: incast and leaf-spine at a fifth and a tenth of them, "
        "which BMv2 carries, with one incast sender and 64 KiB buffers (docs/testbed.md). Default: bmv2 with "
        "--switch bmv2, else full",
    )  # fmt: skip
    bb.add_argument("--samples", type=int, default=4096, help="training samples (one epoch)")
    bb.add_argument(
        "--model", choices=tuple(MODELS),
        help="model (dlcp train --model) of the scenarios that do not name their own (incast-resnet: resnet18); "
        "default mlp-wide at full rates, mlp at bmv2 rates",
    )  # fmt: skip
    bb.add_argument("--loss-bound", type=float, default=0.02, help="loss bound of DLCP's gradient messages")
    bb.add_argument("--eval-every", type=int, default=5, help="iterations between accuracy measurements (the curve)")
    bb.add_argument(
        "--extra-gloo-ps", action="store_true",
        help="also run a parameter server over gloo's point-to-point TCP (an extra row, not a baseline)",
    )  # fmt: skip
    bb.add_argument("--out", default="out/testbed-bench", help="results folder (a run gets a subfolder)")
    bb.add_argument("--json", action="store_true", help="print the report as JSON")
    bb.set_defaults(func=_reported(_bench))

    fa = verbs.add_parser(
        "faults",
        help="training through faults: a switch restarted, a spine's links down, a worker or the server killed",
        description="Each scenario trains (dlcp train on the fabric) DLCP ring, DLCP PS and gloo all-reduce (DDP's "
        "default), --repeat times each, on a fabric of its own, and injects its fault once every rank has finished "
        "--fault-at iterations: switch-restart (the star's switch killed with SIGKILL and started again; the "
        "controller reconciles it), spine-down (both links of spine1 of a leaf-spine down; the controller reroutes "
        "over spine2), worker-kill (the last rank killed), server-kill (rank 0 killed: DLCP PS's parameter server, "
        "the rendezvous host of ring and gloo). Reported per run: what the user sees (completion or the named "
        "error) and when, ranks that hung, whether the replicas that completed are identical, and what the "
        "fabric left behind once taken down. Exits 1 when any run hung, diverged, left something behind, failed "
        "without naming an error or outside the bound, or could not be run (docs/testbed.md).",
        formatter_class=fmt,
    )
    fa.add_argument(
        "--scenarios",
        metavar="LIST",
        help="comma-separated: switch-restart, spine-down, worker-kill, server-kill (default: all)",
    )
    fa.add_argument("--ways", metavar="LIST", help="comma-separated: ring, ps, gloo (default: all)")
    fa.add_argument("--repeat", type=int, default=3, help="runs of every scenario and way")
    fa.add_argument("--samples", type=int, help="training samples, one epoch (default 4096; --short: 1152)")
    fa.add_argument("--model", choices=("mlp", "mlp-wide"), help="model (default mlp-wide; --short: mlp)")
    fa.add_argument("--fault-at", type=int, default=3, help="iterations every rank has finished at the fault")
    fa.add_argument(
        "--hang-after",
        type=float,
        default=60.0,
        help="seconds after the fault after which a rank still running is hung",
    )
    fa.add_argument("--short", action="store_true", help="the CI size: mlp, 1152 samples (12 or 9 iterations)")
    fa.add_argument("--out", default="out/testbed-faults", help="results folder (a run gets a subfolder)")
    fa.add_argument("--json", action="store_true", help="print the report as JSON")
    fa.set_defaults(func=_reported(_faults))

    xp = verbs.add_parser(
        "explain",
        help="where each run's iteration time went: timelines, switch counters, CPU",
        description="Reads a results folder of dlcp demo --testbed, dlcp testbed bench or dlcp testbed run "
        "(or one run's folder in it) and reports, per run, the iteration's phases, the bottleneck sender's "
        "wire time, pacing and idle link, CPU, and the switches' drops and trims (docs/testbed.md).",
        formatter_class=fmt,
    )
    xp.add_argument("results", metavar="RESULTS", help="results folder")
    xp.add_argument("--json", action="store_true", help="print the reports as JSON")
    xp.set_defaults(func=_explain)

    ss = verbs.add_parser("stats", help="every switch's counters", formatter_class=fmt)
    ss.add_argument("fabric", metavar="FABRIC", help="fabric file or fabric name")
    ss.add_argument("--json", action="store_true", help="print JSON")
    ss.set_defaults(func=_stats)


def _command(args: argparse.Namespace) -> list[str]:
    cmd = list(args.command)
    if cmd and cmd[0] != "--" and cmd[0].startswith("-"):
        raise ValueError(
            f"COMMAND: {cmd[0]} follows {args.verb}'s positional argument: give options first "
            f"(dlcp testbed {args.verb} [OPTIONS] {'FABRIC' if args.verb == 'run' else 'HOST'} -- COMMAND...)"
        )
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise ValueError("COMMAND: give the command after --, e.g. dlcp testbed exec h1 -- hostname")
    if (
        getattr(args, "torchrun", False)
        and cmd[0] not in ("-m", "--module", "--no-python")
        and not Path(cmd[0]).is_file()
    ):
        raise ValueError(f"COMMAND: {cmd[0]}: with --torchrun, COMMAND is the training script torchrun starts (a "
                         "file, or -m MODULE), e.g. dlcp testbed run --torchrun FABRIC -- train.py")  # fmt: skip
    return cmd


def _spec(args: argparse.Namespace) -> Any:
    from dlcp.testbed import spec

    return spec.load(args.fabric, switch=getattr(args, "switch", None))


def _store() -> Any:
    from dlcp.testbed import layout
    from dlcp.testbed.state import StateStore

    return StateStore(layout.STATE_ROOT)


def _say(text: str) -> None:
    sys.stderr.write(f"testbed: {text}\n")
    sys.stderr.flush()


def _root_or_userns(args: argparse.Namespace) -> None:
    """Without root: re-execute this command in a user and network namespace of its own, or say why it cannot."""
    if os.geteuid() == 0:
        return
    from dlcp.testbed import userns

    why = userns.why_not()
    if why:
        raise PermissionError(
            f"the testbed needs root (network namespaces, veths, raw sockets), and without it cannot make a user "
            f"namespace of its own here: {why}; run it with sudo"
        )
    _say("not root: running in a user and network namespace of its own (all of it ends with this command)")
    userns.reexec(cli_argv(*args.raw_argv))


def _up(args: argparse.Namespace) -> int:
    from dlcp.testbed.lifecycle import AlreadyUp, Testbed

    spec = _spec(args)
    try:
        state = Testbed(spec).up(progress=_say)
    except AlreadyUp as exc:
        sys.stderr.write(f"dlcp: {exc}\n")
        return 1
    hosts = ", ".join(f"{h} {v['ip']}" for h, v in state.hosts.items())
    sys.stdout.write(
        f"fabric {state.name} is up: {len(state.switches)} switches, {len(state.hosts)} hosts ({hosts})\n"
        f"  dlcp testbed exec {next(iter(state.hosts))} -- COMMAND   |   dlcp testbed down {state.name}\n"
    )
    return 0


def _fabric_name(text: str) -> str:
    from dlcp.testbed import spec

    p = Path(text)
    if p.suffix == ".toml" or p.exists():
        return str(spec.load(p).name)
    if not spec.NAME_RE.fullmatch(text):
        raise ValueError(f"FABRIC {text!r}: neither a fabric file nor a fabric name")
    return text


def _down(args: argparse.Namespace) -> int:
    from dlcp.testbed.lifecycle import remove

    name = _fabric_name(args.fabric)
    gone = remove(name, _store())
    if gone:
        sys.stdout.write(f"fabric {name} removed: {len(gone.namespaces)} namespaces, {len(gone.processes)} processes\n")
    else:
        sys.stdout.write(f"fabric {name}: nothing of it was left\n")
    return 0


def _status(args: argparse.Namespace) -> int:
    from dlcp.testbed.lifecycle import is_up, our_namespaces

    store = _store()
    rows = []
    for name in store.names():
        st = store.load(name)
        rows.append(
            {
                "fabric": name,
                "up": is_up(st),
                "ready": bool(st and st.ready),
                "file": st.fabric_file if st else None,
                "switches": {p.name: {"pid": p.pid, "alive": p.alive()} for p in st.processes if p.role == "switch"}
                if st
                else {},
                "hosts": st.hosts if st else {},
                "warnings": st.warnings if st else [],
                "namespaces": our_namespaces(name),
            }
        )
    if args.json:
        sys.stdout.write(json.dumps({"fabrics": rows}, indent=1) + "\n")
        return 0
    if not rows:
        sys.stdout.write("no fabric is up\n")
    for r in rows:
        alive = sum(s["alive"] for s in r["switches"].values())
        state = "up" if r["up"] and r["ready"] else "stale (dlcp testbed down " + r["fabric"] + ")"
        sys.stdout.write(f"{r['fabric']}: {state}; {alive}/{len(r['switches'])} switches running; {r['file']}\n")
        for h, v in r["hosts"].items():
            sys.stdout.write(f"  {h:10} {v['ip']:15} {v['mac']}  on {v['switch']} port {v['port']}\n")
        for w in r["warnings"]:
            sys.stdout.write(f"  warning: {w}\n")
    return 0


def _find_host(host: str, fabric: str | None) -> tuple[str, str]:
    """(fabric, namespace) of a host or switch name among the fabrics that are up."""
    from dlcp.testbed import layout

    store = _store()
    found = []
    for name in [fabric] if fabric else store.names():
        st = store.load(name)
        if st is None:
            continue
        if host in st.hosts:
            found.append((name, st.hosts[host]["namespace"]))
        elif host in st.switches:
            found.append((name, layout.switch_ns(name)))
    if not found:
        raise ValueError(f"HOST {host!r}: no such host or switch in {'fabric ' + fabric if fabric else 'any fabric'}")
    if len(found) > 1:
        raise ValueError(f"HOST {host!r}: in fabrics {', '.join(f for f, _ in found)}; choose one with --fabric")
    return found[0]


def _exec(args: argparse.Namespace) -> int:
    from dlcp.testbed.lifecycle import host_popen, require_root

    require_root()
    cmd = _command(args)
    fabric, ns = _find_host(args.host, args.fabric)
    st = _store().load(fabric)
    env = dict(os.environ, DLCP_TESTBED_FABRIC=fabric, DLCP_TESTBED_HOST=args.host)
    if st is not None and args.host in st.hosts:
        env["DLCP_HOST"] = st.hosts[args.host]["ip"]
    try:
        proc = host_popen(ns, cmd, env=env)
    except FileNotFoundError:
        raise ValueError(f"COMMAND: {cmd[0]!r} not found") from None
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        return proc.wait()


def _apply(args: argparse.Namespace) -> int:
    from dlcp.testbed import controlplane, layout
    from dlcp.testbed.lifecycle import FabricNamespace

    spec = _spec(args)
    unknown = [name for name in args.down if name not in spec.fabric.links]
    if unknown:
        raise ValueError(f"--down {unknown[0]}: no such link in {spec.path} (links: {', '.join(spec.fabric.links)})")
    if args.inside:
        reports = controlplane.configure(spec, down=args.down)
        sys.stdout.write(json.dumps(reports) + "\n")
        return 0
    state = _store().load(spec.name)
    kind = args.switch or (state.switch_kind if state is not None else "dlcp")  # the kind it was brought up with
    return FabricNamespace(layout.switch_ns(spec.name)).popen(controlplane.argv(spec.path, kind, args.down)).wait()


def _explain(args: argparse.Namespace) -> int:
    from dlcp.apps.testbed import explain

    reports = explain.explain(Path(args.results))
    sys.stdout.write((json.dumps(reports, indent=1) if args.json else explain.render(reports)) + "\n")
    return 0


def _stats(args: argparse.Namespace) -> int:
    from dlcp.testbed import counters

    name = _fabric_name(args.fabric)
    st = _store().load(name)
    if st is None:
        raise ValueError(f"FABRIC {args.fabric}: fabric {name} is not up")
    doc = counters.fetch_all(st)
    if args.json:
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
    else:
        sys.stdout.write(counters.render(doc) + "\n")
    return 0


def _run(args: argparse.Namespace) -> int:
    from dlcp.testbed import jobs

    cmd = _command(args)
    spec = _spec(args)
    if args.timeout <= 0:
        raise ValueError(f"--timeout {args.timeout}: must be positive")
    if args.keep and os.geteuid() != 0:
        raise PermissionError("--keep needs root: without it, the fabric lives in a namespace that ends with the run")
    _root_or_userns(args)
    result = jobs.run_on_fabric(spec, cmd, job_id=args.job, out=Path(args.out), timeout_s=args.timeout,
                                keep=args.keep, torchrun=args.torchrun, progress=_say)  # fmt: skip
    sys.stdout.write(f"results: {result.folder}\n")
    for r in result.ranks:
        sys.stdout.write(f"  rank {r.rank} on {r.host} ({r.ip}): exit {r.returncode}, {r.seconds:.1f} s\n")
    return 0 if result.ok else 1


def _traffic(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from dlcp import checks
    from dlcp.testbed import traffic
    from dlcp.testbed.lifecycle import is_up, require_root

    spec = _spec(args)
    t = spec.settings.traffic
    over: dict[str, Any] = {}
    for flag, key, lo, hi in (
        ("--load", "load", 0.0, 1.0), ("--incast", "incast", 0, 64), ("--duration", "duration_s", 0.1, 3600.0),
        ("--flows", "flows", 1, 100_000), ("--udp-share", "udp_share", 0.0, 1.0), ("--seed", "seed", 0, 2**31 - 1),
    ):  # fmt: skip
        value = getattr(args, key if key != "duration_s" else "duration")
        if value is not None:
            checks.in_range(flag, value, lo, hi)
            over[key] = value
    if args.cdf is not None:
        over["cdf"] = args.cdf
    t = replace(t, **over)
    require_root()
    if not is_up(_store().load(spec.name)):
        raise ValueError(f"FABRIC {args.fabric}: fabric {spec.name} is not up (dlcp testbed up {args.fabric})")
    _say(f"{t.cdf} flows at load {t.load:g} of {traffic.bottleneck_bps(spec) / 1e6:g} Mbit/s, incast {t.incast}, "
         f"{t.duration_s:g} s")  # fmt: skip
    report = traffic.run(spec, t).as_dict()
    if args.json:
        sys.stdout.write(json.dumps(report) + "\n")
    else:
        sys.stdout.write("  ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in report.items()))
        sys.stdout.write("\n")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from dlcp import checks
    from dlcp.apps.bench import testbed as bench
    from dlcp.apps.train.trainer import TrainConfig, check
    from dlcp.testbed.jobs import new_folder
    from dlcp.testbed.lifecycle import require_root

    checks.in_range("--repeat", args.repeat, 1, 20)
    checks.in_range("--eval-every", args.eval_every, 1, 1000)
    rates = args.rates or ("bmv2" if args.switch == "bmv2" else "full")
    scenarios = tuple(dict.fromkeys(args.scenario or bench.default_scenarios(rates)))
    for name in scenarios:
        bench.scenario_named(name, rates, args.switch)  # refused before anything is made
    cfg = TrainConfig(
        workers=3,
        model=args.model or (bench.BMV2_MODEL if rates == "bmv2" else "mlp-wide"),
        epochs=1,
        train_samples=args.samples,
        batch_size=32,
        eval_every=args.eval_every,
        loss_bound=args.loss_bound,
    )
    check(cfg)
    if args.switch == "bmv2":
        from dlcp.testbed.lifecycle import SIMPLE_SWITCH_GRPC
        from dlcp.testbed.toolchain import tools

        missing = tools.missing_reason(SIMPLE_SWITCH_GRPC, tools.P4C_BM2_SS)
        if missing:
            raise ValueError(f"--switch bmv2 needs simple_switch_grpc, and p4c-bm2-ss to compile DLCP's program: "
                             f"{missing}")  # fmt: skip
    _root_or_userns(args)
    require_root()
    folder = new_folder(Path(args.out), "bench")
    _say(f"results folder: {folder}")
    report = bench.run(
        cfg, folder, repeat=args.repeat, scenarios=scenarios, extra_gloo_ps=args.extra_gloo_ps, switch=args.switch,
        rates=rates, progress=_say,
    )  # fmt: skip
    (folder / "bench.json").write_text(json.dumps(report, indent=1))
    if args.json:
        sys.stdout.write(json.dumps(report) + "\n")
    else:
        sys.stdout.write(render_bench(report))
    return 1 if report["failed"] else 0


def render_bench(report: dict[str, Any]) -> str:
    """The bench's report as text: per scenario, each ratio's median, range and repeats, and its goal."""
    out = []
    for name, doc in report["scenarios"].items():
        baseline = "; baseline: gloo all-reduce (DDP default)" if any(
            w.startswith("gloo all-reduce") for w in report["runs"].get(name, {})
        ) else ""  # fmt: skip
        where = f"; switch {doc['switch']}, links {doc['links']}" if "switch" in doc else ""
        out.append(
            f"\n{name}: {doc['topology']}, workers {', '.join(doc['workers'])} (rank order){where}, model "
            f"{doc.get('model', '?')}; best full DLCP mode: {doc['best_mode'] or 'none'}{baseline}\n"
        )
        out.append(f"{'ratio':42}{'median':>8}{'range':>16}{'repeats':>9}  goal\n")
        for r in (r for r in report["ratios"] if r["scenario"] == name):
            spread = f"{r['min']:.3f}..{r['max']:.3f}"
            goal = ""
            if r.get("goal"):
                state = "holds" if r["holds"] else "does NOT hold" if r["holds"] is False else "not measured"
                goal = f"{r['goal']}: {state} (in {r['held_in']} of {r['measured_in']})"
            used = ",".join(str(i) for i in r["repeats"])
            out.append(f"{r['name']:42}{r['median']:>8.3f}{spread:>16}{used:>9}  {goal}\n")
        for m in doc["missing"]:
            out.append(f"  missing: {m} (a rank failed: see bench.json's failed)\n")
    for f in report["failed"]:
        out.append(f"FAILED: {f['scenario']} repeat {f['repeat']} of {f['way']}: {f['error'].splitlines()[0]}\n")
    out.append(f"raw: {report['folder']}/bench.json; dlcp testbed explain {report['folder']} breaks each run down\n")
    return "".join(out)


def _faults(args: argparse.Namespace) -> int:
    from dlcp import checks
    from dlcp.apps.testbed import faults
    from dlcp.testbed.jobs import new_folder
    from dlcp.testbed.lifecycle import require_root

    scenarios = faults.chosen("scenarios", args.scenarios, list(faults.FAULTS))
    ways = faults.chosen("ways", args.ways, list(faults.WAYS))
    checks.in_range("--repeat", args.repeat, 1, 20)
    checks.in_range("--fault-at", args.fault_at, 1, 1000)
    checks.in_range("--hang-after", args.hang_after, 1.0, 3600.0)
    cfg = faults.FaultConfig(
        model=args.model or ("mlp" if args.short else "mlp-wide"),
        samples=args.samples or (1152 if args.short else 4096),
        fault_at=args.fault_at,
        hang_after_s=args.hang_after,
    )
    note = f"4 ranks x 32 samples, for {cfg.fault_at} iterations before the fault and 2 after"
    checks.in_range("--samples", cfg.samples, 128 * (cfg.fault_at + 2), 1 << 20, note=note)
    _root_or_userns(args)
    require_root()
    folder = new_folder(Path(args.out), "faults")
    _say(f"results folder: {folder}")
    report = faults.run_all(scenarios, ways, cfg, folder, repeat=args.repeat, progress=_say)
    (folder / "faults.json").write_text(json.dumps(report, indent=1))
    sys.stdout.write(json.dumps(report) + "\n" if args.json else render_faults(report))
    return 0 if report["ok"] else 1


def render_faults(report: dict[str, Any]) -> str:
    """The fault report as text: per scenario and way, what the user saw in each repeat, then the totals."""
    out = [f"{'scenario':16}{'way':6}{'completed':>10}{'errors':>8}{'hangs':>7}{'diverged':>10}{'left':>6}"
           f"{'time s':>12}{'stall s':>11}  what the user saw (per repeat)\n"]  # fmt: skip
    for row in report["summary"]:
        t = row["time_s"]
        span = "-" if t is None else f"{t[0]:.1f}-{t[1]:.1f}"
        stall = "-" if row["stall_s"] is None else f"{row['stall_s'][0]:.1f}-{row['stall_s'][1]:.1f}"
        seen = " | ".join(o.splitlines()[0][:70] for o in row["outcomes"])
        out.append(f"{row['scenario']:16}{row['way']:6}{row['completed']:>10}{row['named_errors']:>8}{row['hangs']:>7}"
                   f"{row['divergent']:>10}{row['left_behind']:>6}{span:>12}{stall:>11}  {seen}\n")  # fmt: skip
    for row in report["summary"]:
        if row.get("spine_bytes_after"):
            sent = " | ".join(
                ", ".join(f"{n} {v / 1e6:.1f} MB" for n, v in sorted(doc.items())) if doc else "-"
                for doc in row["spine_bytes_after"]
            )
            out.append(f"  spine-down {row['way']}: sent by each spine after the reroute (per repeat): {sent}\n")
    bound = report["config"]["bound_slack_s"]
    t = report["totals"]
    out.append(
        f"\nhangs {t['hangs']}, divergent replicas {t['divergent']}, runs that left something behind "
        f"{t['left_behind']}, DLCP errors later than the peer timeout + {bound:g} s {t['over_bound']}, errors that "
        f"named no exception {t['unnamed_errors']}, runs not carried out {t['not_run']}: "
        f"{'all goals hold' if report['ok'] else 'NOT all goals hold'}\n"
    )
    for run in report["runs"]:
        if run["error"]:
            out.append(f"NOT RUN: {run['scenario']} {run['way']} repeat {run['repeat']}: {run['error']}\n")
        for what in run["leftovers"]:
            out.append(f"LEFT BEHIND: {run['scenario']} {run['way']} repeat {run['repeat']}: {what}\n")
    out.append(f"raw: {report['folder']}/faults.json (every run: each rank's outcome and time, the fault's events)\n")
    return "".join(out)
