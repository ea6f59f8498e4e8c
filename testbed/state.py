"""The record of a running fabric, so that ``status`` and ``down`` work from any other process.

``/run/dlcp/testbed/<fabric>/state.json`` is written as the fabric is built
(each namespace before it is created, each process as soon as it starts), so a
build killed half-way still leaves a record of what it made. Processes are
identified by pid and start time, never by name: a pid the kernel has since
given to someone else is left alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STATE_FILE = "state.json"


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22); None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[19])


@dataclass
class ProcessRecord:
    role: str
    """``switch`` or ``worker``, ``traffic``."""
    name: str
    pid: int
    ticks: int
    namespace: str

    def alive(self) -> bool:
        return start_ticks(self.pid) == self.ticks


@dataclass
class FabricState:
    name: str
    fabric_file: str
    switch_kind: str
    created: float = field(default_factory=time.time)
    ready: bool = False
    owner_pid: int = field(default_factory=os.getpid)
    namespaces: list[str] = field(default_factory=list)
    processes: list[ProcessRecord] = field(default_factory=list)
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Host name -> namespace, ip, mac, switch, port."""
    switches: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Switch name -> grpc, device_id, stats socket (None for BMv2), log, ports."""
    warnings: list[str] = field(default_factory=list)
    """What the fabric file asks and the switches do not carry out (BMv2 without Thrift: queue settings)."""

    def live_switches(self) -> list[ProcessRecord]:
        return [p for p in self.processes if p.role == "switch" and p.alive()]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> FabricState:
        doc = json.loads(text)
        doc["processes"] = [ProcessRecord(**p) for p in doc.get("processes", [])]
        return cls(**doc)


class StateStore:
    """The state folders of every fabric under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def dir(self, name: str) -> Path:
        return self.root / name

    def path(self, name: str) -> Path:
        return self.dir(name) / STATE_FILE

    def save(self, state: FabricState) -> None:
        d = self.dir(state.name)
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{STATE_FILE}.{os.getpid()}"
        tmp.write_text(state.to_json())
        tmp.replace(d / STATE_FILE)

    def load(self, name: str) -> FabricState | None:
        try:
            return FabricState.from_json(self.path(name).read_text())
        except FileNotFoundError:
            return None
        except (ValueError, TypeError, KeyError):
            return None  # a record cut short by a kill: cleanup goes by names instead

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir())

    def remove(self, name: str) -> None:
        d = self.dir(name)
        if not d.is_dir():
            return
        for p in sorted(d.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                p.rmdir() if p.is_dir() and not p.is_symlink() else p.unlink()
        with contextlib.suppress(OSError):
            d.rmdir()
