"""Sender pacing: the token bucket holds the long-run rate, debts are paid, AIMD moves the rate."""

import time

import pytest

from dlcp.host.pacing import AimdPacer, PacingConfig

MB = 1_000_000


def _elapsed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


@pytest.mark.timing
def test_wait_holds_the_rate_without_spinning() -> None:
    pacer = AimdPacer(PacingConfig(max_rate=100 * MB, min_rate=MB, burst=MB))
    cpu = time.process_time()
    took = _elapsed(lambda: [pacer.wait(MB) for _ in range(6)])
    assert 0.045 <= took < 0.5, "6 MB at 100 MB/s with a 1 MB burst: at least 50 ms (less a little slack)"
    assert time.process_time() - cpu < 0.6 * took, "the pacer sleeps, it does not spin"


@pytest.mark.timing
def test_charged_bytes_are_paid_by_the_next_wait() -> None:
    pacer = AimdPacer(PacingConfig(max_rate=100 * MB, min_rate=MB, burst=MB))
    assert _elapsed(lambda: pacer.charge(3 * MB)) < 0.005, "charge never waits"
    assert _elapsed(lambda: pacer.wait(MB)) >= 0.025  # 3 MB of debt beyond the burst, at 100 MB/s


def test_aimd() -> None:
    cfg = PacingConfig(max_rate=100 * MB, min_rate=10 * MB, increase=5 * MB, decrease_above=0.02)
    pacer = AimdPacer(cfg)
    pacer.on_feedback(0.05)
    assert pacer.rate == 50 * MB and pacer.decreases == 1
    for _ in range(4):
        pacer.on_feedback(0.05)
    assert pacer.rate == 10 * MB, "never below min_rate"
    pacer.on_feedback(0.01)  # tolerated loss is not congestion
    assert pacer.rate == 15 * MB
    for _ in range(100):
        pacer.on_feedback(0.0)
    assert pacer.rate == 100 * MB, "never above max_rate"


def test_bad_config() -> None:
    with pytest.raises(ValueError, match="min_rate"):
        PacingConfig(max_rate=MB, min_rate=2 * MB)


@pytest.mark.timing
def test_a_call_of_call_bytes_from_a_full_bucket_does_not_sleep_and_shrinks_with_the_rate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dlcp.host.pacing as pacing

    slept: list[float] = []
    monkeypatch.setattr(pacing.time, "sleep", slept.append)
    pacer = AimdPacer(PacingConfig(max_rate=12_500 * MB, min_rate=MB, burst=MB))
    full = pacer.call_bytes()
    assert full > 10 * MB, "at the full rate a call carries a burst and about a millisecond's worth"
    pacer.wait(full)
    assert slept == [], "from a full bucket: no sleep"
    pacer.wait(full)
    assert len(slept) == 1 and slept[0] >= 0.001, "the next call pays the debt"
    pacer.on_feedback(0.5)
    assert MB < pacer.call_bytes() < full


def test_bytes_the_sender_spaced_itself_are_debited_after_refilling_uncapped() -> None:
    """``spaced``: C paced 1 MB at the rate while the bucket (burst 100 kB) refilled; the refill during the
    call is not capped at the burst, so a sender that kept the rate ends near empty, not 900 kB in debt."""
    pacer = AimdPacer(PacingConfig(max_rate=1e6, min_rate=1e3, burst=100_000))
    pacer.wait(100_000)  # admits the first burst: the bucket is empty
    pacer._last -= 0.9  # the call then spaced 900 kB at 1 MB/s, taking 0.9 s
    pacer.spaced(900_000, slept=0.85)
    assert abs(pacer._tokens) < 5_000, pacer._tokens
    assert pacer.slept == 0.85
    capped = AimdPacer(PacingConfig(max_rate=1e6, min_rate=1e3, burst=100_000))
    capped.wait(100_000)
    capped._last -= 0.9
    capped.charge(900_000)  # the cap before the debit: what spaced must not do
    assert capped._tokens < -700_000
