"""Finding the P4 toolchain: the one place that reads ``DLCP_P4_BIN_DIR``.

p4c and BMv2 are in no package registry; they are built from p4lang's sources
outside this repository. A tool is looked up first in ``$DLCP_P4_BIN_DIR``
(when set), then on ``PATH``. Tests and the CLI ask :func:`find` and skip or
fail with :func:`missing_reason` when a tool is absent.

The Tofino compiler has two names: Intel's SDE installs its driver as
``bf-p4c``; a p4c build with the open-source Tofino back end installs it as
``p4c``, the name of p4c's plain driver too, with the back end
``p4c-barefoot`` beside it. :func:`find_tofino_compiler` takes
``$DLCP_TOFINO_P4C`` when set, else ``$SDE_INSTALL/bin/bf-p4c``, else the
first ``bf-p4c``, else the first ``p4c`` that has ``p4c-barefoot`` beside it,
in ``$DLCP_P4_BIN_DIR`` and then each ``PATH`` folder.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

BIN_DIR_ENV = "DLCP_P4_BIN_DIR"
"""Directory holding p4test, p4c-bm2-ss, simple_switch and simple_switch_CLI (optional)."""

TNA_INCLUDE_ENV = "DLCP_TNA_INCLUDE"
"""Directory holding Tofino's ``tna.p4`` (p4c's ``backends/tofino/bf-p4c/p4include``), for p4test on TNA."""

TOFINO_P4C_ENV = "DLCP_TOFINO_P4C"
"""Path of the Tofino compiler's driver (optional): ``bf-p4c``, or a ``p4c`` with ``p4c-barefoot`` beside it."""

SDE_INSTALL_ENV = "SDE_INSTALL"
"""Intel's SDE sets it to its install folder, which holds ``bin/bf-p4c``."""

P4TEST = "p4test"
P4C_BM2_SS = "p4c-bm2-ss"
BF_P4C = "bf-p4c"
P4C = "p4c"
P4C_BAREFOOT = "p4c-barefoot"
TOFINO_COMPILER = "Tofino compiler"
"""How messages name it: ``bf-p4c`` or a ``p4c`` driver with ``p4c-barefoot``, whichever is found."""
SIMPLE_SWITCH = "simple_switch"
SIMPLE_SWITCH_CLI = "simple_switch_CLI"


def bin_dir() -> Path | None:
    value = os.environ.get(BIN_DIR_ENV)
    return Path(value) if value else None


def find(name: str) -> Path | None:
    """The tool's path, from ``$DLCP_P4_BIN_DIR`` first, then ``PATH``; ``None`` when absent."""
    d = bin_dir()
    if d is not None and (d / name).is_file() and os.access(d / name, os.X_OK):
        return d / name
    found = shutil.which(name)
    return Path(found) if found else None


def missing_reason(*names: str) -> str | None:
    """``None`` when every tool is found, else a sentence naming the missing ones and where they were sought."""
    missing = [n for n in names if find(n) is None]
    if not missing:
        return None
    where = f"${BIN_DIR_ENV} ({bin_dir()}) or PATH" if bin_dir() else f"PATH (or set ${BIN_DIR_ENV})"
    return f"{', '.join(missing)} not found on {where}"


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _search_dirs() -> list[Path]:
    """``$DLCP_P4_BIN_DIR``, then every ``PATH`` folder, in order."""
    d = bin_dir()
    dirs = [d] if d is not None else []
    dirs += [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    return dirs


def _is_barefoot_p4c(driver: Path) -> bool:
    """A ``p4c`` driver of a build with the Tofino back end: ``p4c-barefoot`` lies beside it."""
    return any(_executable(d / P4C_BAREFOOT) for d in {driver.parent, driver.resolve().parent})


@dataclass(frozen=True)
class TofinoCompiler:
    """The Tofino compiler's driver, and how it was found."""

    driver: Path
    found_by: str

    @property
    def include_dir(self) -> Path | None:
        """Its ``tna.p4``/``t2na.p4`` (``<prefix>/share/p4c/p4include``), when installed beside it."""
        inc = self.driver.resolve().parents[1] / "share" / "p4c" / "p4include"
        return inc if (inc / "tna.p4").is_file() else None


def _tofino_from_env() -> tuple[TofinoCompiler | None, str | None]:
    """``$DLCP_TOFINO_P4C`` when set: the compiler, or why the value is not one."""
    value = os.environ.get(TOFINO_P4C_ENV)
    if not value:
        return None, None
    path = Path(value)
    if not _executable(path):
        return None, f"${TOFINO_P4C_ENV} ({value}) is not an executable file"
    if path.name != BF_P4C and not _is_barefoot_p4c(path):
        return None, f"${TOFINO_P4C_ENV} ({value}) is not a Tofino compiler: no {P4C_BAREFOOT} beside it"
    return TofinoCompiler(path, f"${TOFINO_P4C_ENV}"), None


def find_tofino_compiler() -> TofinoCompiler | None:
    """The Tofino compiler (module docstring: where it is sought); ``None`` when absent."""
    if os.environ.get(TOFINO_P4C_ENV):
        return _tofino_from_env()[0]
    sde = os.environ.get(SDE_INSTALL_ENV)
    if sde and _executable(Path(sde) / "bin" / BF_P4C):
        return TofinoCompiler(Path(sde) / "bin" / BF_P4C, f"${SDE_INSTALL_ENV}")
    dirs = _search_dirs()
    for d in dirs:
        if _executable(d / BF_P4C):
            return TofinoCompiler(d / BF_P4C, "search path")
    for d in dirs:
        if _executable(d / P4C) and _is_barefoot_p4c(d / P4C):
            return TofinoCompiler(d / P4C, "search path")
    return None


def tofino_missing_reason() -> str | None:
    """``None`` when :func:`find_tofino_compiler` finds one, else a sentence saying what was sought."""
    found, bad_env = _tofino_from_env()
    if found is not None:
        return None
    if bad_env is not None:
        return bad_env
    if find_tofino_compiler() is not None:
        return None
    where = f"${BIN_DIR_ENV} ({bin_dir()}) or PATH" if bin_dir() else "PATH"
    sde = f", ${SDE_INSTALL_ENV}/bin ({os.environ[SDE_INSTALL_ENV]})" if os.environ.get(SDE_INSTALL_ENV) else ""
    return (
        f"{TOFINO_COMPILER} not found: no {BF_P4C}{sde} and no {P4C} with {P4C_BAREFOOT} beside it "
        f"on {where}; set ${TOFINO_P4C_ENV} to its driver"
    )


def tna_include_dir() -> Path | None:
    """Directory with ``tna.p4``: ``$DLCP_TNA_INCLUDE``, else next to p4test or the Tofino compiler."""
    value = os.environ.get(TNA_INCLUDE_ENV)
    candidates = [Path(value)] if value else []
    p4test = find(P4TEST)
    if p4test is not None:
        real = p4test.resolve()
        # An installed p4c keeps its include files in <prefix>/share/p4c/p4include; a build tree
        # sits inside the source tree, whose Tofino back end carries tna.p4.
        for parent in real.parents:
            candidates.append(parent / "backends/tofino/bf-p4c/p4include")
            candidates.append(parent / "share/p4c/tofino-p4include")
            candidates.append(parent / "src/p4c/backends/tofino/bf-p4c/p4include")
    tofino = find_tofino_compiler()
    if tofino is not None and tofino.include_dir is not None:
        candidates.append(tofino.include_dir)
    for c in candidates:
        if (c / "tna.p4").is_file():
            return c
    return None
