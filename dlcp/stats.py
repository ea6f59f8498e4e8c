"""Loss statistics: bytes lost and bytes expected, per layer and per class."""

from __future__ import annotations

from collections import defaultdict


class LossStats:
    """Accumulates (lost, total) bytes keyed by layer and by priority class."""

    __slots__ = ("by_class", "by_layer", "messages", "partial_messages")

    def __init__(self) -> None:
        self.by_layer: defaultdict[int, list[int]] = defaultdict(lambda: [0, 0])
        self.by_class: defaultdict[int, list[int]] = defaultdict(lambda: [0, 0])
        self.messages = 0
        self.partial_messages = 0

    def record(self, layer: int, priority: int, lost_bytes: int, total_bytes: int) -> None:
        for table, key in ((self.by_layer, layer), (self.by_class, priority)):
            entry = table[key]
            entry[0] += lost_bytes
            entry[1] += total_bytes
        self.messages += 1
        self.partial_messages += lost_bytes > 0

    @property
    def lost_bytes(self) -> int:
        return sum(v[0] for v in self.by_layer.values())

    @property
    def total_bytes(self) -> int:
        return sum(v[1] for v in self.by_layer.values())

    @property
    def loss_fraction(self) -> float:
        total = self.total_bytes
        return self.lost_bytes / total if total else 0.0

    def as_dict(self) -> dict[str, object]:
        def frac(table: dict[int, list[int]]) -> dict[str, float]:
            return {str(k): (v[0] / v[1] if v[1] else 0.0) for k, v in sorted(table.items())}

        return {
            "loss_fraction": self.loss_fraction,
            "lost_bytes": self.lost_bytes,
            "total_bytes": self.total_bytes,
            "messages": self.messages,
            "partial_messages": self.partial_messages,
            "loss_fraction_by_layer": frac(self.by_layer),
            "loss_fraction_by_class": frac(self.by_class),
        }
