"""The shared checks: one message format, and the machine's share read from the kernel."""

from __future__ import annotations

import logging
import math

import pytest

from dlcp import checks, resources
from dlcp.config import ConfigError, from_dict


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: checks.fraction("--q", 1.0), "--q: got 1, must be in [0, 1)"),
        (lambda: checks.fraction("--q", math.nan), "--q: got nan, must be a finite number"),
        (lambda: checks.at_least("--n", 0, 1), "--n: got 0, must be at least 1"),
        (lambda: checks.at_least("--n", True, 0), "--n: got True, must be an integer"),
        (lambda: checks.at_least("--n", 2.5, 0), "--n: got 2.5, must be an integer"),
        (lambda: checks.positive("--lr", 0.0), "--lr: got 0, must be above 0"),
        (lambda: checks.in_range("--p", 9, 1, 8, note="why"), "--p: got 9, must be in 1..8 (why)"),
        (lambda: checks.multiple_in_range("--b", 12, 8, 8, 64, "bytes"), "--b: got 12, must be a multiple of 8"),
        (lambda: checks.one_of("--m", "mesh", ("ring", "ps")), "--m: got 'mesh', must be one of 'ring', 'ps'"),
        (lambda: checks.seed("--seed", 1 << 32), "--seed: got 4294967296, must be in 0..4294967295"),
    ],
)
def test_messages_name_the_value_and_what_is_valid(call, message: str) -> None:
    with pytest.raises(checks.BadValue) as info:
        call()
    assert str(info.value).startswith(message)


def test_values_inside_their_range_pass_through() -> None:
    assert checks.fraction("q", 0.0) == 0.0 and checks.at_least("n", 1, 1) == 1
    assert checks.multiple_in_range("b", 64, 8, 8, 64) == 64 and checks.seed("s", 0) == 0


def test_job_file_errors_carry_their_dotted_path_once() -> None:
    with pytest.raises(ConfigError, match=r"^limits\.max_message_bytes: got -1, must be at least 0$"):
        from_dict({"limits": {"max_message_bytes": -1}})
    with pytest.raises(
        ConfigError, match=r"^transport\.payload_bytes: got 65000, must be a multiple of 8 in 8\.\.64960"
    ):
        from_dict({"transport": {"payload_bytes": 65000}})


def test_the_kernel_says_what_this_machine_has() -> None:
    assert resources.usable_cpus() >= 1
    avail = resources.available_memory()
    if avail is None:
        pytest.skip("no MemAvailable in /proc/meminfo")
    assert 0 < avail < 1 << 50


def test_memory_beyond_half_warns_and_beyond_all_refuses(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(resources, "available_memory", lambda: 10 * 10**9)
    caplog.set_level(logging.WARNING)
    resources.check_memory("--size", 1, 4 * 10**9, "how")
    assert caplog.text == ""
    resources.check_memory("--size", 2, 6 * 10**9, "how")
    assert "--size 2: needs about 6.0 GB of memory (how), 60% of the 10.0 GB available" in caplog.text
    with pytest.raises(checks.BadValue, match=r"--size: got 3, needs about 11.0 GB .* 10.0 GB available; at most 2"):
        resources.check_memory("--size", 3, 11 * 10**9, "how", "at most 2")


def test_workers_beyond_the_cpus_warn_and_far_beyond_refuse(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(resources, "usable_cpus", lambda: 2)
    caplog.set_level(logging.WARNING)
    resources.check_workers("--workers", 2)
    assert caplog.text == ""
    resources.check_workers("--workers", 32)
    assert "32 worker processes share 2 usable CPU(s)" in caplog.text and "about 32 s" in caplog.text
    with pytest.raises(checks.BadValue, match="--workers: got 33, must be at most 32 here"):
        resources.check_workers("--workers", 33)
