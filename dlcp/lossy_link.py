"""An in-memory lossy link for demos and tests: drops packets by drop class, seeded.

It models the selective dropping a DLCP switch does under congestion: the
link must shed a given fraction of a message's packets and takes them from
the highest drop class first (``selective=True``) or uniformly at random.
"""

from __future__ import annotations

import numpy as np


def choose_losses(drop_classes: np.ndarray, fraction: float, rng: np.random.Generator, selective: bool) -> np.ndarray:
    """Indices of the packets a congested link drops (``fraction`` of them, rounded)."""
    n = drop_classes.size
    k = round(fraction * n)
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    if not selective:
        return np.sort(rng.choice(n, size=k, replace=False))
    # Highest drop class first; random order within a class.
    order = np.lexsort((rng.random(n), -drop_classes.astype(np.int64)))
    return np.sort(order[:k])
