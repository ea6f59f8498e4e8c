"""Compiling the P4 programs: p4c-bm2-ss for v1model, p4test for TNA, the Tofino compiler when present.

Outputs go to a build folder (``build/p4/`` by default, never committed), at the
paths :mod:`dlcp.p4.paths` names. The v1model P4Info is also committed as
``p4src/v1model/dlcp.p4info.txtpb``;
:func:`refresh_p4info` copies a fresh one there. The Tofino compiler's
resource reports are read by :mod:`dlcp.testbed.toolchain.tofino_report`.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from dlcp.p4 import paths
from dlcp.testbed.toolchain import tofino_report, tools

log = logging.getLogger(__name__)


TOFINO_TARGETS = {"tofino": ("tofino", "tna"), "tofino2": ("tofino2", "t2na")}
"""``--target`` of the Tofino compiler -> (its ``--target``, its ``--arch``), for p4src/tna/dlcp.p4."""

TARGETS = ("v1model", "tna", *TOFINO_TARGETS)
ALL = ("v1model", "tna", "tofino")
"""What ``--target all`` builds. The Tofino compiler runs when it is installed and is then not required:
no CI machine has it (it takes over an hour to build, docs/switch.md)."""

REQUIRED = {"v1model": (tools.P4C_BM2_SS,), "tna": (tools.P4TEST,)}
"""The p4c tools each target needs; the Tofino targets need the Tofino compiler (``tools.find_tofino_compiler``)."""

TNA_INCLUDE_MISSING = (
    f"Tofino's tna.p4 not found (set ${tools.TNA_INCLUDE_ENV} to p4c's backends/tofino/bf-p4c/p4include)"
)

KNOWN_WARNINGS = (
    # p4c's front end gives every table a default action (NoAction) when it has none, and
    # p4c-bm2-ss then warns about every table with an action selector, p4c's own
    # testdata/p4_16_samples/action_selector_shared-bmv2.p4 included. No source change avoids it.
    re.compile(r"warning: Target does not support default_action for \S+ \(due to action profiles\)"),
)
"""Compiler warnings that no change to our P4 can remove; reported, but not counted as unexpected."""


@dataclass
class StepResult:
    """One compiler run."""

    target: str
    tool: str
    command: list[str]
    returncode: int | None
    """``None`` when the tool is not installed (then ``skipped`` says why)."""
    output: str = ""
    skipped: str | None = None
    artifacts: list[Path] = field(default_factory=list)
    report: tofino_report.Report | None = None
    """The Tofino compiler's stage and resource use, when it ran and wrote its reports."""
    report_error: str | None = None
    """Why the reports of a successful Tofino compile could not be read."""

    @property
    def warnings(self) -> list[str]:
        return [line for line in self.output.splitlines() if "[--Wwarn=" in line or "warning:" in line.lower()]

    @property
    def unexpected_warnings(self) -> list[str]:
        return [w for w in self.warnings if not any(k.search(w) for k in KNOWN_WARNINGS)]

    @property
    def ok(self) -> bool:
        return self.skipped is None and self.returncode == 0

    def as_dict(self) -> dict[str, object]:
        return {
            "target": self.target,
            "tool": self.tool,
            "command": self.command,
            "returncode": self.returncode,
            "skipped": self.skipped,
            "warnings": self.warnings,
            "unexpected_warnings": self.unexpected_warnings,
            "artifacts": [str(a) for a in self.artifacts],
            "output": self.output,
            "resources": self.report.as_dict() if self.report is not None else None,
            "report_error": self.report_error,
        }


def _run(target: str, tool: str, args: list[str], artifacts: list[Path], exe: Path | None = None) -> StepResult:
    exe = exe or tools.find(tool)
    if exe is None:
        return StepResult(target, tool, [tool, *args], None, skipped=tools.missing_reason(tool))
    cmd = [str(exe), *args]
    log.info("running %s", " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=paths.ROOT)
    out = (proc.stdout + proc.stderr).strip()
    return StepResult(target, tool, cmd, proc.returncode, out, artifacts=[a for a in artifacts if a.exists()])


def build_v1model(out: Path = paths.DEFAULT_OUT) -> StepResult:
    """``p4c-bm2-ss`` → ``<out>/v1model/dlcp.json`` and ``dlcp.p4info.txtpb``."""
    paths.target_dir("v1model", out).mkdir(parents=True, exist_ok=True)
    json_out, p4info = paths.v1model_json(out), paths.p4info("v1model", out)
    args = ["--std", "p4-16", "--arch", "v1model", "-o", str(json_out), "--p4runtime-files", str(p4info)]
    return _run("v1model", tools.P4C_BM2_SS, [*args, str(paths.V1MODEL_PROGRAM)], [json_out, p4info])


def missing(targets: tuple[str, ...] = TARGETS) -> list[str]:
    """Why the required compilers of ``targets`` cannot run: one sentence each; empty when they all can."""
    why = []
    for target in targets:
        if target in TOFINO_TARGETS:
            reason = tools.tofino_missing_reason()
            if reason is not None:
                why.append(f"{reason}, needed for {target}")
            continue
        reason = tools.missing_reason(*REQUIRED[target])
        if reason is None and target == "tna" and tools.tna_include_dir() is None:
            reason = TNA_INCLUDE_MISSING
        if reason is not None:
            why.append(f"{reason}, needed for {target}")
    return why


def check_tna(out: Path = paths.DEFAULT_OUT, chip: int = 1) -> StepResult:
    """p4c's front and mid end (``p4test``) on the TNA program, with Tofino's includes.

    ``chip`` is what the Tofino driver sets ``__TARGET_TOFINO__`` to: 1 (``tna.p4``) or 2 (``t2na.p4``).
    """
    inc = tools.tna_include_dir()
    if inc is None and tools.find(tools.P4TEST) is not None:
        return StepResult("tna", tools.P4TEST, [tools.P4TEST], None, skipped=TNA_INCLUDE_MISSING)
    paths.target_dir("tna", out).mkdir(parents=True, exist_ok=True)
    args = ["--std", "p4-16", f"-D__TARGET_TOFINO__={chip}", "-I", str(inc), str(paths.TNA_PROGRAM)]
    return _run("tna", tools.P4TEST, args, [])


def tofino_command(target: str, out: Path, driver: Path) -> list[str]:
    """The Tofino compiler's command line for ``target`` (a key of :data:`TOFINO_TARGETS`).

    ``-g`` makes it write its resource report (``pipe/logs/resources.json``), which is only written
    with debug information on. ``--p4runtime-force-std-externs`` writes the counters and the register
    as standard P4Info ``counters`` and ``registers`` (as Stratum needs, and as in the v1model P4Info,
    which the tests compare it with) rather than as Tofino ``externs``.
    """
    chip, arch = TOFINO_TARGETS[target]
    return [
        str(driver), "--target", chip, "--arch", arch, "-g", "-I", str(paths.P4SRC), "-o", str(out),
        "--p4runtime-files", str(out / paths.P4INFO_NAME), "--p4runtime-force-std-externs",
        str(paths.TNA_PROGRAM),
    ]  # fmt: skip


def build_tofino(target: str = "tofino", out: Path = paths.DEFAULT_OUT) -> StepResult:
    """The Tofino compiler (``bf-p4c``, or p4c's ``p4c`` with ``p4c-barefoot``) on the TNA program."""
    compiler = tools.find_tofino_compiler()
    if compiler is None:
        return StepResult(target, tools.TOFINO_COMPILER, [], None, skipped=tools.tofino_missing_reason())
    d = paths.target_dir(target, out)
    if d.exists():
        shutil.rmtree(d)  # a report left from an earlier run must not pass for this one's
    d.mkdir(parents=True)
    cmd = tofino_command(target, d, compiler.driver)
    result = _run(target, compiler.driver.name, cmd[1:], [paths.p4info(target, out)], exe=compiler.driver)
    if result.returncode == 0:
        result.artifacts += [a for a in tofino_report.artifacts(d) if a not in result.artifacts]
        try:
            result.report = tofino_report.read(d)
        except tofino_report.ReportError as exc:
            result.report_error = str(exc)
    return result


def build(targets: tuple[str, ...] = ALL, out: Path = paths.DEFAULT_OUT) -> list[StepResult]:
    results = []
    if "v1model" in targets:
        results.append(build_v1model(out))
    if "tna" in targets:
        results.append(check_tna(out))
    for target in TOFINO_TARGETS:
        if target in targets:
            results.append(build_tofino(target, out))
    return results


def refresh_p4info(result: StepResult) -> bool:
    """Copy a fresh v1model P4Info over the committed one; ``True`` when it changed."""
    fresh = next((a for a in result.artifacts if a.name.endswith(".p4info.txtpb")), None)
    if not result.ok or fresh is None:
        raise ValueError("no P4Info to copy: the v1model build did not succeed")
    if paths.COMMITTED_P4INFO.exists() and paths.COMMITTED_P4INFO.read_text() == fresh.read_text():
        return False
    shutil.copyfile(fresh, paths.COMMITTED_P4INFO)
    log.info("updated %s", paths.COMMITTED_P4INFO)
    return True
