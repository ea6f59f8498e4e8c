"""How a ring all-reduce divides a tensor among its ranks: by the rates of the ring's hops.

In a ring of ``n`` ranks, rank ``r`` sends only to rank ``r + 1``, over its hop. The tensor is cut into ``n``
chunks; chunk ``c`` is reduced on its way round the ring and ends, whole, at rank ``c - 1``, which starts its
all-gather. Rank ``r`` sends every chunk but ``c = r + 1`` in the reduce-scatter and every chunk but ``c = r + 2``
in the all-gather, so its hop carries ``2 - w[r+1] - w[r+2]`` of the tensor (``w`` the chunks' fractions, summing
to 1). With even chunks every hop carries ``2 (n - 1) / n``; where one hop is slower than the others (a worker
behind a narrow port: the testbed's star, a host on a slower link) that hop sets the time of the whole ring,
while the others idle. :func:`chunk_weights` chooses the fractions that minimise the slowest hop's time,
``max_r (2 - w[r+1] - w[r+2]) / rate[r]``: on the star with one 200 Mbit/s hop among 1 Gbit/s ones, that hop
carries the tensor once instead of 4/3 times, the least any rank behind it can receive (it needs every reduced
element once). Even rates give even chunks, exactly.

The fractions are a pure function of the hops' rates, which every rank of a job reads from the same job file
(the controller's pacing, ``[transport] send_rate_bps``), so every rank computes the same chunks without
talking. A chunk may be empty: its messages are neither sent nor awaited, on every rank alike.
"""

from __future__ import annotations

from collections.abc import Sequence

_SEARCH_STEPS = 48
"""Steps of each search: a bisection halves its interval (at most 2: fractions of the tensor, or a time), a
ternary search cuts it to two thirds; 48 leave the fractions within 1e-8 of the best, far below one element."""


def _cover(need: Sequence[float], first: float) -> list[float]:
    """The least fractions ``w`` with ``w[0] = first`` and ``w[p] + w[p + 1] >= need[p]`` round the cycle.

    Going forward, each next fraction is the least its pair needs (optimal on a chain); the last pair, which closes
    the cycle back to ``w[0]``, takes what it still lacks from the last fraction.
    """
    w = [first]
    for b in need[:-1]:
        w.append(max(0.0, b - w[-1]))
    w[-1] += max(0.0, need[-1] - w[-1] - first)
    return w


def _total(need: Sequence[float], first: float) -> float:
    return sum(_cover(need, first))


def _least_first(need: Sequence[float]) -> float:
    """A first fraction whose cover has the least total: the total is convex in it (a linear program's value in
    its right-hand side), so a ternary search finds it."""
    lo, hi = 0.0, max(need)
    for _ in range(_SEARCH_STEPS):
        a, b = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        if _total(need, a) <= _total(need, b):
            hi = b
        else:
            lo = a
    return lo


def _balanced_cover(need: Sequence[float]) -> list[float]:
    """A least cover, chosen in the middle of the first fractions that attain the least total (they form an
    interval), which keeps the other hops' loads even too."""
    first = _least_first(need)
    best = _total(need, first)
    left, right = 0.0, first
    for _ in range(_SEARCH_STEPS):
        mid = (left + right) / 2
        left, right = (left, mid) if _total(need, mid) <= best else (mid, right)
    low = right
    left, right = first, max(need)
    for _ in range(_SEARCH_STEPS):
        mid = (left + right) / 2
        left, right = (mid, right) if _total(need, mid) <= best else (left, mid)
    return _cover(need, (low + left) / 2)


def hop_loads(weights: Sequence[float]) -> list[float]:
    """The fraction of the tensor each rank's hop carries (reduce-scatter and all-gather) under ``weights``."""
    n = len(weights)
    if n < 3:  # one rank sends nothing; two send each other the tensor once, whatever the chunks
        return [float(n - 1)] * n
    return [2.0 - weights[(r + 1) % n] - weights[(r + 2) % n] for r in range(n)]


def chunk_weights(rates: Sequence[float]) -> tuple[float, ...]:
    """The fraction of the tensor in each chunk of a ring whose rank ``r`` sends at ``rates[r]`` (any unit).

    Even rates (or fewer than 3 ranks, where every hop carries the tensor once whatever the chunks) give
    ``1 / n`` each. Otherwise the fractions minimise the slowest hop's time (module docstring); they are found by
    bisection on that time, each step asking for the least fractions that keep every hop within it.
    """
    n = len(rates)
    if n == 0:
        raise ValueError("a ring needs at least one rank")
    if any(not r > 0 for r in rates):
        raise ValueError(f"every hop's rate must be positive, got {list(rates)}")
    if n < 3 or min(rates) == max(rates):
        return tuple(1.0 / n for _ in range(n))

    def need(t: float) -> list[float]:
        # Hop r needs w[r+1] + w[r+2] >= 2 - t * rate[r]: as pairs p = r + 1 of the cycle, (w[p], w[p+1]).
        return [max(0.0, 2.0 - t * rates[(p - 1) % n]) for p in range(n)]

    lo, hi = 0.0, 2.0 / min(rates)  # at hi every hop may carry the whole tensor twice: any fractions do
    for _ in range(_SEARCH_STEPS):
        mid = (lo + hi) / 2
        n_need = need(mid)
        if _total(n_need, _least_first(n_need)) <= 1.0:
            hi = mid
        else:
            lo = mid
    cover = _balanced_cover(need(hi))
    total = sum(cover)
    if total <= 0.0:  # no hop needs anything: even
        return tuple(1.0 / n for _ in range(n))
    return tuple(w / total for w in cover)  # what the cover leaves unassigned only lightens every hop


def chunk_bounds(num_elems: int, weights: Sequence[float]) -> list[int]:
    """Element boundaries ``[0, b1, ..., n]`` of the chunks, ``weights`` of ``num_elems`` each (rounded down at
    each boundary, so every rank cuts the same elements)."""
    total = 0.0
    out = [0]
    for w in weights[:-1]:
        total += w
        out.append(min(num_elems, max(out[-1], int(total * num_elems))))
    out.append(num_elems)
    return out
