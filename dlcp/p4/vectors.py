"""The switch test vectors: a target-independent data format, and its loader.

One JSON file per feature under ``tests/vectors/switch/``, written by
:mod:`dlcp.p4.vector_gen` (``dlcp p4 gen-vectors``). Every switch target
(BMv2 here; Tofino, the software switch later) runs the same files. The format
is documented in ``docs/switch.md`` ("Test vectors"); in short, a case is:

* ``entries``: table entries to install, named as in the P4Info. ``match``
  maps key names to ``{"exact": v}``, ``{"lpm": [v, len]}`` or
  ``{"ternary": [v, mask]}``; ternary entries carry a P4Runtime ``priority``
  (higher wins). An entry has ``action`` + ``params``, or ``action_set`` (a
  list of actions: the members of an ECMP group, P4Runtime one-shot style).
* ``stalled_queues``: ``(port, queue)`` pairs that drain no packet from the
  moment every ``settle`` packet has left until every packet has been sent.
* ``packets``: in order, each ``{port, bytes}`` with either ``expect`` (the
  exact list of ``{port, bytes}`` that come out; empty = dropped) or
  ``expect_one_of`` (exactly one of these comes out: ECMP). A ``settle``
  packet is sent and its output awaited before the next packet is sent.
* ``spread``: checks on how many distinct ports a set of packets left by.
* ``counters``: per counter name, ``{ports, class, packets}`` expectations:
  the sum of the packet deltas over ``ports`` at index ``port << CLASS_BITS |
  class``. Every other (port, class) of the case's ports must not move.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = "dlcp-switch-vectors"
VERSION = 1


@dataclass(frozen=True)
class Frame:
    port: int
    data: bytes


@dataclass(frozen=True)
class Action:
    name: str
    params: dict[str, Any]


@dataclass(frozen=True)
class Entry:
    table: str
    match: dict[str, dict[str, Any]]
    action: Action | None = None
    action_set: tuple[Action, ...] = ()
    priority: int | None = None


@dataclass(frozen=True)
class PacketIn:
    frame: Frame
    expect: tuple[Frame, ...] | None
    """Exact outputs (empty tuple: dropped); ``None`` when ``expect_one_of`` is used."""
    expect_one_of: tuple[Frame, ...] = ()
    settle: bool = False
    note: str = ""


@dataclass(frozen=True)
class Spread:
    packets: tuple[int, ...]
    distinct_ports: int


@dataclass(frozen=True)
class CounterExpectation:
    counter: str
    ports: tuple[int, ...]
    klass: int
    packets: int


@dataclass(frozen=True)
class Case:
    name: str
    description: str
    entries: tuple[Entry, ...]
    packets: tuple[PacketIn, ...]
    stalled_queues: tuple[tuple[int, int], ...] = ()
    spread: tuple[Spread, ...] = ()
    counters: tuple[CounterExpectation, ...] = ()
    counter_names: tuple[str, ...] = ()
    source: str = ""

    def ports(self) -> set[int]:
        """Every switch port the case sends to or expects from."""
        out = {p.frame.port for p in self.packets}
        for p in self.packets:
            out |= {f.port for f in (p.expect or ())} | {f.port for f in p.expect_one_of}
        for c in self.counters:
            out |= set(c.ports)
        return out


def _frame(d: dict[str, Any], where: str) -> Frame:
    try:
        return Frame(int(d["port"]), bytes.fromhex(d["bytes"]))
    except (KeyError, ValueError, TypeError) as exc:
        raise ValueError(f"{where}: bad frame {d!r}: {exc}") from None


def _action(d: dict[str, Any]) -> Action:
    return Action(str(d["action"]), dict(d.get("params", {})))


def _entry(d: dict[str, Any], where: str) -> Entry:
    if ("action" in d) == ("action_set" in d):
        raise ValueError(f"{where}: an entry has either action or action_set")
    for key, m in d["match"].items():
        if len(m) != 1 or next(iter(m)) not in ("exact", "lpm", "ternary"):
            raise ValueError(f"{where}: match {key!r} must be one of exact/lpm/ternary, got {m!r}")
    return Entry(
        table=str(d["table"]),
        match=dict(d["match"]),
        action=_action(d) if "action" in d else None,
        action_set=tuple(_action(a) for a in d.get("action_set", ())),
        priority=d.get("priority"),
    )


def _case(d: dict[str, Any], source: str) -> Case:
    where = f"{source}:{d.get('name', '?')}"
    packets = []
    for i, p in enumerate(d["packets"]):
        pw = f"{where} packet {i}"
        if ("expect" in p) == ("expect_one_of" in p):
            raise ValueError(f"{pw}: a packet has either expect or expect_one_of")
        packets.append(
            PacketIn(
                frame=_frame(p, pw),
                expect=tuple(_frame(e, pw) for e in p["expect"]) if "expect" in p else None,
                expect_one_of=tuple(_frame(e, pw) for e in p.get("expect_one_of", ())),
                settle=bool(p.get("settle", False)),
                note=str(p.get("note", "")),
            )
        )
    counters = []
    for name, exps in d.get("counters", {}).items():
        for e in exps:
            counters.append(CounterExpectation(name, tuple(e["ports"]), int(e["class"]), int(e["packets"])))
    spread = tuple(Spread(tuple(s["packets"]), int(s["distinct_ports"])) for s in d.get("spread", ()))
    for s in spread:
        if any(not 0 <= i < len(packets) for i in s.packets):
            raise ValueError(f"{where}: spread names a packet that does not exist")
    return Case(
        name=str(d["name"]),
        description=str(d.get("description", "")),
        entries=tuple(_entry(e, where) for e in d.get("entries", ())),
        packets=tuple(packets),
        stalled_queues=tuple((int(q["port"]), int(q["queue"])) for q in d.get("stalled_queues", ())),
        spread=spread,
        counters=tuple(counters),
        counter_names=tuple(d.get("counters", {})),
        source=source,
    )


def load_file(path: Path) -> list[Case]:
    doc = json.loads(path.read_text())
    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise ValueError(f"{path}: not a {FORMAT} v{VERSION} file")
    return [_case(c, path.name) for c in doc["cases"]]


def load_dir(path: Path) -> list[Case]:
    """Every case of every ``*.json`` file in ``path``, files in name order."""
    cases: list[Case] = []
    for f in sorted(path.glob("*.json")):
        cases.extend(load_file(f))
    names = [c.name for c in cases]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"duplicate case names: {sorted(dup)}")
    return cases


def check_outputs(case: Case, seen: list[Frame]) -> list[str]:
    """Failures of ``case`` given every frame that came out (any order): expect, expect_one_of, spread."""
    failures: list[str] = []
    pool = Counter(seen)
    chosen: dict[int, int] = {}
    for i, p in enumerate(case.packets):
        if p.expect is not None:
            for f in p.expect:
                if pool[f] > 0:
                    pool[f] -= 1
                else:
                    failures.append(
                        f"packet {i} ({p.note or 'no note'}): expected out of port {f.port}, not seen: {f.data.hex()}"
                    )
        else:
            hits = [f for f in p.expect_one_of if pool[f] > 0]
            if len(hits) != 1:
                failures.append(
                    f"packet {i}: expected out of exactly one of "
                    f"{[f.port for f in p.expect_one_of]}, seen on {[f.port for f in hits]}"
                )
            for f in hits:
                pool[f] -= 1
            if hits:
                chosen[i] = hits[0].port
    for f, n in pool.items():
        if n > 0:
            failures.append(f"{n} unexpected frame(s) out of port {f.port}: {f.data.hex()}")
    for s in case.spread:
        distinct = {chosen[i] for i in s.packets if i in chosen}
        if len(distinct) != s.distinct_ports:
            failures.append(
                f"packets {s.packets[0]}..{s.packets[-1]} left by {len(distinct)} distinct ports "
                f"{sorted(distinct)}, expected {s.distinct_ports}"
            )
    return failures


def check_counters(case: Case, name: str, delta: dict[tuple[int, int], int]) -> list[str]:
    """Failures of counter ``name`` given its packet deltas by ``(port, class)`` over the case's ports."""
    failures: list[str] = []
    covered: set[tuple[int, int]] = set()
    for e in case.counters:
        if e.counter != name:
            continue
        got = sum(delta[(p, e.klass)] for p in e.ports)
        covered |= {(p, e.klass) for p in e.ports}
        if got != e.packets:
            failures.append(f"{name} ports {list(e.ports)} class {e.klass}: {got} packets, expected {e.packets}")
    for slot, d in sorted(delta.items()):
        if slot not in covered and d != 0:
            failures.append(f"{name} port {slot[0]} class {slot[1]}: moved by {d}, expected 0")
    return failures
