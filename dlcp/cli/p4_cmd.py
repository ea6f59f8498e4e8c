"""``dlcp p4``: generate the P4 constants and test vectors, compile the P4 programs, run the vectors on BMv2."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path

from dlcp import checks

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from dlcp.p4.paths import DEFAULT_OUT, ROOT
    from dlcp.testbed.toolchain.build import TARGETS
    from dlcp.testbed.toolchain.tools import TOFINO_P4C_ENV

    area = sub.add_parser("p4", help="P4 programs: generate constants and vectors, build, run vectors on BMv2")
    verbs = area.add_subparsers(dest="verb", metavar="VERB", required=True)
    fmt = argparse.ArgumentDefaultsHelpFormatter

    gen = verbs.add_parser(
        "gen-constants", help="write p4src/common/constants.p4 and dlcp_header.p4", formatter_class=fmt
    )
    gen.add_argument("--root", type=Path, default=ROOT, help="repository root")
    gen.add_argument("--check", action="store_true", help="only report whether the committed files are stale")
    gen.set_defaults(func=_gen_constants)

    vec = verbs.add_parser("gen-vectors", help="write the switch test vectors", formatter_class=fmt)
    vec.add_argument("--dir", type=Path, default=ROOT / "tests/vectors/switch", help="vector folder")
    vec.add_argument("--check", action="store_true", help="only report whether the committed files are stale")
    vec.set_defaults(func=_gen_vectors)

    build = verbs.add_parser(
        "build",
        help="compile: p4c-bm2-ss (v1model), p4test (tna), the Tofino compiler (tofino, tofino2)",
        formatter_class=fmt,
    )
    build.add_argument(
        "--target",
        choices=[*TARGETS, "all"],
        default="all",
        help="what to build: all = v1model, tna (p4c's front end) and tofino when its compiler is installed; "
        "tofino and tofino2 need the Tofino compiler (bf-p4c, or p4c with p4c-barefoot beside it, on PATH "
        f"or in ${TOFINO_P4C_ENV}) and print its stage and resource use",
    )
    build.add_argument("--out", type=Path, default=DEFAULT_OUT, help="build folder (not committed)")
    build.add_argument("--update-p4info", action="store_true", help="copy the fresh v1model P4Info into p4src/")
    build.add_argument(
        "--strict",
        action="store_true",
        help="fail on unexpected compiler warnings, and refuse to start when a required compiler is missing "
        "(p4c-bm2-ss for v1model; p4test and Tofino's tna.p4 for tna; the Tofino compiler only when "
        "--target names tofino or tofino2, which need it anyway)",
    )
    build.add_argument("--json", action="store_true", help="print the results as JSON")
    build.set_defaults(func=_build)

    run = verbs.add_parser("vectors", help="run the switch test vectors on BMv2 (needs root)", formatter_class=fmt)
    run.add_argument("--dir", type=Path, default=ROOT / "tests/vectors/switch", help="vector folder")
    run.add_argument("-k", dest="select", default="", help="only cases whose name contains this")
    run.add_argument("--log-file", type=Path, help="BMv2 log file (slows the switch down)")
    run.add_argument("--json", action="store_true", help="print the results as JSON")
    run.set_defaults(func=_vectors)


def _gen_constants(args: argparse.Namespace) -> int:
    from dlcp.p4 import gen_constants

    if not (args.root / "p4src").is_dir():
        raise checks.BadValue("--root", str(args.root), "must be a DLCP checkout (it has no p4src/ folder)")
    return _sync(gen_constants.files(args.root), args.check)


def _gen_vectors(args: argparse.Namespace) -> int:
    from dlcp.p4 import vector_gen

    return _sync(vector_gen.files(args.dir), args.check)


def _writable_folder(flag: str, path: Path) -> None:
    """``path`` exists as a folder or can be created (bad otherwise: :class:`~dlcp.checks.BadValue`)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise checks.BadValue(flag, str(path), f"must be a folder that can be created ({exc.strerror})") from None


def _sync(files: dict[Path, str], check: bool) -> int:
    """Report (``check``: exit 1 if any) or write the generated files that differ from disk."""
    from dlcp.p4 import generated

    if check:
        stale = generated.stale(files)
        for path in stale:
            sys.stdout.write(f"stale: {path}\n")
        return 1 if stale else 0
    for path in generated.write(files):
        sys.stdout.write(f"wrote {path}\n")
    return 0


def _build(args: argparse.Namespace) -> int:
    from dlcp.p4 import paths
    from dlcp.testbed.toolchain import build

    targets = build.ALL if args.target == "all" else (args.target,)
    if args.target in build.TOFINO_TARGETS:
        # Naming a Tofino target asks for its compiler: absent, nothing is built.
        missing = build.missing(targets)
        if missing:
            # OSError: main() prints it as "dlcp: error: ..." and exits with 2, as `dlcp p4 vectors` does.
            raise OSError(f"{'; '.join(missing)}. docs/switch.md, 'Getting the Tofino compiler', says how")
    if args.strict:
        missing = build.missing(tuple(t for t in targets if t not in build.TOFINO_TARGETS))
        if missing:
            raise OSError(
                f"--strict: {'; '.join(missing)}. Install p4c (docs/switch.md, 'Getting p4c and BMv2') "
                "or build without --strict, which skips what is missing"
            )
    _writable_folder("--out", args.out)
    results = build.build(targets, args.out)
    if args.json:
        sys.stdout.write(json.dumps([r.as_dict() for r in results], indent=1) + "\n")
    rc = 0
    for r in results:
        if not args.json:
            if r.skipped:
                sys.stdout.write(f"{r.target:8} {r.tool:11} skipped: {r.skipped}\n")
            else:
                status = "ok" if r.ok else f"FAILED (exit {r.returncode})"
                known = len(r.warnings) - len(r.unexpected_warnings)
                note = f" ({known} known, see testbed/toolchain/build.py)" if known else ""
                sys.stdout.write(f"{r.target:8} {r.tool:11} {status}, {len(r.warnings)} warning(s){note}\n")
                if r.output and (not r.ok or r.warnings):
                    sys.stdout.write(r.output + "\n")
                if r.report is not None:
                    sys.stdout.write(r.report.table() + "\n")
                if r.report_error is not None:
                    sys.stdout.write(f"no resource report: {r.report_error}\n")
        # Under --strict every required compiler was found above; with --target all the Tofino
        # compiler may still be skipped.
        if (r.skipped is None and not r.ok) or (args.strict and r.unexpected_warnings) or r.report_error:
            rc = 1
    if args.update_p4info:
        v1 = next((r for r in results if r.target == "v1model"), None)
        if v1 is None or not v1.ok:
            sys.stderr.write("dlcp: no v1model build to take the P4Info from\n")
            return 1
        changed = build.refresh_p4info(v1)
        sys.stdout.write(f"{'updated' if changed else 'unchanged'}: {paths.COMMITTED_P4INFO}\n")
    return rc


def _vectors(args: argparse.Namespace) -> int:
    from dlcp.p4 import vectors
    from dlcp.testbed.bmv2 import Bmv2Switch

    if not args.dir.is_dir():
        raise checks.BadValue("--dir", str(args.dir), "must be a folder of vector files")
    cases = [c for c in vectors.load_dir(args.dir) if args.select in c.name]
    if not cases:
        raise checks.BadValue("-k", args.select, f"must be part of a case name in {args.dir} (none matches)")
    with tempfile.TemporaryDirectory(prefix="dlcp-p4-") as tmp:
        ports = sorted(set().union(*(c.ports() for c in cases)))
        results = []
        with Bmv2Switch.compiled(Path(tmp), ports, args.log_file) as sw:
            for c in cases:
                r = sw.run_case(c)
                results.append(r)
                if not args.json:
                    sys.stdout.write(f"{'PASS' if r.passed else 'FAIL'} {c.source}:{c.name} ({r.seconds:.1f}s)\n")
                    for f in r.failures:
                        sys.stdout.write(f"    {f}\n")
    if args.json:
        sys.stdout.write(json.dumps([r.as_dict() for r in results], indent=1) + "\n")
    return 0 if all(r.passed for r in results) else 1
