"""Running the switch test vectors against BMv2 ``simple_switch`` in a private network namespace.

The switch gets one veth pair per port, and the tests raw sockets on their host ends, as the
software switch's rig does (:mod:`dlcp.testbed.veth_ports`, on :mod:`dlcp.testbed.netns`).
Table entries, counters and queue rates go through ``simple_switch_CLI`` (thrift), kept open
as one session. See ``docs/switch.md`` for how stalled queues are realised here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import select
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from dlcp.p4 import p4info, paths, sizes, vectors
from dlcp.p4.p4info import P4Info
from dlcp.p4.vectors import Case, Entry, Frame
from dlcp.testbed.netns import Namespace
from dlcp.testbed.toolchain import build, tools
from dlcp.testbed.veth_ports import HostSockets, add_veths, switch_if

log = logging.getLogger(__name__)

THRIFT_PORT = 9090
"""In the switch's own namespace: no other switch listens there."""
MTU = 9000
PRIORITY_QUEUES = 1 << sizes.CLASS_BITS
STALL_PPS = 2
"""Rate of a stalled queue: after its settle packet leaves, the next one may leave only 1/STALL_PPS s later."""
SEND_GAP_S = 0.001
"""Pause after each frame sent: simple_switch's pcap capture loses frames of a back-to-back burst on a veth
(measured: 40 of 96 arrived with no gap, 96 of 96 with 1 ms)."""
_PROMPT = "RuntimeCmd: "
_BMV2_MAX_PRIORITY = 1 << 24
"""BMv2 ternary priorities: the lowest number wins; P4Runtime's: the highest. bmv2 = this - p4runtime."""


TOOLS = (tools.P4C_BM2_SS, tools.SIMPLE_SWITCH, tools.SIMPLE_SWITCH_CLI)
"""What :meth:`Bmv2Switch.compiled` runs: the compiler, the switch and its CLI."""


def missing_reason() -> str | None:
    """Why DLCP's program cannot run on BMv2 here (a tool is missing, or no root for namespaces), or None."""
    reason = tools.missing_reason(*TOOLS)
    if reason is None and os.geteuid() != 0:
        reason = "BMv2 runs in a network namespace of its own, which needs root"
    return reason


def switch_argv(
    exe: Path,
    *,
    device_id: int,
    ports: Sequence[tuple[int, str]],
    thrift_port: int,
    notifications: Path,
    program: Path | None,
    target_options: Sequence[str] = (),
    log_file: Path | None = None,
) -> list[str]:
    """The command line of ``simple_switch`` or ``simple_switch_grpc`` (``program`` None: ``--no-p4``).

    Every BMv2 gets its own notifications socket: the default, ``/tmp/bmv2-<device id>-notifications.ipc``,
    is one file for the whole machine, and a second BMv2 with the same device id fails to bind it.
    """
    argv = [str(exe), "--device-id", str(device_id), "--thrift-port", str(thrift_port)]
    argv += ["--notifications-addr", f"ipc://{notifications}"]
    for port, ifname in ports:
        argv += ["-i", f"{port}@{ifname}"]
    if log_file is not None:
        argv += ["--log-file", str(log_file), "--log-flush"]
    argv += [str(program)] if program is not None else ["--no-p4"]
    # Target options (the switch's own) come after "--".
    return [*argv, "--", "--priority-queues", str(PRIORITY_QUEUES), *target_options]


class CliError(RuntimeError):
    pass


class CliSession:
    """One long-lived ``simple_switch_CLI`` process in ``ns``; :meth:`cmd` sends a line and returns its output."""

    def __init__(self, ns: Namespace, argv: list[str]) -> None:
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
        self.ports = sorted(set(ports))
        self.ns = Namespace("bmv2")
        self.log_file = log_file
        self._proc: subprocess.Popen[bytes] | None = None
        self.cli: CliSession | None = None
        self.host: HostSockets | None = None
        self.notifications = Path(tempfile.gettempdir()) / f"{self.ns.name}-notifications.ipc"

    @classmethod
    def compiled(cls, out: Path, ports: list[int], log_file: Path | None = None) -> Bmv2Switch:
        """A switch for DLCP's v1model program, compiled by p4c into ``out`` (OSError when it does not compile)."""
        v1 = build.build_v1model(out)
        if not v1.ok:
            raise OSError(v1.skipped or f"p4c-bm2-ss failed:\n{v1.output}")
        info = p4info.load(paths.p4info("v1model", out))
        return cls(paths.v1model_json(out), info, ports, log_file)

    def __enter__(self) -> Bmv2Switch:
        self.ns.__enter__()
        try:
            add_veths(self.ns, self.ports, MTU)
            self._start()
            self.host = HostSockets(self.ns, self.ports, rcvbuf=4 << 20)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _start(self) -> None:
        exe = tools.find(tools.SIMPLE_SWITCH)
        assert exe is not None
        ports = [(p, switch_if(p)) for p in self.ports]
        argv = switch_argv(exe, device_id=0, ports=ports, thrift_port=THRIFT_PORT, notifications=self.notifications,
                           program=self.json_path, log_file=self.log_file)  # fmt: skip
        log.info("starting %s", " ".join(argv))
        self._proc = self.ns.popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        cli_argv = [str(tools.find(tools.SIMPLE_SWITCH_CLI)), "--thrift-port", str(THRIFT_PORT)]
        deadline = time.monotonic() + 30
        while True:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                raise RuntimeError(f"simple_switch exited with {self._proc.returncode}: {err.strip()}")
            try:
                self.cli = CliSession(self.ns, cli_argv)
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
        with contextlib.suppress(FileNotFoundError):
            self.notifications.unlink()

    def restart(self) -> None:
        """A fresh simple_switch on the same ports: empty tables, counters, registers and queues.

        Not ``reset_state``: in behavioral-model 9674187f, creating an action-profile group
        after ``reset_state`` aborts simple_switch (assertion in action_profile.cpp:124).
        """
        self._stop()
        self._start()

    def close(self) -> None:
        if self.host is not None:
            self.host.close()
            self.host = None
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
        assert self.host is not None
        self.host.send(frame.port, frame.data)
        time.sleep(SEND_GAP_S)

    def receive(self, timeout: float) -> list[Frame]:
        """IPv4 frames that came out of the switch within ``timeout`` s (see docs/switch.md)."""
        assert self.host is not None
        return self.host.receive(timeout)

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
