"""ASan + UBSan fuzz run of the software switch's C data plane: a million random and mutated frames.

The harness (fuzz_pipeline.c) links the pipeline, the egress queues and the switch core
without sockets, and checks that every frame was forwarded or counted as dropped and that
the counters add up; the sanitizers check every memory access and arithmetic operation.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "testbed/switch"
SPEC = ROOT / "dlcp/p4"
"""The core's spec: the generated dlcp_constants.h (on the extension's include path too, pyproject.toml)."""
FRAMES = 1_000_000
SANITIZERS = "-fsanitize=address,undefined"


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc not found")
    out = tmp_path_factory.mktemp("fuzz") / "fuzz_pipeline"
    argv = [
        gcc, "-std=gnu11", "-O1", "-g", SANITIZERS, "-fno-sanitize-recover=all", "-fno-omit-frame-pointer",
        "-Wall", "-Wextra", "-Werror", "-Wno-missing-field-initializers", f"-I{SRC}", f"-I{SPEC}",
        str(Path(__file__).with_name("fuzz_pipeline.c")),
        *(str(SRC / f) for f in ("pipeline.c", "egress.c", "switch.c")),
        "-lm", "-lpthread", "-o", str(out),
    ]  # fmt: skip
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0 and ("cannot find" in r.stderr and "asan" in r.stderr):
        pytest.skip(f"the sanitizer runtime is not installed: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    return out


def _run(harness: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1")
    return subprocess.run([str(harness), *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
def test_a_million_frames_no_crash_no_report_all_counted(harness: Path) -> None:
    r = _run(harness, str(FRAMES), "20260511")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "runtime error" not in r.stderr and "Sanitizer" not in r.stderr, r.stderr
    stats = dict(kv.split("=") for kv in r.stdout.split())
    assert int(stats["frames"]) == FRAMES
    assert int(stats["forwarded"]) + int(stats["dropped"]) == FRAMES
    # the mix reaches every stage: forwarding, trimming, every drop the pipeline can take
    for key in ("forwarded", "trimmed", "sent", "lost", "selective", "buffer", "pushed_out", "not_ipv4", "ttl",
                "no_route", "next_hop", "no_port", "oversize"):  # fmt: skip
        assert int(stats[key]) > 0, key


def test_the_sanitizers_catch_an_overflow(harness: Path) -> None:
    """The harness can fail: one byte read past a frame is reported."""
    r = _run(harness, "1000", "1", "overflow")
    assert r.returncode != 0
    assert "heap-buffer-overflow" in r.stderr
