"""The data-center flow-size distributions: one set of names and one set of points.

The simulator's background workloads (``simulations/workloads.py``) and the
testbed's traffic generator (``testbed/traffic.py``) both draw from these
tables, so the two run the same workload. Each is a CDF of flow size in bytes,
piecewise linear between its points, as the pFabric authors' traffic
generator (github.com/datacenter/empirical-traffic-gen, ``DCTCP_CDF`` and
``VL2_CDF``) and the HPCC simulator (``WebSearch_distribution.txt``) tabulate
them.

Names: ``web-search`` and ``data-mining``; the spellings without the hyphen
(``websearch``, ``datamining``, which simulator scenarios use) are aliases.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

WEB_SEARCH = "web-search"
DATA_MINING = "data-mining"

CDFS: dict[str, tuple[tuple[int, float], ...]] = {
    # (flow size in bytes, cumulative fraction of flows)
    # Web search: DCTCP's measured query and background traffic (Alizadeh et al., "Data Center TCP
    # (DCTCP)", SIGCOMM 2010), as tabulated by pFabric (Alizadeh et al., SIGCOMM 2013).
    WEB_SEARCH: (
        (0, 0.0), (10_000, 0.15), (20_000, 0.20), (30_000, 0.30), (50_000, 0.40), (80_000, 0.53),
        (200_000, 0.60), (1_000_000, 0.70), (2_000_000, 0.80), (5_000_000, 0.90), (10_000_000, 0.97),
        (30_000_000, 1.0),
    ),
    # Data mining: VL2's measured flow sizes (Greenberg et al., "VL2: A Scalable and Flexible Data
    # Center Network", SIGCOMM 2009), as tabulated by pFabric (SIGCOMM 2013).
    DATA_MINING: (
        (0, 0.0), (180, 0.1), (216, 0.2), (560, 0.3), (900, 0.4), (1_100, 0.5), (1_870, 0.6), (3_160, 0.7),
        (10_000, 0.8), (400_000, 0.9), (3_160_000, 0.95), (100_000_000, 0.98), (1_000_000_000, 1.0),
    ),
}  # fmt: skip

NAMES = tuple(CDFS)
"""The canonical names, in the order help texts list them."""

ALIASES = {"websearch": WEB_SEARCH, "datamining": DATA_MINING}
"""Other accepted spellings of the canonical names."""

ACCEPTED = (*NAMES, *ALIASES)
"""Every name a scenario or a testbed file may give."""


def canonical(name: str) -> str:
    """The canonical name of ``name`` (an alias or a canonical name); ValueError naming the known ones."""
    if name in CDFS:
        return name
    if name in ALIASES:
        return ALIASES[name]
    raise ValueError(f"unknown flow-size distribution {name!r} (known: {', '.join(ACCEPTED)})")


def sizes(name: str, u: np.ndarray | float, cap: int = 0) -> np.ndarray:
    """Flow sizes in bytes (at least 1, at most ``cap`` when set) at the quantiles ``u`` in [0, 1).

    Inverse transform, linear between the points: ``u`` drawn uniformly gives sizes of the distribution.
    (numpy is imported here, not with the module: the CLI reads :data:`NAMES` while it parses.)
    """
    import numpy as np

    pts = np.array(CDFS[canonical(name)], dtype=np.float64)
    size, cum = pts[:, 0], pts[:, 1]
    out = np.maximum(np.ceil(np.interp(u, cum, size)), 1)
    if cap:
        out = np.minimum(out, cap)
    return np.atleast_1d(out).astype(np.int64)


MEAN_DRAWS = 200_000
"""Draws behind :func:`mean`'s estimate."""


def mean(name: str, cap: int = 0) -> float:
    """The mean flow size in bytes, flows capped at ``cap`` when set: the mean of :data:`MEAN_DRAWS` seeded draws.

    An estimate (within 2% of the exact mean of the piecewise-linear CDF), and the same one every call: a flow
    rate is ``load`` over it, and the simulator's seeded figures rest on its value.
    """
    import numpy as np

    return float(sizes(name, np.random.default_rng(0).random(MEAN_DRAWS), cap).mean())
