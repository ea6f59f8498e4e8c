"""``dlcp sim run|bench|figure|fidelity``: packet-level simulations on ns-3 (docs/simulations.md)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dlcp import checks
from dlcp.tomlfile import TomlFileError, read_toml


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("sim", help="packet simulations on ns-3", description=__doc__)
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)

    r = verbs.add_parser("run", help="run one scenario file", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    r.add_argument("scenario", type=Path, help="scenario TOML (docs/simulations.md)")
    r.add_argument(
        "--baseline",
        help="override the scenario's baseline (dlcp, dctcp, tcp, pfabric, tensor_priority, dlcp_no_priority,"
        " dlcp_no_drop, dlcp_no_spray, dlcp_no_bound; docs/simulations.md)",
    )
    r.add_argument("--json", action="store_true", help="print the whole summary as JSON")
    r.set_defaults(func=_run)

    b = verbs.add_parser(
        "bench",
        help="stock ns-3 vs DLCP's routing on ns-3's devices vs DLCP's routing and port model, 256 hosts",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    b.add_argument("--leaves", type=int, default=16)
    b.add_argument("--hosts-per-leaf", type=int, default=16)
    b.add_argument("--spines", type=int, default=8)
    b.add_argument("--kb", type=int, default=256, help="KiB each host sends per round (2 rounds)")
    b.add_argument(
        "--baselines",
        action="store_true",
        help="also run the DCTCP and TCP baselines on ns-3's devices and on DLCP's port model",
    )
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=_bench)

    f = verbs.add_parser(
        "figure", help="simulate and plot one figure", formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    f.add_argument(
        "name",
        help="figure name: a folder under simulations/figures/ (incast_tail, ps_iteration, ring_iteration, ablation,"
        " loss_bound, scale)",
    )
    f.add_argument("--scale", choices=("small", "paper"), default="small")
    f.add_argument("--plot-only", action="store_true", help="re-plot from the saved data, no simulation")
    f.add_argument("--out", type=Path, default=Path("out/figures"), help="where data and plots go")
    f.add_argument("--parallel", type=int, default=1, help="simulations at a time (local processes)")
    f.add_argument("--address", help="a Dask scheduler (host:port) to run the sweep on instead")
    f.add_argument("--json", action="store_true")
    f.set_defaults(func=_figure)

    fd = verbs.add_parser(
        "fidelity",
        help="the testbed's gloo and DLCP runs against the simulator's (docs/simulations.md)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    src = fd.add_mutually_exclusive_group(required=True)
    src.add_argument("--testbed", type=Path, help="a testbed.json written by --run-testbed: simulate and compare")
    src.add_argument("--run-testbed", action="store_true", help="run the testbed part first (root, minutes)")
    fd.add_argument(
        "--fabric", choices=("incast", "leaf-spine"), default="incast",
        help="testbed: the bench's fabric (incast: PS over gloo's TCP against DLCP's PS; leaf-spine: gloo's"
        " all-reduce against DLCP's ring)",
    )  # fmt: skip
    fd.add_argument("--samples", type=int, default=2048, help="testbed: training samples (one epoch)")
    fd.add_argument("--repeat", type=int, default=2, help="testbed: turns of each way")
    fd.add_argument("--seeds", type=int, default=2, help="simulator: runs of each way (seeds 1..N)")
    fd.add_argument("--out", type=Path, default=Path("out/fidelity"), help="results folder (a run gets a subfolder)")
    fd.add_argument("--json", action="store_true")
    fd.set_defaults(func=_fidelity)


def _fidelity(args: argparse.Namespace) -> int:
    from dlcp.apps.bench import fidelity

    checks.in_range("--samples", args.samples, 96, 1 << 20)
    checks.in_range("--repeat", args.repeat, 1, 20)
    checks.in_range("--seeds", args.seeds, 1, 20)
    if args.run_testbed:
        from dlcp.apps.train.trainer import check
        from dlcp.testbed.jobs import new_folder
        from dlcp.testbed.lifecycle import require_root

        check(fidelity.train_config(args.samples, args.fabric))
        require_root()
        folder = new_folder(args.out, "fidelity")
        print(f"results folder: {folder}", file=sys.stderr)
        doc = fidelity.run_testbed(
            folder, args.samples, args.repeat, lambda t: print(t, file=sys.stderr), fabric=args.fabric
        )
    else:
        try:
            doc = json.loads(args.testbed.read_text())
        except FileNotFoundError:
            raise ValueError(f"--testbed: no such file {args.testbed}") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"--testbed: {args.testbed} is not JSON: {exc}") from None
        if not isinstance(doc, dict) or not {"scenario", "train", "runs"} <= set(doc):
            raise ValueError(f"--testbed: {args.testbed} is not a testbed.json from `dlcp sim fidelity --run-testbed`")
        folder = args.testbed.parent
    print("simulating the same fabric and job ...", file=sys.stderr)
    result = fidelity.compare(doc, seeds=args.seeds)
    (folder / "fidelity.json").write_text(json.dumps(result, indent=1))
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
    else:
        print(fidelity.report(result))
        print(f"raw: {folder / 'fidelity.json'}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from dlcp.simulations import runner, scenario

    if args.baseline is not None:
        checks.one_of("--baseline", args.baseline, scenario.BASELINES)
    try:
        table: dict[str, Any] = read_toml(args.scenario)
    except TomlFileError as exc:
        raise scenario.ScenarioError(str(exc)) from None
    if args.baseline:
        table["baseline"] = args.baseline
    try:
        scenario.from_table(table)
    except scenario.ScenarioError as exc:
        raise scenario.ScenarioError(f"{args.scenario}: {exc}") from None
    print(f"simulating {table.get('name', args.scenario.stem)} ...", file=sys.stderr)
    with _memory_refused(f"{args.scenario}"):
        result = runner.run(table)
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
        return 0
    print(
        f"{result['scenario']} [{result['baseline']}] {result['hosts']} hosts, {result['sim_time_s']:.4f} s simulated"
    )
    for tag, f in result["flows"].items():
        print(
            f"  {tag:<12} {f['completed']}/{f['count']} done  FCT p50 {f['fct_p50_s'] * 1e6:9.1f} us"
            f"  p99 {f['fct_p99_s'] * 1e6:9.1f} us  max {f['fct_max_s'] * 1e6:9.1f} us  loss {f['loss_fraction']:.4f}"
        )
    for j in result["jobs"]:
        its = ", ".join(f"{t * 1e3:.2f}" for t in j["iteration_s"])
        print(f"  job {j['tag']}: iteration times (ms) {its}")
    p = result["perf"]
    print(
        f"  wall {p['wall_s']} s (CPU {p['cpu_s']} s), {p['packets']} packets, {p['packets_per_s']} packets/s,"
        f" peak RSS {p['peak_rss_mb']} MB (estimate {p['memory_estimate_mb']} MB)"
    )
    return 0


@contextlib.contextmanager
def _memory_refused(what: str) -> Iterator[None]:
    """A simulation the machine's memory cannot hold is a bad value (exit code 2), not a crash."""
    from dlcp.simulations import simulate

    try:
        yield
    except simulate.MemoryRefused as exc:
        raise ValueError(f"{what}: {exc}") from None


def _bench(args: argparse.Namespace) -> int:
    from dlcp.apps.bench import sim as bench

    for name in ("leaves", "hosts_per_leaf", "spines", "kb"):
        checks.at_least(f"--{name.replace('_', '-')}", getattr(args, name), 1)
    sizes = f"--leaves {args.leaves}, --hosts-per-leaf {args.hosts_per_leaf}, --spines {args.spines}, --kb {args.kb}"
    with _memory_refused(sizes):
        out = bench.bench(args.leaves, args.hosts_per_leaf, args.spines, args.kb, args.baselines)
    if args.json:
        json.dump(out, sys.stdout, indent=1)
        print()
        return 0
    labels = {
        "global": "stock ns-3 (global routing)",
        "dlcp_ns3": "DLCP routing, ns-3 ports",
        "dlcp": "DLCP routing, DLCP ports",
        "dctcp_ns3": "DCTCP, ns-3 ports",
        "dctcp": "DCTCP, DLCP ports",
        "tcp_ns3": "TCP, ns-3 ports",
        "tcp": "TCP, DLCP ports",
    }
    for name, label in labels.items():
        if name not in out:
            continue
        r = out[name]
        print(
            f"{label:<28} {r['hosts']} hosts  packets {r['packets']}  wall_s {r['wall_s']}"
            f"  packets_per_s {r['packets_per_s']}  cpu_s {r['cpu_s']}  packets_per_cpu_s {r['packets_per_cpu_s']}"
            f"  peak_rss_mb {r['peak_rss_mb']}"
        )
    print(
        f"DLCP / stock: {out['speedup']}x packets per second, {out['speedup_cpu']}x packets per CPU second;"
        f" DLCP ports / ns-3 ports: {out['port_model_cpu']}x packets per CPU second"
    )
    if args.baselines:
        print(
            f"DLCP ports / ns-3 ports, packets per CPU second: DCTCP {out['port_model_cpu_dctcp']}x,"
            f" TCP {out['port_model_cpu_tcp']}x"
        )
    return 0


def _figure(args: argparse.Namespace) -> int:
    from dlcp.simulations import figures

    if args.name not in figures.FIGURES:
        raise ValueError(f"unknown figure {args.name!r} (known: {', '.join(sorted(figures.FIGURES))})")
    checks.at_least("--parallel", args.parallel, 1)
    if args.plot_only:
        data = figures.load(args.name, args.scale, args.out)
    else:
        with _memory_refused(f"{args.name} --scale {args.scale}"):
            data = figures.run(
                args.name,
                args.scale,
                args.out,
                parallel=args.parallel,
                address=args.address,
                progress=lambda done, total: print(f"  {done}/{total} runs done", file=sys.stderr),
            )
    for f in data.get("failed", []):
        print(f"failed: {f['label']} {json.dumps(f['overrides'])}: {f['error']}", file=sys.stderr)
    if not data["rows"]:
        return 1
    png = figures.plot(data, args.out)
    if args.json:
        json.dump(data["rows"], sys.stdout, indent=1)
        print()
    else:
        for baseline, vals in data["rows"].items():
            print(f"{baseline:<24} " + "  ".join(f"{k} {v:.1f}" for k, v in vals.items()))
        print(f"plot: {png}")
    return 1 if data.get("failed") else 0
