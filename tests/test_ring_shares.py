"""How a ring divides its tensor by the rates of its hops (dlcp.ring_shares)."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlcp.ring_shares import chunk_bounds, chunk_weights, hop_loads


def slowest(weights, rates):
    return max(load / rate for load, rate in zip(hop_loads(weights), rates, strict=True))


def test_even_rates_give_even_chunks_exactly() -> None:
    for n in range(1, 9):
        assert chunk_weights([7.0] * n) == tuple(1.0 / n for _ in range(n))


def test_a_slow_hop_carries_the_tensor_once() -> None:
    """The testbed's star: rank 2 sends toward rank 0 through a 200 Mbit/s port, the others at 1 Gbit/s."""
    weights = chunk_weights([982e6, 982e6, 196e6])
    assert weights == pytest.approx((0.5, 0.5, 0.0), abs=1e-9)
    assert hop_loads(weights)[2] == pytest.approx(1.0)
    assert hop_loads([1 / 3] * 3)[2] == pytest.approx(4 / 3)


def test_two_ranks_send_the_tensor_once_whatever_the_rates() -> None:
    assert chunk_weights([1.0, 9.0]) == (0.5, 0.5)
    assert hop_loads([0.2, 0.8]) == [1.0, 1.0]


@pytest.mark.parametrize("rates", [[], [1.0, 0.0, 2.0], [1.0, -1.0, 1.0], [float("nan"), 1.0, 1.0]])
def test_bad_rates_are_refused(rates) -> None:
    with pytest.raises(ValueError, match=r"rank|positive"):
        chunk_weights(rates)


rates_st = st.lists(st.floats(min_value=0.05, max_value=20.0), min_size=3, max_size=9)


@settings(max_examples=60, deadline=None)
@given(rates_st)
def test_weights_are_fractions_and_never_slower_than_even(rates) -> None:
    weights = chunk_weights(rates)
    assert all(w >= 0.0 for w in weights)
    assert sum(weights) == pytest.approx(1.0)
    even = [1.0 / len(rates)] * len(rates)
    assert slowest(weights, rates) <= slowest(even, rates) * (1 + 1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0.05, max_value=20.0), min_size=3, max_size=3))
def test_three_ranks_reach_the_least_time(rates) -> None:
    """With three ranks hop r carries 1 + w[r] (w sums to 1), so the least time is the least t with every
    1 / rate[r] <= t and sum(max(0, t * rate[r] - 1)) >= 1: bisected here independently."""
    lo, hi = max(1 / r for r in rates), 2 / min(rates)
    for _ in range(200):
        t = (lo + hi) / 2
        lo, hi = (lo, t) if sum(max(0.0, t * r - 1) for r in rates) >= 1 else (t, hi)
    assert slowest(chunk_weights(rates), rates) == pytest.approx(hi, rel=1e-6)


@given(st.integers(0, 10_000), rates_st)
def test_bounds_cut_every_element_once(n, rates) -> None:
    bounds = chunk_bounds(n, chunk_weights(rates))
    assert bounds[0] == 0 and bounds[-1] == n and len(bounds) == len(rates) + 1
    assert all(a <= b for a, b in itertools.pairwise(bounds))
