"""The priority policy: which packets matter most, and which may be dropped.

* **Priority class from the layer.** The next forward pass needs the front
  layers first, so layer 0 gets the highest data class and the last layer the
  lowest. With ``reserve_top_class`` (the default) the top class is kept for
  control packets and retransmissions.
* **Drop class from gradient magnitude.** Each packet's elements are reduced to
  one statistic (mean |g| by default); packets whose statistic falls below the
  tensor's configured quantile cuts become drop-eligible. Small gradients
  matter least.

Everything is vectorised: classifying the packets of a 100M-element tensor is
one reduction over a ``(packets, elements_per_packet)`` view plus a quantile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from dlcp.message import MessageSpec
from dlcp.protocol import NUM_DROP_CLASSES, NUM_PRIORITY_CLASSES, MessageKind

Statistic = Literal["mean_abs", "max_abs", "rms"]


@dataclass(frozen=True)
class KindPolicy:
    """Settings for one message kind (PS push, PS pull, all-reduce steps)."""

    loss_bound: float = 0.0
    """Largest fraction of the message's elements that may be missing at completion."""
    drop_quantiles: tuple[float, ...] = ()
    """Increasing quantile cuts of the magnitude statistic. Packets below the
    i-th cut from the top get drop class ``len(cuts) - i``; with ``(0.25, 0.5)``
    the smallest quarter is class 2, the next quarter class 1, the rest class 0."""
    layer_bounds: dict[int, float] = field(default_factory=dict)
    """Per-layer overrides of ``loss_bound``."""

    def __post_init__(self) -> None:
        _check_fraction("loss_bound", self.loss_bound)
        for layer, bound in self.layer_bounds.items():
            if not isinstance(layer, int) or layer < 0:
                raise ValueError(f"layer_bounds: layer index must be a non-negative integer, got {layer!r}")
            _check_fraction(f"layer_bounds[{layer}]", bound)
        q = self.drop_quantiles
        if len(q) >= NUM_DROP_CLASSES:
            raise ValueError(f"drop_quantiles: at most {NUM_DROP_CLASSES - 1} cuts, got {len(q)}")
        for v in q:
            if not 0.0 < v < 1.0:
                raise ValueError(f"drop_quantiles: each cut must be in (0, 1), got {v}")
        if list(q) != sorted(set(q)):
            raise ValueError(f"drop_quantiles must be strictly increasing, got {list(q)}")

    def bound_for(self, layer: int) -> float:
        return self.layer_bounds.get(layer, self.loss_bound)


def _check_fraction(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be a fraction in [0, 1), got {value!r}")


def _default_kinds() -> dict[MessageKind, KindPolicy]:
    return {
        MessageKind.PUSH: KindPolicy(loss_bound=0.01, drop_quantiles=(0.5,)),
        # Parameters carry no magnitude-importance signal, and a gap keeps a stale value.
        MessageKind.PULL: KindPolicy(loss_bound=0.005),
        MessageKind.REDUCE_SCATTER: KindPolicy(loss_bound=0.01, drop_quantiles=(0.5,)),
        # The all-gather hands every replica the same result: reliable by default
        # so replicas cannot drift apart.
        MessageKind.ALL_GATHER: KindPolicy(loss_bound=0.0),
    }


@dataclass(frozen=True)
class Policy:
    """Priority and drop-class assignment for every message kind."""

    num_classes: int = NUM_PRIORITY_CLASSES
    reserve_top_class: bool = True
    statistic: Statistic = "mean_abs"
    sample_elems: int = 32
    """Compute each packet's statistic over at most this many evenly spaced elements (0: all).
    Drop classes need a ranking, not an exact mean, and sampling keeps classification
    far cheaper than the copy that sends the packet."""
    kinds: dict[MessageKind, KindPolicy] = field(default_factory=_default_kinds)

    def __post_init__(self) -> None:
        if not 2 <= self.num_classes <= NUM_PRIORITY_CLASSES:
            raise ValueError(f"num_classes must be in 2..{NUM_PRIORITY_CLASSES}, got {self.num_classes}")
        if self.sample_elems < 0:
            raise ValueError(f"sample_elems must be >= 0, got {self.sample_elems}")
        if self.statistic not in ("mean_abs", "max_abs", "rms"):
            raise ValueError(f"statistic must be mean_abs, max_abs or rms, got {self.statistic!r}")
        missing = set(MessageKind) - set(self.kinds)
        if missing:
            raise ValueError(f"kinds: no policy for {sorted(k.name for k in missing)}")

    @property
    def control_class(self) -> int:
        """The class of control packets and retransmissions: the top one."""
        return self.num_classes - 1

    @property
    def data_classes(self) -> int:
        return self.num_classes - 1 if self.reserve_top_class else self.num_classes

    def priority_of_layers(self, layers: np.ndarray | int, num_layers: int) -> np.ndarray:
        """Priority class per layer: layer 0 (front) highest, the last layer lowest.

        Layers are spread evenly over the data classes; with fewer layers than
        classes the front layers take the top classes one each.
        """
        if num_layers <= 0:
            raise ValueError(f"num_layers must be positive, got {num_layers}")
        layer = np.asarray(layers, dtype=np.int64)
        if np.any((layer < 0) | (layer >= num_layers)):
            raise ValueError(f"layer index out of range 0..{num_layers - 1}")
        c = self.data_classes
        if num_layers <= c:
            rank = layer
        else:
            rank = (layer * c) // num_layers
        return ((c - 1) - rank).astype(np.uint8)

    def packet_statistic(self, values: np.ndarray, elems_per_packet: int) -> np.ndarray:
        """One magnitude statistic per packet of a flat tensor cut into ``elems_per_packet`` chunks."""
        if elems_per_packet <= 0:
            raise ValueError(f"elems_per_packet must be positive, got {elems_per_packet}")
        flat = np.asarray(values).reshape(-1)
        n = flat.size
        full = n // elems_per_packet
        out = np.empty(-(-n // elems_per_packet), dtype=np.float64)
        body = flat[: full * elems_per_packet].reshape(full, elems_per_packet)
        tail = flat[full * elems_per_packet :]
        if 0 < self.sample_elems < elems_per_packet:
            body, tail = _sample(body, tail, self.sample_elems)
            elems_per_packet = body.shape[1]
        if self.statistic == "max_abs":
            out[:full] = np.abs(body).max(axis=1) if full else 0
            if tail.size:
                out[full] = np.abs(tail).max()
        elif self.statistic == "rms":
            out[:full] = np.sqrt(np.einsum("ij,ij->i", body, body, dtype=np.float64) / elems_per_packet)
            if tail.size:
                out[full] = np.sqrt(np.mean(np.square(tail, dtype=np.float64)))
        else:
            out[:full] = np.abs(body).mean(axis=1, dtype=np.float64) if full else 0
            if tail.size:
                out[full] = np.abs(tail).mean(dtype=np.float64)
        return out

    def sampled_elements(self, elems_per_packet: int, tail: int) -> tuple[np.ndarray, np.ndarray]:
        """(indices within a full packet, indices within a short last packet of ``tail`` elements) of the
        elements :meth:`packet_statistic` reads, in the order it reads them (int64).

        The C classifier (``dlcp.host.fastpath.FastClassifier``) reads these, so the two cannot drift apart.
        """
        if elems_per_packet <= 0 or not 0 <= tail < elems_per_packet:
            raise ValueError(f"need elems_per_packet > 0 and 0 <= tail < it, got {elems_per_packet}, {tail}")
        body = np.arange(elems_per_packet, dtype=np.int64).reshape(1, elems_per_packet)
        rest = np.arange(tail, dtype=np.int64)
        if 0 < self.sample_elems < elems_per_packet:
            body, rest = _sample(body, rest, self.sample_elems)
        return np.ascontiguousarray(body[0]), np.ascontiguousarray(rest)

    def drop_classes(self, values: np.ndarray, elems_per_packet: int, kind: MessageKind) -> np.ndarray:
        """Drop class per packet of a tensor for a message of ``kind``."""
        cuts = self.kinds[kind].drop_quantiles
        npk = -(-np.asarray(values).size // elems_per_packet)
        if not cuts or npk == 0:
            return np.zeros(npk, dtype=np.uint8)
        stat = self.packet_statistic(values, elems_per_packet)
        thresholds = np.quantile(stat, cuts)
        # searchsorted: number of cuts strictly above the statistic = drop class.
        return (len(cuts) - np.searchsorted(thresholds, stat, side="right")).astype(np.uint8)

    def message_drop_classes(self, spec: MessageSpec, values: np.ndarray) -> np.ndarray | None:
        """Per-packet drop classes of one message, or None when it may lose no packet at all.

        A message whose loss bound is under one packet (``max_missing_elems <
        elems_per_packet``: e.g. 1% of a 25-packet message) completes only whole,
        so every drop-eligible packet a switch trims or drops must be sent again:
        eligibility would only turn the switch's congestion control into
        retransmission rounds. Such a message is sent with every packet protected.
        """
        if not np.asarray(values).size or spec.max_missing_elems < spec.elems_per_packet:
            return None
        return self.drop_classes(values, spec.elems_per_packet, spec.kind)

    def classify(
        self, values: np.ndarray, elems_per_packet: int, kind: MessageKind, layer: int, num_layers: int
    ) -> tuple[int, np.ndarray]:
        """(priority class, per-packet drop classes) of one tensor."""
        prio = int(self.priority_of_layers(layer, num_layers))
        return prio, self.drop_classes(values, elems_per_packet, kind)

    @property
    def largest_bound(self) -> float:
        """The largest loss bound of any kind or layer."""
        return max(max([k.loss_bound, *k.layer_bounds.values()]) for k in self.kinds.values())

    def loss_bound(self, kind: MessageKind, layer: int) -> float:
        return self.kinds[kind].bound_for(layer)


_BLOCK = 16
"""Elements per sampled block: one 64-byte cache line of float32."""


def _sample(body: np.ndarray, tail: np.ndarray, sample_elems: int) -> tuple[np.ndarray, np.ndarray]:
    """About ``sample_elems`` elements of each packet, as whole cache-line blocks evenly spread.

    Reading whole blocks (rather than a stride) leaves most cache lines untouched,
    so classification reads a fraction of the tensor.
    """
    epp = body.shape[1]
    nblk = epp // _BLOCK
    k = max(1, sample_elems // _BLOCK)
    if epp % _BLOCK or k >= nblk:
        step = -(-epp // sample_elems)
        return body[:, ::step], tail[::step]
    stride = nblk // k
    picked = body.reshape(body.shape[0], nblk, _BLOCK)[:, ::stride, :]  # a view: no copy
    picked = np.ascontiguousarray(picked).reshape(body.shape[0], picked.shape[1] * _BLOCK)  # 0 rows: no -1
    tail_step = -(-max(tail.size, 1) // sample_elems)
    return picked, tail[::tail_step]
