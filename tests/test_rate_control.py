"""The one rate-control rule (dlcp/rate_control.py): its numbers, the host's pacer and the simulator's C++ apply it.

The differential test feeds the same random sequences of (rule, loss verdicts) to the Python rule and to
the simulator's ``RateRule`` (simulations/cpp/rate_control.h, through cppyy as the simulator loads it)
and requires the same rate after every verdict, bit for bit. Each verdict is for a message that began some
verdicts earlier (``lag``), at the rate the sender had then.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_support import needs_ns3

from dlcp import rate_control
from dlcp.host.pacing import AimdPacer, PacingConfig
from dlcp.rate_control import RateRule

MB = 1e6

losses = st.lists(
    st.one_of(st.sampled_from([0.0, 0.02, 0.0200001, 0.04, 0.5, 0.6, 1.0]), st.floats(0.0, 1.0)), max_size=60
)
# (loss, lag): the verdict of a message handed over `lag` verdicts before it (0: just now)
verdicts = st.lists(
    st.tuples(
        st.one_of(st.sampled_from([0.0, 0.02, 0.0200001, 0.04, 0.5, 0.6, 1.0]), st.floats(0.0, 1.0)),
        st.integers(0, 8),
    ),
    max_size=60,
)


@st.composite
def rules(draw: st.DrawFn) -> RateRule:
    max_rate = draw(st.floats(1e3, 1e11))
    return RateRule(
        max_rate=max_rate,
        min_rate=draw(st.floats(1.0, max_rate)),
        increase=draw(st.floats(0.0, max_rate)),
        decrease_above=draw(st.floats(0.001, 0.5)),
        decrease_by_loss=draw(st.booleans()),
    )


def python_rates(rule: RateRule, seq: list[float]) -> list[float]:
    rate, out = rule.max_rate, []
    for loss in seq:
        rate = rule.next_rate(rate, loss)
        out.append(rate)
    return out


def sent_at(history: list[float], lag: int) -> float:
    """The rate a message had when handed over, ``lag`` verdicts ago (``history``: the rate after each)."""
    return history[max(0, len(history) - 1 - lag)]


def python_rates_lagged(rule: RateRule, seq: list[tuple[float, int]]) -> list[float]:
    history = [rule.max_rate]
    for loss, lag in seq:
        history.append(rule.next_rate(history[-1], loss, sent_at(history, lag)))
    return history[1:]


def test_a_lossy_verdict_halves_or_cuts_by_the_loss_and_a_clean_one_adds() -> None:
    halve = RateRule(max_rate=100 * MB, min_rate=10 * MB, increase=5 * MB, decrease_above=0.02)
    assert halve.next_rate(100 * MB, 0.1) == 50 * MB
    assert halve.next_rate(100 * MB, 0.02) == 100 * MB, "loss at the threshold is not congestion"
    assert halve.next_rate(12 * MB, 0.9) == 10 * MB, "never below min_rate"
    assert halve.next_rate(50 * MB, 0.0) == 55 * MB
    assert halve.next_rate(99 * MB, 0.0) == 100 * MB, "never above max_rate"
    by_loss = RateRule(max_rate=100 * MB, min_rate=1 * MB, increase=5 * MB, decrease_above=0.02, decrease_by_loss=True)
    assert by_loss.next_rate(100 * MB, 0.1) == pytest.approx(90 * MB)
    assert by_loss.next_rate(100 * MB, 0.8) == 50 * MB, "at most halving"


def test_messages_under_way_together_cut_the_rate_once() -> None:
    # A server hands 128 pulls over at 100 MB/s; each verdict counts 10% lost. Cut from the rate each was sent
    # at, the rate ends at 90 MB/s; cut from the rate now, 128 verdicts would take it to the floor.
    by_loss = RateRule(max_rate=100 * MB, min_rate=1 * MB, increase=5 * MB, decrease_above=0.02, decrease_by_loss=True)
    rate = 100 * MB
    for _ in range(128):
        rate = by_loss.next_rate(rate, 0.1, sent_at=100 * MB)
    assert rate == pytest.approx(90 * MB)
    assert by_loss.next_rate(rate, 0.1) == pytest.approx(81 * MB), "a message sent at the cut rate cuts again"
    assert by_loss.next_rate(40 * MB, 0.1, sent_at=100 * MB) == 40 * MB, "a late verdict never raises the rate"
    assert by_loss.next_rate(40 * MB, 0.0, sent_at=100 * MB) == 45 * MB, "a clean one adds to the rate now"
    halve = RateRule(max_rate=100 * MB, min_rate=10 * MB, increase=5 * MB, decrease_above=0.02)
    assert halve.next_rate(30 * MB, 0.5, sent_at=15 * MB) == 10 * MB, "never below min_rate"


def test_paced_and_unpaced_numbers() -> None:
    share = 95e6 / 8
    p = rate_control.paced(share, largest_bound=0.035)
    assert (p.max_rate, p.min_rate, p.increase, p.decrease_above, p.decrease_by_loss) == (
        share, share / 16, share / 8, 0.07, True,
    )  # fmt: skip
    u = rate_control.unpaced()
    assert (u.max_rate, u.min_rate, u.increase, u.decrease_above, u.decrease_by_loss) == (
        12.5e9, 12.5e6, 125e6, 0.02, False,
    )  # fmt: skip
    assert rate_control.unpaced(12.5e9 / 2).increase == 125e6 / 2, "in proportion to the line"
    with pytest.raises(ValueError, match="min_rate"):
        RateRule(max_rate=1.0, min_rate=2.0, increase=0.0)


def test_first_pass_loss_counts_holes_not_the_tail_still_queued() -> None:
    assert rate_control.first_pass_loss([], 16) == 0.0
    assert rate_control.first_pass_loss([14, 15], 16) == 0.0, "the tail after the last received: still queued"
    assert rate_control.first_pass_loss([3, 9, 15], 16) == 2 / 16
    assert rate_control.first_pass_loss([3, 14], 16) == 2 / 16, "15 arrived: 14 is a hole"
    assert rate_control.first_pass_loss(list(range(16)), 16) == 1.0, "nothing arrived: all lost"


def test_shared_rates_is_a_port_over_its_distinct_senders() -> None:
    # Three workers into one server's 100-unit port (a second message of w1 does not count twice); the
    # server's pulls cross only unshaped ports.
    hops = {("w1", "s"): ["s-port"], ("w2", "s"): ["s-port"], ("w3", "s"): ["s-port", "leaf-up"]}
    rates = {"s-port": 100.0, "leaf-up": 20.0}
    pairs = [*hops, ("w1", "s"), ("s", "w1")]
    got = rate_control.shared_rates(pairs, lambda a, b: hops.get((a, b), ["w-port"]), rates.get)
    assert got == {"w1": int(100 / 3 * 0.95), "w2": int(100 / 3 * 0.95), "w3": int(20 * 0.95)}


@given(rules(), verdicts)
def test_the_host_pacer_follows_the_rule(rule: RateRule, seq: list[tuple[float, int]]) -> None:
    pacer = AimdPacer(PacingConfig.from_rule(rule))
    got = [pacer.rate]
    for loss, lag in seq:
        pacer.on_feedback(loss, sent_at(got, lag))
        got.append(pacer.rate)
    assert got[1:] == python_rates_lagged(rule, seq)
    assert pacer.decreases == sum(rule.congested(x) for x, _ in seq)
    plain = AimdPacer(PacingConfig.from_rule(rule))
    for loss, _ in seq:
        plain.on_feedback(loss)  # without the rate at hand-over: the rate now
    assert plain.rate == (python_rates(rule, [x for x, _ in seq]) or [rule.max_rate])[-1]


@pytest.fixture(scope="module")
def ns() -> Any:
    from dlcp.simulations import engine

    return engine.load()


@needs_ns3
@settings(max_examples=300, deadline=None)
@given(rules(), verdicts)
def test_simulator_rule_is_the_core_rule(ns: Any, rule: RateRule, seq: list[tuple[float, int]]) -> None:
    cpp = ns.RateRule()
    cpp.max_rate, cpp.min_rate, cpp.increase = rule.max_rate, rule.min_rate, rule.increase
    cpp.decrease_above, cpp.decrease_by_loss = rule.decrease_above, rule.decrease_by_loss
    got = [cpp.max_rate]
    for loss, lag in seq:
        assert bool(cpp.Congested(loss)) == rule.congested(loss)
        got.append(cpp.Next(got[-1], loss, sent_at(got, lag)))
    assert got[1:] == python_rates_lagged(rule, seq)
    rate = cpp.max_rate
    for loss, _ in seq:
        rate = cpp.Next(rate, loss)  # the rate now as the base
    assert rate == (python_rates(rule, [x for x, _ in seq]) or [rule.max_rate])[-1]


@st.composite
def bitmaps(draw: st.DrawFn) -> tuple[list[int], int]:
    n = draw(st.integers(1, 64))
    have = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return [i for i, h in enumerate(have) if not h], n


@needs_ns3
@settings(max_examples=300, deadline=None)
@given(bitmaps())
def test_simulator_first_pass_loss_is_the_cores(ns: Any, case: tuple[list[int], int]) -> None:
    missing, n = case
    assert ns.FirstPassLoss(missing, n) == rate_control.first_pass_loss(missing, n)


def test_sprayed_fractions_split_evenly_at_every_switch_and_sum_to_one_per_stage() -> None:
    # h0 on leaf L0, h9 on leaf L1, two spines S0 and S1: half of the packets cross each spine.
    nxt = {"L0": [("L0", "S0"), ("L0", "S1")], "S0": [("S0", "L1")], "S1": [("S1", "L1")], "L1": [("L1", "h9")]}
    f = rate_control.sprayed("L0", nxt.__getitem__, lambda port: None if port[1] == "h9" else port[1])
    assert f == {("L0", "S0"): 0.5, ("L0", "S1"): 0.5, ("S0", "L1"): 0.5, ("S1", "L1"): 0.5, ("L1", "h9"): 1.0}


def test_sprayed_senders_share_the_parallel_ports_and_single_path_senders_one_port() -> None:
    rate = {"up0": 100.0, "up1": 100.0, "down": 1000.0}
    sprayed = {("a", "x"): {"up0": 0.5, "up1": 0.5, "down": 1.0}, ("b", "y"): {"up0": 0.5, "up1": 0.5}}
    assert rate_control.shared_rates(sprayed, lambda s, d: sprayed[(s, d)], rate.get, headroom=1.0) == {
        "a": 100,
        "b": 100,
    }, "two senders sprayed over two 100s: each may send 100"
    single = {("a", "x"): ["up0"], ("b", "y"): ["up0"]}
    assert rate_control.shared_rates(single, lambda s, d: single[(s, d)], rate.get, headroom=1.0) == {
        "a": 50,
        "b": 50,
    }, "on one path they share it"
    with pytest.raises(ValueError, match="positive"):
        rate_control.headroom(0)
    assert 0.98 < rate_control.headroom(8192) < 0.99 and rate_control.headroom(1024) < 0.95


def test_active_rates_count_only_the_senders_active_now() -> None:
    # Four workers may push to a server's 100-unit port; with one of them active it has the port alone, with
    # all four each has a quarter. Each pair has its own rate: w1's pair to the idle server s2 is not active.
    paths = {(w, s): {f"{s}-port": 1.0} for w in ("w1", "w2", "w3", "w4") for s in ("s1", "s2")}
    rate = {"s1-port": 100.0, "s2-port": 100.0}
    ids = {name: i for i, name in enumerate(("w1", "w2", "w3", "w4", "s1", "s2"))}
    num = {(ids[a], ids[b]): p for (a, b), p in paths.items()}
    one = rate_control.active_rates([(0, 4)], num, rate.get, headroom=1.0)
    assert one == {(0, 4): 100}
    four = rate_control.active_rates([(w, 4) for w in range(4)], num, rate.get, headroom=1.0)
    assert four == {(w, 4): 25 for w in range(4)}
    mixed = rate_control.active_rates([(0, 4), (1, 4), (0, 5)], num, rate.get, headroom=0.5)
    assert mixed == {(0, 4): 25, (1, 4): 25, (0, 5): 50}, "w1 toward s2 alone there, and at s1 one of two"
    # The static rule counts every sender that may meet there: a quarter whoever is busy.
    static = rate_control.shared_rates(num, lambda a, b: num[(a, b)], rate.get, headroom=1.0)
    assert static == {w: 25 for w in range(4)}


FRACTIONS = (1.0, 0.5, 0.25, 1 / 3, 1 / 6)


@st.composite
def active_cases(
    draw: st.DrawFn,
) -> tuple[list[float], dict[tuple[int, int], dict[int, float]], list[tuple[bool, int]]]:
    """Random ports (rate 0: not counted), pairs with random paths, and a sequence of starts and stops."""
    nports = draw(st.integers(1, 6))
    rates = draw(st.lists(st.sampled_from([0.0, 1e9, 25e9, 40e9, 100e9, 3.3e9]), min_size=nports, max_size=nports))
    hosts = draw(st.integers(2, 7))
    pair_list = draw(
        st.lists(
            st.tuples(st.integers(0, hosts - 1), st.integers(0, hosts - 1)).filter(lambda p: p[0] != p[1]),
            min_size=1,
            max_size=10,
            unique=True,
        )
    )
    paths = {
        pair: draw(st.dictionaries(st.integers(0, nports - 1), st.sampled_from(FRACTIONS), min_size=1, max_size=nports))
        for pair in pair_list
    }
    events = draw(st.lists(st.tuples(st.booleans(), st.integers(0, len(pair_list) - 1)), min_size=1, max_size=30))
    return rates, paths, events


@needs_ns3
@settings(max_examples=300, deadline=None)
@given(active_cases(), st.sampled_from([1.0, 0.95, rate_control.headroom(8192), rate_control.headroom(64960)]))
def test_simulator_active_shares_are_the_cores(ns: Any, case: Any, headroom: float) -> None:
    rates, paths, events = case
    shares = ns.ActiveShares()
    shares.SetPorts(rates)
    shares.SetHeadroom(headroom)
    for (src, dst), through in paths.items():
        shares.SetPath(src, dst, list(through), list(through.values()))
    pairs = list(paths)
    in_flight: dict[tuple[int, int], int] = {}
    for start, i in events:
        pair = pairs[i]
        if start:
            shares.Start(*pair)
            in_flight[pair] = in_flight.get(pair, 0) + 1
        elif in_flight.get(pair):
            shares.Stop(*pair)
            in_flight[pair] -= 1
        active = [p for p in pairs if in_flight.get(p)]
        want = rate_control.active_rates(active, paths, lambda port: rates[port] or None, headroom)
        got = {p: int(shares.Rate(*p)) for p in pairs}
        assert {p: r for p, r in got.items() if r} == want, f"after {'start' if start else 'stop'} of {pair}"
