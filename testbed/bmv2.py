"""Running the switch test vectors against BMv2 ``simple_switch`` in a private network namespace.

The switch gets one veth pair per port in a namespace of its own
(:class:`PortNamespace`, on :mod:`dlcp.testbed.netns`: pyroute2); table entries,
counters and queue rates go through ``simple_switch_CLI`` (thrift), kept open
as one session. See ``docs/switch.md`` for how stalled queues are realised here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import select
import socket
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from dlcp.p4 import sizes, tools, vectors
from dlcp.p4.p4info import P4Info
from dlcp.p4.vectors import Case, Entry, Frame
from dlcp.testbed.netns import Namespace

log = logging.getLogger(__name__)

THRIFT_PORT = 9090
PRIORITY_QUEUES = 1 << sizes.CLASS_BITS
STALL_PPS = 2
"""Rate of a stalled queue: after its settle packet leaves, the next one may leave only 1/STALL_PPS s later."""
SEND_GAP_S = 0.001
"""Pause after each frame sent: simple_switch's pcap capture loses frames of a back-to-back burst on a veth
(measured: 40 of 96 arrived with no gap, 96 of 96 with 1 ms)."""
_PROMPT = "RuntimeCmd: "
_ETHERTYPE_IPV4 = b"\x08\x00"
_PACKET_OUTGOING = 4
_ETH_P_ALL = 0x0003
_BMV2_MAX_PRIORITY = 1 << 24
"""BMv2 ternary priorities: the lowest number wins; P4Runtime's: the highest. bmv2 = this - p4runtime."""


class CliError(RuntimeError):
    pass


class PortNamespace:
    """A namespace ``dlcp-bmv2-…`` with one veth pair per switch port: ``dlcpS<port>`` (switch side) and
    ``dlcpH<port>`` (host side, where the tests send and receive), deleted with everything in it on exit."""

    def __init__(self, ports: list[int]) -> None:
        if any(not 0 <= p < 10000 for p in ports):
            raise ValueError(f"port numbers must be 0..9999, got {ports}")
        self.ports = sorted(set(ports))
        self.ns = Namespace("bmv2")
        self.name = self.ns.name

    @staticmethod
    def switch_if(port: int) -> str:
        return f"dlcpS{port}"

    @staticmethod
    def host_if(port: int) -> str:
        return f"dlcpH{port}"

    def __enter__(self) -> PortNamespace:
        self.ns.__enter__()
        try:
            for p in self.ports:
                self.ns.add_veth(self.switch_if(p), self.host_if(p), mtu=9000)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self.ns.close()

    def popen(self, argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        return self.ns.popen(argv, **kw)

    def entered(self) -> contextlib.AbstractContextManager[None]:
        """This thread inside the namespace for the body."""
        return self.ns.entered()

    def host_sockets(self) -> dict[int, socket.socket]:
        """One non-blocking raw socket per port, bound to the host side of its veth."""
        socks: dict[int, socket.socket] = {}
        with self.ns.entered():
            for p in self.ports:
                s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(_ETH_P_ALL))
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
                s.bind((self.host_if(p), 0))
                s.setblocking(False)
                socks[p] = s
        return socks


class CliSession:
    """One long-lived ``simple_switch_CLI`` process; :meth:`cmd` sends a line and returns its output."""

    def __init__(self, argv: list[str], ns: PortNamespace) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._proc = ns.popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        self._buf = b""
        self._read_until_prompt(timeout=30)

    def _read_until_prompt(self, timeout: float) -> str:
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while _PROMPT.encode() not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CliError(f"simple_switch_CLI gave no prompt in {timeout}s; output: {self._buf[-500:]!r}")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise CliError(f"simple_switch_CLI exited: {self._buf[-500:].decode(errors='replace')}")
                self._buf += chunk
        out, _, self._buf = self._buf.partition(_PROMPT.encode())
        return out.decode(errors="replace")

    def cmd(self, line: str, timeout: float = 30) -> str:
        assert self._proc.stdin is not None
        log.debug("CLI> %s", line)
        self._proc.stdin.write(line.encode() + b"\n")
        self._proc.stdin.flush()
        out = self._read_until_prompt(timeout)
        if re.search(r"\b(Error|Invalid|error)\b", out):
            raise CliError(f"{line!r}: {out.strip()}")
        return out

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


@dataclass
class CaseResult:
    name: str
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.failures

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "passed": self.passed, "failures": self.failures, "seconds": self.seconds}


class Bmv2Switch:
    """simple_switch running ``json_path`` in its own namespace, with ``ports`` as veth-backed ports."""

    def __init__(self, json_path: Path, p4info: P4Info, ports: list[int], log_file: Path | None = None) -> None:
        reason = tools.missing_reason(tools.SIMPLE_SWITCH, tools.SIMPLE_SWITCH_CLI)
        if reason:
            raise FileNotFoundError(reason)
        self.json_path = json_path
        self.p4info = p4info
        self.ns = PortNamespace(ports)
        self.log_file = log_file
        self._proc: subprocess.Popen[bytes] | None = None
        self.cli: CliSession | None = None
        self.socks: dict[int, socket.socket] = {}

    def __enter__(self) -> Bmv2Switch:
        self.ns.__enter__()
        try:
            self._start()
            self.socks = self.ns.host_sockets()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _start(self) -> None:
        # Its own notifications socket: the default, ipc:///tmp/bmv2-0-notifications.ipc, is one file for every
        # simple_switch on the machine, whatever its namespace, so a second one would fail to start.
        notify = f"ipc:///tmp/{self.ns.name}-notifications.ipc"
        argv = [str(tools.find(tools.SIMPLE_SWITCH)), "--thrift-port", str(THRIFT_PORT), "--device-id", "0",
                "--notifications-addr", notify]  # fmt: skip
        for p in self.ns.ports:
            argv += ["-i", f"{p}@{self.ns.switch_if(p)}"]
        if self.log_file is not None:
            argv += ["--log-file", str(self.log_file), "--log-flush"]
        # Target options (simple_switch's own) come after "--".
        argv += [str(self.json_path), "--", "--priority-queues", str(PRIORITY_QUEUES)]
        log.info("starting %s", " ".join(argv))
        self._proc = self.ns.popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        cli_argv = [str(tools.find(tools.SIMPLE_SWITCH_CLI)), "--thrift-port", str(THRIFT_PORT)]
        deadline = time.monotonic() + 30
        while True:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                raise RuntimeError(f"simple_switch exited with {self._proc.returncode}: {err.strip()}")
            try:
                self.cli = CliSession(cli_argv, self.ns)
                self.cli.cmd("show_ports")
                break
            except CliError:
                if self.cli is not None:
                    self.cli.close()
                    self.cli = None
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def _stop(self) -> None:
        if self.cli is not None:
            self.cli.close()
            self.cli = None
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def restart(self) -> None:
        """A fresh simple_switch on the same ports: empty tables, counters, registers and queues.

        Not ``reset_state``: in behavioral-model 9674187f, creating an action-profile group
        after ``reset_state`` aborts simple_switch (assertion in action_profile.cpp:124).
        """
        self._stop()
        self._start()

    def close(self) -> None:
        for s in self.socks.values():
            s.close()
        self.socks = {}
        self._stop()
        self.ns.close()

    # ---- control plane ----

    def _c(self, line: str) -> str:
        assert self.cli is not None
        return self.cli.cmd(line)

    def _keys(self, entry: Entry) -> str:
        table = self.p4info.tables[entry.table]
        parts = []
        for f in table.match_fields:
            if f.name not in entry.match:
                raise ValueError(f"{entry.table}: entry lacks key {f.name!r}")
            kind, value = next(iter(entry.match[f.name].items()))
            if kind == "exact":
                parts.append(str(value))
            elif kind == "lpm":
                parts.append(f"{value[0]}/{value[1]}")
            else:
                parts.append(f"{value[0]}&&&{value[1]}")
        extra = set(entry.match) - {f.name for f in table.match_fields}
        if extra:
            raise ValueError(f"{entry.table}: no keys named {sorted(extra)}")
        return " ".join(parts)

    def _params(self, action: str, params: dict[str, object]) -> str:
        act = self.p4info.actions[action]
        missing = {p for p, _ in act.params} ^ set(params)
        if missing:
            raise ValueError(f"{action}: parameters {sorted(missing)} do not match the P4Info")
        return " ".join(str(params[p]) for p, _ in act.params)

    def install(self, entry: Entry) -> None:
        keys = self._keys(entry)
        prio = "" if entry.priority is None else f" {_BMV2_MAX_PRIORITY - entry.priority}"
        if entry.action is not None:
            a = entry.action
            self._c(f"table_add {entry.table} {a.name} {keys} => {self._params(a.name, a.params)}{prio}")
            return
        profile = self.p4info.tables[entry.table].implementation
        if profile is None:
            raise ValueError(f"{entry.table} has no action selector for an action_set")
        out = self._c(f"act_prof_create_group {profile}")
        group = int(re.findall(r"handle (\d+)", out)[-1])
        for a in entry.action_set:
            out = self._c(f"act_prof_create_member {profile} {a.name} {self._params(a.name, a.params)}")
            member = int(re.findall(r"handle (\d+)", out)[-1])
            self._c(f"act_prof_add_member_to_group {profile} {member} {group}")
        self._c(f"table_indirect_add_with_group {entry.table} {keys} => {group}{prio}")

    def read_counter(self, name: str, index: int) -> int:
        out = self._c(f"counter_read {name} {index}")
        m = re.search(r"packets=(\d+)", out) or re.search(r"(\d+) packets", out)
        if m is None:
            raise CliError(f"cannot parse counter_read output {out!r}")
        return int(m.group(1))

    def _read_slot(self, name: str, slot: tuple[int, int]) -> int:
        port, klass = slot
        return self.read_counter(name, port << sizes.CLASS_BITS | klass)

    def set_queue_rate(self, port: int, queue: int, pps: int) -> None:
        self._c(f"set_queue_rate {pps} {port} {queue}")

    # ---- data plane ----

    def send(self, frame: Frame) -> None:
        self.socks[frame.port].send(frame.data)
        time.sleep(SEND_GAP_S)

    def receive(self, timeout: float) -> list[Frame]:
        """Frames that came out of the switch within ``timeout`` s (IPv4 only: see docs/switch.md)."""
        out: list[Frame] = []
        deadline = time.monotonic() + timeout
        by_fd = {s.fileno(): (p, s) for p, s in self.socks.items()}
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select(list(by_fd), [], [], max(left, 0))
            if not ready:
                return out
            for fd in ready:
                port, s = by_fd[fd]
                while True:
                    try:
                        data, addr = s.recvfrom(65535)
                    except BlockingIOError:
                        break
                    if addr[2] == _PACKET_OUTGOING or data[12:14] != _ETHERTYPE_IPV4:
                        continue
                    out.append(Frame(port, data))

    # ---- one case ----

    def run_case(self, case: Case) -> CaseResult:
        t0 = time.monotonic()
        result = CaseResult(case.name)
        self.restart()
        for port, queue in case.stalled_queues:
            self.set_queue_rate(port, queue, STALL_PPS)
        for e in case.entries:
            self.install(e)
        ports = sorted(case.ports())
        slots = [(p, c) for p in ports for c in range(PRIORITY_QUEUES)]
        before = {(n, s): self._read_slot(n, s) for n in case.counter_names for s in slots}
        self.receive(0.05)  # anything left over from an earlier case
        seen: list[Frame] = []
        burst_start: float | None = None
        for i, p in enumerate(case.packets):
            self.send(p.frame)
            if p.settle:
                want = Counter(p.expect or ())
                seen += self._wait_for(want, seen, timeout=5)
                if not (want <= Counter(seen)):
                    result.failures.append(f"settle packet {i} ({p.note}) did not come out")
                burst_start = time.monotonic()
        burst_s = time.monotonic() - burst_start if burst_start is not None else 0.0
        expected_count = sum(len(p.expect or ()) + (1 if p.expect_one_of else 0) for p in case.packets)
        # A stalled queue drains what it admitted at STALL_PPS once the burst is in.
        timeout = 5 + (expected_count / STALL_PPS if case.stalled_queues else 0)
        deadline = time.monotonic() + timeout
        while len(seen) < expected_count and time.monotonic() < deadline:
            seen += self.receive(0.2)
        seen += self.receive(0.5)
        result.failures += vectors.check_outputs(case, seen)
        for name in case.counter_names:
            after = {s: self._read_slot(name, s) for s in slots}
            result.failures += vectors.check_counters(case, name, {s: after[s] - before[(name, s)] for s in slots})
        for port, queue in case.stalled_queues:
            self.set_queue_rate(port, queue, 0)
        if case.stalled_queues and burst_s > 0.5 / STALL_PPS:
            result.failures.append(
                f"the burst took {burst_s * 1000:.0f} ms, more than half the stall window of "
                f"{1000 / STALL_PPS:.0f} ms: this BMv2 is too slow for the stall to be deterministic"
            )
        result.seconds = time.monotonic() - t0
        return result

    def _wait_for(self, want: Counter[Frame], seen: list[Frame], timeout: float) -> list[Frame]:
        got: list[Frame] = []
        deadline = time.monotonic() + timeout
        while not (want <= Counter(seen + got)) and time.monotonic() < deadline:
            got += self.receive(0.05)
        return got
