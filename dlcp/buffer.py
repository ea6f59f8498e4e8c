"""The switch buffer policy: one egress port's strict-priority queues sharing a buffer, with push-out.

This is the spec every switch target that models a buffer follows (docs/protocol.md,
"Switch buffer"): DLCP's software switch (``testbed/switch/egress.c``, in bytes) and the
ns-3 queue disc (``simulations/cpp/queue_disc.cc``, in packets). The P4 targets leave
buffering to the hardware's traffic manager.

* ``NUM_PRIORITY_CLASSES`` FIFO queues, queue = class, served by strict priority (7 first).
* One buffer shared by all queues. A packet that does not fit pushes out the **newest**
  packet of the **lowest non-empty class below its own**, as many as it needs to fit; with
  none below it, the arriving packet is dropped (``overflow``; the switch calls it
  ``buffer``). So under overload a higher class keeps its share of the buffer as it keeps
  its share of the link, and control packets and retransmissions (class 7) are never lost
  to data.

:class:`SharedBuffer` is the reference model (no I/O); :func:`vector_cases` builds the
shared vectors in ``tests/vectors/buffer/push_out.json`` from it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from dlcp.protocol import NUM_PRIORITY_CLASSES

VECTOR_FORMAT = "dlcp-buffer-vectors"


@dataclass
class SharedBuffer:
    """One port's queues; sizes in units (packets, or bytes with sized items)."""

    capacity: int
    queues: list[deque[tuple[int, int]]] = field(default_factory=lambda: [deque() for _ in range(NUM_PRIORITY_CLASSES)])
    used: int = 0
    pushed_out: list[int] = field(default_factory=lambda: [0] * NUM_PRIORITY_CLASSES)
    overflow: list[int] = field(default_factory=lambda: [0] * NUM_PRIORITY_CLASSES)

    def __post_init__(self) -> None:
        if self.capacity <= 0:
            raise ValueError(f"capacity must be > 0, got {self.capacity}")

    def enqueue(self, cls: int, item: int, size: int = 1) -> tuple[bool, list[int]]:
        """Admit ``item`` of class ``cls``; returns (admitted, items pushed out to make room)."""
        if not 0 <= cls < NUM_PRIORITY_CLASSES:
            raise ValueError(f"class must be in 0..{NUM_PRIORITY_CLASSES - 1}, got {cls}")
        victims: list[int] = []
        while self.used + size > self.capacity:
            lower = next((q for q in range(cls) if self.queues[q]), None)
            if lower is None:
                break
            victim, vsize = self.queues[lower].pop()  # the newest
            self.used -= vsize
            self.pushed_out[lower] += 1
            victims.append(victim)
        if self.used + size > self.capacity:
            self.overflow[cls] += 1
            return False, victims
        self.queues[cls].append((item, size))
        self.used += size
        return True, victims

    def dequeue(self) -> tuple[int, int] | None:
        """(class, item) of the next packet by strict priority, or None when empty."""
        for q in range(NUM_PRIORITY_CLASSES - 1, -1, -1):
            if self.queues[q]:
                item, size = self.queues[q].popleft()
                self.used -= size
                return q, item
        return None

    def depth(self, cls: int) -> int:
        return len(self.queues[cls])


def run_case(capacity: int, steps: list[tuple[str, int]]) -> dict[str, Any]:
    """Run ("enqueue", class) and ("dequeue", 0) steps through the model; the case's expectations."""
    buf = SharedBuffer(capacity)
    out: list[dict[str, Any]] = []
    next_id = 0
    for op, cls in steps:
        if op == "enqueue":
            ok, victims = buf.enqueue(cls, next_id)
            out.append({"op": op, "class": cls, "id": next_id, "admitted": ok, "pushed_out": victims})
            next_id += 1
        elif op == "dequeue":
            got = buf.dequeue()
            out.append({"op": op, "class": got[0] if got else -1, "id": got[1] if got else -1})
        else:
            raise ValueError(f"unknown step {op!r}")
    drain = []
    while (got := buf.dequeue()) is not None:
        drain.append({"class": got[0], "id": got[1]})
    return {
        "buffer_packets": capacity,
        "steps": out,
        "drain": drain,
        "pushed_out": buf.pushed_out,
        "overflow": buf.overflow,
    }


def vector_cases() -> list[dict[str, Any]]:
    """The shared push-out cases (every packet the same size, so packets and bytes agree)."""
    fill = [("enqueue", 2)] * 8

    def case(name: str, description: str, capacity: int, steps: list[tuple[str, int]]) -> dict[str, Any]:
        return {"name": name, "description": description, **run_case(capacity, steps)}

    return [
        case(
            "push_out_newest_of_lowest_class",
            "A buffer of 8 full of class 2: three class-5 packets push out the three newest class-2 packets;"
            " two class-0 packets find nothing lower and are dropped; the oldest class-2 packets stay.",
            8,
            [*fill, *[("enqueue", 5)] * 3, *[("enqueue", 0)] * 2],
        ),
        case(
            "lowest_class_first",
            "Classes 1 and 3 queued: a class-7 packet pushes out class 1 first, then class 3 once class 1 is empty;"
            " a class-3 packet cannot push out its own class.",
            4,
            [("enqueue", 3), ("enqueue", 3), ("enqueue", 1), ("enqueue", 1), *[("enqueue", 7)] * 3, ("enqueue", 3)],
        ),
        case(
            "control_never_lost_to_data",
            "A full buffer of data classes 0..6: class-7 packets (control, retransmissions) are always admitted"
            " until the buffer holds class 7 only; then class 7 itself overflows.",
            4,
            [("enqueue", 6), ("enqueue", 0), ("enqueue", 4), ("enqueue", 6), *[("enqueue", 7)] * 5],
        ),
        case(
            "room_after_dequeue",
            "A dequeue frees room: the next packet is admitted without pushing anything out.",
            3,
            [*[("enqueue", 1)] * 3, ("dequeue", 0), ("enqueue", 1), ("enqueue", 4), ("dequeue", 0), ("enqueue", 0)],
        ),
    ]


def vector_document() -> dict[str, Any]:
    return {
        "format": VECTOR_FORMAT,
        "version": 1,
        "generated_by": "dlcp.buffer.vector_document() (python -m dlcp.buffer > tests/vectors/buffer/push_out.json)",
        "cases": vector_cases(),
    }


if __name__ == "__main__":
    import json
    import sys

    sys.stdout.write(json.dumps(vector_document(), indent=1) + "\n")
