"""What both architectures share lives in ``p4src/common/``, not in copies under ``v1model/`` and ``tna/``."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

P4SRC = Path(__file__).resolve().parents[2] / "p4src"
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)

MAX_SHARED_RUN = 10
"""Longest run of identical code lines two architecture files may have in common. The top
levels both instantiate the same eight controls under the same names (the P4Info names hang
on them): nine lines with ``apply {``. A copied control is far longer (ECMP's was 24)."""


def code_lines(path: Path) -> list[str]:
    """The file's code lines, stripped; comments, blank lines and lone braces left out."""
    lines = (line.strip() for line in _COMMENT.sub("", path.read_text()).splitlines())
    return [line for line in lines if line and line not in ("{", "}")]


def longest_shared_run(a: list[str], b: list[str]) -> tuple[int, str]:
    m = difflib.SequenceMatcher(None, a, b, autojunk=False).find_longest_match(0, len(a), 0, len(b))
    return m.size, "\n".join(a[m.a : m.a + m.size])


def test_longest_shared_run_finds_a_copy() -> None:
    block = [f"line {i};" for i in range(20)]
    assert longest_shared_run(["a;", *block, "b;"], ["c;", *block[:15], "d;"])[0] == 15
    assert longest_shared_run(["a;"], ["b;"])[0] == 0


@pytest.mark.parametrize("v1model", sorted((P4SRC / "v1model").glob("*.p4")), ids=lambda p: p.name)
def test_architecture_files_share_no_copied_block(v1model: Path) -> None:
    for tna in sorted((P4SRC / "tna").glob("*.p4")):
        size, text = longest_shared_run(code_lines(v1model), code_lines(tna))
        assert size <= MAX_SHARED_RUN, f"v1model/{v1model.name} and tna/{tna.name} share {size} lines:\n{text}"
