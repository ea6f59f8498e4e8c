"""Finding the P4 toolchain: the one place that reads ``DLCP_P4_BIN_DIR``.

p4c and BMv2 are in no package registry; they are built from p4lang's sources
outside this repository. A tool is looked up first in ``$DLCP_P4_BIN_DIR``
(when set), then on ``PATH``. Tests and the CLI ask :func:`find` and skip or
fail with :func:`missing_reason` when a tool is absent.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

BIN_DIR_ENV = "DLCP_P4_BIN_DIR"
"""Directory holding p4test, p4c-bm2-ss, simple_switch and simple_switch_CLI (optional)."""

TNA_INCLUDE_ENV = "DLCP_TNA_INCLUDE"
"""Directory holding Tofino's ``tna.p4`` (p4c's ``backends/tofino/bf-p4c/p4include``), for p4test on TNA."""

P4TEST = "p4test"
P4C_BM2_SS = "p4c-bm2-ss"
BF_P4C = "bf-p4c"
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


def tna_include_dir() -> Path | None:
    """Directory with ``tna.p4``: ``$DLCP_TNA_INCLUDE``, else next to an installed p4c's source tree."""
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
    for c in candidates:
        if (c / "tna.p4").is_file():
            return c
    return None
