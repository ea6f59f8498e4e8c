"""``dlcp controller``: configure DLCP switches over P4Runtime from a fabric file (docs/controller.md)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from dlcp import checks

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    # Nothing from dlcp.controller is imported here: registering every area must stay cheap and
    # must not depend on the controller's dependencies. Defaults are filled in by _load.
    area = sub.add_parser("controller", help="configure DLCP switches over P4Runtime for PS or ring jobs")
    verbs = area.add_subparsers(dest="verb", metavar="VERB", required=True)
    fmt = argparse.ArgumentDefaultsHelpFormatter

    def common(p: argparse.ArgumentParser, election: bool = True) -> None:
        p.add_argument("config", type=Path, metavar="CONFIG", help="fabric file (TOML)")
        p.add_argument("--json", action="store_true", help="print the result as JSON")
        p.add_argument("--timeout", type=float, help="seconds a switch has to answer (default: the controller's, 10)")
        p.add_argument("--switch", action="append", metavar="NAME", help="only this switch (repeatable)")
        if election:
            p.add_argument("--election-id", type=int, help="P4Runtime election id (default: the controller's, 10)")

    ap = verbs.add_parser(
        "apply", help="write the difference between each switch and the configuration", formatter_class=fmt
    )
    common(ap)
    ap.add_argument("--dry-run", action="store_true", help="read the switches and print what would be written")
    ap.add_argument("--changes", action="store_true", help="list every change (always listed with --dry-run)")
    ap.set_defaults(func=_apply)

    st = verbs.add_parser(
        "stats", help="forwarded, dropped and trimmed packets per job, class and port", formatter_class=fmt
    )
    common(st, election=False)
    st.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=2.0,
        metavar="SECONDS",
        help="print again every SECONDS (default 2) with rates, until Ctrl-C",
    )
    st.add_argument("--count", type=int, default=0, help="with --watch: stop after this many prints (0: never)")
    st.set_defaults(func=_stats)

    cl = verbs.add_parser("clear", help="remove the controller's entries (all, or one job's)", formatter_class=fmt)
    common(cl)
    cl.add_argument("--job", type=int, metavar="ID", help="remove only this job's entries")
    cl.add_argument("--dry-run", action="store_true", help="print what would be removed")
    cl.set_defaults(func=_clear)

    rn = verbs.add_parser(
        "run", help="stay primary and keep the switches configured (reconcile after restarts)", formatter_class=fmt
    )
    common(rn)
    rn.add_argument("--interval", type=float, default=30.0, help="seconds between checks of a switch's state")
    rn.set_defaults(func=_run)


def _load(args: argparse.Namespace) -> Any:
    from dlcp import checks
    from dlcp.controller import fabric
    from dlcp.controller.session import DEFAULT_ELECTION_ID, DEFAULT_TIMEOUT_S

    if args.timeout is None:
        args.timeout = DEFAULT_TIMEOUT_S
    if getattr(args, "election_id", 1) is None:
        args.election_id = DEFAULT_ELECTION_ID
    checks.positive("--timeout", args.timeout)
    if hasattr(args, "election_id"):  # P4Runtime's election id is a 128-bit number; 0 is no election
        checks.in_range("--election-id", args.election_id, 1, (1 << 128) - 1)
    for flag, value in (("--watch", getattr(args, "watch", None)), ("--interval", getattr(args, "interval", None))):
        if value is not None:
            checks.positive(flag, value)
    fab = fabric.load(args.config)
    for name in args.switch or ():
        if name not in fab.switches:
            raise ValueError(f"--switch {name}: not in {args.config} (switches: {', '.join(fab.switches)})")
    if not getattr(args, "verbose", 0):
        # finsy warns that our software switch has no gNMI on every connect; that is expected.
        logging.getLogger("finsy").setLevel(logging.ERROR)
    return fab


def _apply(args: argparse.Namespace) -> int:
    from dlcp.controller import apply

    fab = _load(args)
    reports = asyncio.run(
        apply.configure(
            fab, dry_run=args.dry_run, election_id=args.election_id, timeout=args.timeout, switches=args.switch
        )
    )
    return _print_reports(reports, args.json, changes=args.changes or args.dry_run)


def _clear(args: argparse.Namespace) -> int:
    from dlcp.controller import apply

    fab = _load(args)
    if args.job is not None and args.job not in fab.jobs:
        raise ValueError(f"--job {args.job}: no such job in {args.config} (jobs: {sorted(fab.jobs)})")
    reports = asyncio.run(
        apply.configure(
            fab,
            dry_run=args.dry_run,
            clear_job=args.job,
            clear_all=args.job is None,
            election_id=args.election_id,
            timeout=args.timeout,
            switches=args.switch,
        )
    )
    return _print_reports(reports, args.json, changes=True)


def _print_reports(reports: list[Any], as_json: bool, changes: bool) -> int:
    bad = [r for r in reports if r.status not in ("ok", "planned")]
    if as_json:
        json.dump({"switches": [r.as_dict(verbose=changes) for r in reports]}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 1 if bad else 0
    cols = ("inserted", "modified", "deleted", "unchanged")
    width = max([len(r.switch) for r in reports] + [6])
    print(f"{'switch':<{width}}  {'status':<11}  " + "  ".join(f"{c:>9}" for c in cols))
    for r in reports:
        counts = "  ".join(f"{r.summary.get(c, '-'):>9}" for c in cols)
        print(f"{r.switch:<{width}}  {r.status:<11}  {counts}")
    for r in reports:
        if changes and r.changes:
            print(f"\n{r.switch} ({r.address}):" + (" (not written)" if r.status == "planned" else ""))
            for c in r.changes:
                print(f"  {c.op:<6} {c.note}  [{c.owner}]")
        if r.queues:
            print(f"\n{r.switch} queues (Thrift): " + "; ".join(r.queues))
    for r in bad:
        print(f"\n{r.switch}: {r.error}", file=sys.stderr)
        if r.outcome is not None:
            for f in r.outcome.failed:
                print(f"  refused: {f.change.op} {f.change.note}: {f.code}: {f.message}", file=sys.stderr)
            if r.outcome.applied and not r.outcome.atomic:
                print(f"  applied: {len(r.outcome.applied)} updates:", file=sys.stderr)
                for c in r.outcome.applied:
                    print(f"    {c.op} {c.note}", file=sys.stderr)
    return 1 if bad else 0


def _stats(args: argparse.Namespace) -> int:
    from dlcp.controller import counters

    checks.at_least("--count", args.count, 0)
    if args.count and args.watch is None:
        raise checks.BadValue("--count", args.count, "valid only with --watch (without it, stats prints once)")
    fab = _load(args)
    previous: Any = None
    then = 0.0
    n = 0
    try:
        while True:
            stats = asyncio.run(counters.read(fab, timeout=args.timeout, switches=args.switch))
            now = time.monotonic()
            rates = _rates(previous, stats, now - then) if previous is not None else None
            if args.json:
                out = stats.as_dict()
                if rates is not None:
                    out["rates"] = rates
                print(json.dumps(out), flush=True)
            else:
                _print_stats(stats, rates)
            n += 1
            if args.watch is None or (args.count and n >= args.count):
                break
            previous, then = stats, now
            time.sleep(args.watch)
    except KeyboardInterrupt:
        pass
    return 1 if stats.errors else 0


def _rates(before: Any, after: Any, dt: float) -> dict[str, dict[str, float]]:
    """Per job: packets/s and bits/s of each total since the previous read."""
    out = {}
    for job, now in after.jobs.items():
        old = before.jobs.get(job, {})
        out[str(job)] = {
            f"{k}_{unit}": ((now[k][field] - old.get(k, {}).get(field, 0)) * mult) / max(dt, 1e-9)
            for k in ("delivered", "dropped", "trimmed")
            for unit, field, mult in (("pps", "packets", 1), ("bps", "bytes", 8))
        }
    return out


def _print_stats(stats: Any, rates: dict[str, dict[str, float]] | None) -> None:
    print(
        f"{'switch':<10} {'port':>4} {'queue':>5} {'jobs':<8} {'fwd pkts':>10} {'fwd bytes':>12} "
        f"{'drop pkts':>10} {'drop bytes':>12} {'trim pkts':>10} {'trim bytes':>12}"
    )
    for c in stats.cells:
        jobs = ",".join(map(str, c.jobs)) or "other"
        v = c.values
        print(
            f"{c.switch:<10} {c.port:>4} {c.queue:>5} {jobs:<8} {v['forwarded'][0]:>10} {v['forwarded'][1]:>12} "
            f"{v['dropped'][0]:>10} {v['dropped'][1]:>12} {v['trimmed'][0]:>10} {v['trimmed'][1]:>12}"
        )
    for job, t in sorted(stats.jobs.items()):
        line = f"job {job}: " + ", ".join(
            f"{k} {t[k]['packets']} packets ({t[k]['bytes']} B)" for k in ("delivered", "dropped", "trimmed")
        )
        if t["shared_cells"]:
            line += f"; {t['shared_cells']} cells shared with other jobs not counted"
        if rates is not None and str(job) in rates:
            r = rates[str(job)]
            line += (
                f"; now {r['delivered_pps']:.0f} packets/s delivered, {r['dropped_pps'] + r['trimmed_pps']:.0f}/s cut"
            )
        print(line)
    for switch, err in stats.errors.items():
        print(f"{switch}: {err}", file=sys.stderr)
    print(flush=True)


def _run(args: argparse.Namespace) -> int:
    from dlcp.controller import reconcile
    from dlcp.controller.session import SwitchError

    fab = _load(args)

    def show(event: reconcile.Event) -> None:
        if event.kind == "unchanged" and not args.verbose:
            return
        if args.json:
            print(json.dumps(event.as_dict()), flush=True)
        else:
            stamp = time.strftime("%H:%M:%S", time.localtime(event.time))
            print(f"{stamp} {event.switch}: {event.kind}: {event.message}", flush=True)
            if event.report is not None and event.report.outcome is not None:
                for f in event.report.outcome.failed:
                    print(f"    refused: {f.change.op} {f.change.note}: {f.code}: {f.message}", flush=True)

    try:
        reconcile.serve(
            fab, show, election_id=args.election_id, timeout=args.timeout, interval=args.interval, switches=args.switch
        )
    except SwitchError as exc:
        raise ValueError(str(exc)) from None
    return 0
