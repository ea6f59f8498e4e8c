"""Bring a fabric up and take it down: namespaces, veth links, switch processes, the controller.

:class:`Testbed` builds what a :class:`~dlcp.testbed.spec.TestbedSpec` declares:

* one namespace for the switches (``dlcp-<fabric>-sw``), with one veth end per
  switch port, and one software switch process per switch (``dlcp switch run``,
  or BMv2 ``simple_switch_grpc``), each serving P4Runtime on that namespace's
  loopback and its statistics on a Unix socket in the fabric's state folder;
* one namespace per host (``dlcp-<fabric>-h-<host>``) with one interface,
  ``dlcp0``: its MAC and IP from the fabric's allocator, checksum and
  segmentation offloads off (the switch reads whole, checksummed frames), a
  permanent neighbour entry for every other host at the switch port's MAC (the
  switches route; nothing answers ARP);
* then the controller writes every switch's tables (``dlcp testbed apply``).

Everything is recorded in the state file as it is made (:mod:`dlcp.testbed.state`).
:func:`remove` takes a fabric down from that record and from names: it ends
every process inside the fabric's namespaces (found by namespace, so workers of
a killed run go too), then deletes the namespaces, which deletes the veths.
Only objects named ``dlcp-<fabric>-`` are touched.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from pyroute2 import NetNS, netns

from dlcp.testbed import bmv2, controlplane, layout, shaping, tomlout
from dlcp.testbed.netns import Namespace, inside, popen_in
from dlcp.testbed.spec import TestbedSpec
from dlcp.testbed.state import FabricState, ProcessRecord, StateStore, start_ticks
from dlcp.testbed.switch import process as switch_process
from dlcp.testbed.switch import stats as switch_stats
from dlcp.testbed.toolchain import build, tools

log = logging.getLogger(__name__)

SWITCH_START_S = 90.0
"""How long a switch may take to come up (imports and a gRPC server on a loaded 2-core machine)."""
APPLY_TIMEOUT_S = 120.0
NUD_PERMANENT = 0x80
RT_SCOPE_LINK = 253
SIMPLE_SWITCH_GRPC = "simple_switch_grpc"
OFFLOADS_OFF = (
    "tx-checksum-ip-generic",
    "tx-checksum-ipv4",
    "tx-scatter-gather",
    "tx-tcp-segmentation",
    "tx-tcp-ecn-segmentation",
    "tx-tcp-mangleid-segmentation",
    "tx-tcp6-segmentation",
    "tx-udp-segmentation",
    "tx-gso-partial",
    "generic-segmentation-offload",
    "generic-receive-offload",
)
"""A veth hands the switch's AF_PACKET socket what the sender's stack built: with these on, frames
larger than the MTU (TSO, GSO, UDP GSO) and checksums left to 'hardware'. Off, every frame on the
wire is whole and checksummed, as on a real link."""


class TestbedError(RuntimeError):
    """The fabric cannot be brought up or used (the message says why and what to do)."""


class AlreadyUp(TestbedError):
    pass


def require_root() -> None:
    if os.geteuid() != 0:
        raise PermissionError(
            "the testbed needs root: it creates network namespaces (mounted under /run/netns), veth links and "
            "raw sockets, and a fabric left up must outlive the command; run it with sudo. Without root, "
            "`dlcp testbed run`, `dlcp testbed bench` and `dlcp demo --testbed` run in a user namespace of their "
            "own where the kernel allows (docs/testbed.md); a fabric made so ends with the command"
        )


class FabricNamespace(Namespace):
    """A namespace with a fixed name that outlives this process until :func:`remove` deletes it."""

    def __init__(self, name: str) -> None:  # the base class names namespaces after the creating pid
        require_root()
        self.name = name
        self._ns: Any = None

    def release(self) -> None:
        """Close the handle, keep the namespace."""
        if self._ns is not None:
            self._ns.close()
            self._ns = None

    def popen(self, argv: Sequence[str], **kw: Any) -> subprocess.Popen[bytes]:
        """Start a process inside the namespace (which must exist: never created here)."""
        return host_popen(self.name, argv, **kw)


def namespace_inode(name: str) -> tuple[int, int] | None:
    try:
        st = os.stat(f"/run/netns/{name}")
    except OSError:
        return None
    return st.st_dev, st.st_ino


def processes_in(namespaces: Sequence[str]) -> list[int]:
    """Pids of the processes whose network namespace is one of ``namespaces`` (this process excluded)."""
    wanted = {i for i in (namespace_inode(n) for n in namespaces) if i is not None}
    if not wanted:
        return []
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            st = os.stat(f"/proc/{entry.name}/ns/net")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in wanted:
            out.append(int(entry.name))
    return out


def end_processes(pids: dict[int, int | None], grace_s: float = 5.0) -> list[int]:
    """SIGTERM, then SIGKILL after ``grace_s``, each pid whose start time still matches. Returns those ended."""
    alive = {p: t for p, t in pids.items() if t is not None and start_ticks(p) == t}

    def running() -> list[int]:
        for pid in alive:  # reap our own children, so they do not linger as zombies
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        return [p for p, t in alive.items() if start_ticks(p) == t]

    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while running() and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in running():
        log.warning("process %d did not stop on SIGTERM: killing it", pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while running() and time.monotonic() < deadline:
        time.sleep(0.05)
    return list(alive)


def our_namespaces(fabric: str) -> list[str]:
    prefix = layout.ns_prefix(fabric)
    return sorted(n for n in netns.listnetns() if n.startswith(prefix))


@dataclass
class Removed:
    fabric: str
    processes: list[int] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.processes or self.namespaces)


def remove(fabric: str, store: StateStore) -> Removed:
    """Take fabric ``fabric`` down, or what is left of it: its processes, namespaces and state folder."""
    require_root()
    state = store.load(fabric)
    names = set(our_namespaces(fabric))
    recorded: dict[int, int | None] = {}
    if state is not None:
        recorded = {p.pid: p.ticks for p in state.processes}
    # Switches first (their recorded pids), then whatever else runs inside our namespaces.
    out = Removed(fabric)
    out.processes += end_processes(recorded)
    inside: dict[int, int | None] = {p: start_ticks(p) for p in processes_in(sorted(names))}
    out.processes += end_processes(inside, grace_s=3.0)
    for name in sorted(names):
        try:
            netns.remove(name)
            out.namespaces.append(name)
        except OSError as exc:
            log.warning("could not delete namespace %s: %s", name, exc)
    store.remove(fabric)
    if out:
        log.info("removed fabric %s: %d processes, namespaces %s", fabric, len(out.processes), out.namespaces)
    return out


def is_up(state: FabricState | None) -> bool:
    return state is not None and bool(state.live_switches())


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """While building or tearing down: SIGTERM and SIGHUP raise like Ctrl-C does, so cleanup runs."""

    owner = os.getpid()

    def handler(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != owner:  # a child forked meanwhile (pyroute2 forks to open namespace sockets)
            os._exit(128 + signum)
        raise KeyboardInterrupt(f"signal {signum}")

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class Testbed:
    """One fabric: :meth:`up` builds it, :meth:`down` removes it; as a context manager, both.

    Example::

        spec = dlcp.testbed.spec.load("fabric.toml")
        with Testbed(spec) as tb:
            tb.run_in("h1", ["python", "-c", "print('hello from h1')"])
    """

    def __init__(self, spec: TestbedSpec, root: Path = layout.STATE_ROOT) -> None:
        self.spec = spec
        self.store = StateStore(root)
        self.state = FabricState(spec.name, str(spec.path), spec.settings.switch)
        self._namespaces: dict[str, FabricNamespace] = {}

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def dir(self) -> Path:
        return self.store.dir(self.name)

    # ---- up ----

    def up(self, progress: Callable[[str], None] | None = None) -> FabricState:
        require_root()
        say = progress or (lambda text: log.info("%s", text))
        existing = self.store.load(self.name)
        if is_up(existing):
            assert existing is not None
            raise AlreadyUp(
                f"fabric {self.name} is already up (switch pids "
                f"{', '.join(str(p.pid) for p in existing.live_switches())}, from {existing.fabric_file}); "
                f"take it down first: dlcp testbed down {self.name}"
            )
        stale = remove(self.name, self.store)
        if stale:
            say(f"removed what a previous run of {self.name} left: {len(stale.namespaces)} namespaces, "
                f"{len(stale.processes)} processes")  # fmt: skip
        if self.spec.settings.switch == "bmv2":
            missing = tools.missing_reason(SIMPLE_SWITCH_GRPC, tools.P4C_BM2_SS)
            if missing:
                raise TestbedError(
                    f"--switch bmv2 needs simple_switch_grpc, and p4c-bm2-ss to compile DLCP's program: {missing}"
                )
        try:
            with signals_raise():
                self.store.save(self.state)
                if self.spec.settings.switch == "bmv2":
                    say("compiling DLCP's v1model program for BMv2 (p4c-bm2-ss)")
                    self._compile_bmv2()
                say(f"creating {1 + len(self.spec.fabric.hosts)} namespaces and {len(self.spec.fabric.links)} links")
                self._build_namespaces()
                say(f"starting {len(self.spec.fabric.switches)} {self.spec.settings.switch} switches")
                self._start_switches()
                say("configuring the switches (controller)")
                for report in self.apply():
                    if "queues_not_applied" in report:
                        note = f"switch {report['switch']}: queue settings NOT applied: {report['queues_not_applied']}"
                        if self.spec.settings.switch == "bmv2":
                            self._shape_ports(report["switch"])
                            note += (
                                "; its links' rates and buffers are carried out by a kernel tbf queue on each port "
                                "instead, behind BMv2's own queues, which stay short: BMv2's priority queues, "
                                "selective drop and trimming do not act"
                            )
                        self.state.warnings.append(note)
                        say(note)
                self.state.ready = True
                self.store.save(self.state)
        except BaseException:
            self.release()
            remove(self.name, self.store)
            raise
        self.release()
        return self.state

    def _shape_ports(self, switch: str) -> None:
        """The switch's ports at their links' rates and buffers, by the kernel (:mod:`dlcp.testbed.shaping`)."""
        (plan,) = [p for p in layout.plan(self.spec) if p.name == switch]
        sw_ns = self._namespaces[layout.switch_ns(self.name)]
        shaping.shape(sw_ns.ipr, [(p.interface, p.link) for p in plan.ports])

    def _compile_bmv2(self) -> None:
        result = build.build_v1model(layout.bmv2_build_dir(self.name, self.store.root))
        if not result.ok:
            raise TestbedError(f"--switch bmv2: DLCP's program did not compile: {result.skipped or result.output}")

    def _ns(self, name: str) -> FabricNamespace:
        if name not in self._namespaces:
            self.state.namespaces.append(name)
            self.store.save(self.state)  # recorded before it exists: a kill right after leaves a trace
            ns = FabricNamespace(name)
            ns.__enter__()
            self._namespaces[name] = ns
        return self._namespaces[name]

    def _build_namespaces(self) -> None:
        fab = self.spec.fabric
        sw_ns = self._ns(layout.switch_ns(self.name))
        for h in fab.hosts.values():
            self._ns(layout.host_ns(self.name, h.name))
        done: set[str] = set()
        for plan in layout.plan(self.spec):
            ports = []
            for p in plan.ports:
                ports.append(p.port)
                if p.peer_host is not None:
                    host_ns = self._namespaces[layout.host_ns(self.name, p.peer_host)]
                    sw_ns.add_veth(p.interface, layout.HOST_IF, mtu=p.link.mtu, peer=host_ns)
                    self._configure_host(p.peer_host, host_ns, gateway_mac=p.mac)
                elif p.link.name not in done:
                    ((other_sw, other_port),) = [e for e in p.link.ends if e != (plan.name, p.port)]
                    other = layout.interface(list(fab.switches).index(other_sw) + 1, int(other_port or 0))
                    sw_ns.add_veth(p.interface, other, mtu=p.link.mtu)
                    done.add(p.link.name)
                sw_ns.ipr.link("set", index=sw_ns.index(p.interface), address=layout.mac_text(p.mac))
            self.state.switches[plan.name] = {
                "index": plan.index, "device_id": plan.device_id, "grpc": plan.grpc,
                "ports": {str(p.port): p.interface for p in plan.ports},
                "stats": str(self._stats_path(plan.name, plan.device_id)) if self.spec.settings.switch == "dlcp"
                else None,
                "log": str(self.dir / f"{plan.name}.log"),
            }  # fmt: skip
        self.store.save(self.state)

    def _configure_host(self, host: str, ns: FabricNamespace, gateway_mac: int) -> None:
        fab = self.spec.fabric
        h = fab.hosts[host]
        idx = ns.index(layout.HOST_IF)
        ns.ipr.link("set", index=idx, address=layout.mac_text(h.mac))
        ns.ipr.addr("add", index=idx, address=h.ip, prefixlen=32)
        # Every destination is on the link (the switch routes); known hosts resolve to the switch port.
        ns.ipr.route("add", dst="0.0.0.0/0", oif=idx, scope=RT_SCOPE_LINK)
        for other in fab.hosts.values():
            if other.name != host:
                ns.ipr.neigh("add", dst=other.ip, lladdr=layout.mac_text(gateway_mac), ifindex=idx, state=NUD_PERMANENT)
        with ns.entered():
            _offloads_off(layout.HOST_IF)
        self.state.hosts[host] = {
            "namespace": ns.name, "ip": h.ip, "mac": layout.mac_text(h.mac), "switch": h.switch, "port": h.port,
        }  # fmt: skip

    def _stats_dir(self, switch: str) -> Path:
        return self.dir / f"sw-{switch}"

    def _stats_path(self, switch: str, device_id: int) -> Path:
        return switch_stats.socket_path(self._stats_dir(switch), device_id)

    def _start_switches(self, only: str | None = None) -> None:
        """Start every switch (``only``: that one) and wait until each is up."""
        sw_ns = layout.switch_ns(self.name)
        procs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
        for plan in layout.plan(self.spec):
            if only is not None and plan.name != only:
                continue
            log_path = self.dir / f"{plan.name}.log"
            argv = self._switch_argv(plan)
            log.debug("switch %s: %s", plan.name, " ".join(argv))
            with open(log_path, "ab") as out:
                proc = host_popen(sw_ns, argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)  # fmt: skip
            self.state.processes.append(ProcessRecord("switch", plan.name, proc.pid, start_ticks(proc.pid) or 0, sw_ns))
            self.store.save(self.state)
            procs[plan.name] = (proc, log_path)
        deadline = time.monotonic() + SWITCH_START_S
        waiting = dict(procs)
        while waiting:
            for name, (proc, log_path) in list(waiting.items()):
                if proc.poll() is not None:
                    raise TestbedError(
                        f"switch {name} exited with {proc.returncode} while starting:\n{_log_tail(log_path)}"
                    )
                if self._switch_ready(name):
                    del waiting[name]
            if waiting and time.monotonic() > deadline:
                raise TestbedError(
                    f"switches {', '.join(sorted(waiting))} did not come up within {SWITCH_START_S:.0f} s; "
                    f"see {', '.join(str(v[1]) for v in waiting.values())}"
                )
            time.sleep(0.2)

    def _switch_argv(self, plan: layout.SwitchPlan) -> list[str]:
        if self.spec.settings.switch == "bmv2":
            found = tools.find(SIMPLE_SWITCH_GRPC)
            assert found is not None
            # Per switch: a Thrift port (they share the switch namespace) and a notifications socket.
            return bmv2.switch_argv(
                found, device_id=plan.device_id, ports=[(p.port, p.interface) for p in plan.ports],
                thrift_port=int(layout.bmv2_thrift(plan.index).rpartition(":")[2]),
                notifications=self.dir / f"{plan.name}-notifications.ipc", program=None,
                target_options=["--grpc-server-addr", plan.grpc],
            )  # fmt: skip
        config_file = self.dir / f"sw-{plan.name}.toml"
        config_file.write_text(tomlout.dumps(plan.switch_config(self._stats_dir(plan.name))))
        return switch_process.argv(config_file)

    def _switch_ready(self, name: str) -> bool:
        info = self.state.switches[name]
        if self.spec.settings.switch == "dlcp":
            return Path(info["stats"]).exists()
        # Only gRPC: with --no-p4, BMv2 starts its Thrift server once the controller has pushed a program.
        host, _, port = info["grpc"].rpartition(":")
        with inside(layout.switch_ns(self.name)):
            try:
                socket.create_connection((host.strip("[]"), int(port)), timeout=0.5).close()
            except OSError:
                return False
        return True

    # ---- faults (dlcp testbed faults) ----

    def kill_switch(self, name: str) -> int:
        """SIGKILL switch ``name``'s process (as a crash would end it) and wait until it is gone; returns its pid.

        The tables it held die with it and its statistics socket goes stale; its ports (veths) stay."""
        self.state = state = self.store.load(self.name) or self.state  # others may have recorded processes
        live = [p for p in state.live_switches() if p.name == name]
        if not live:
            raise TestbedError(f"switch {name} of fabric {self.name} is not running")
        pid = live[0].pid
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10.0
        while live[0].alive() and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)  # our child if this process brought the fabric up
            time.sleep(0.01)
        if live[0].alive():
            raise TestbedError(f"switch {name} (pid {pid}) still runs 10 s after SIGKILL")
        self.state.processes = [p for p in state.processes if p.pid != pid]
        self.store.save(self.state)
        return pid

    def start_switch(self, name: str) -> None:
        """Start switch ``name`` again as ``up`` started it (same ports, rates and buffers; empty tables) and wait
        until it serves P4Runtime; the controller must then write its tables."""
        self.state = self.store.load(self.name) or self.state
        if name not in self.state.switches:
            raise KeyError(f"no switch {name!r} in fabric {self.name} (switches: {', '.join(self.state.switches)})")
        stats = self.state.switches[name].get("stats")
        if stats:
            with contextlib.suppress(FileNotFoundError):
                Path(stats).unlink()  # left by the killed process: readiness is its reappearance
        self._start_switches(only=name)

    def set_links(self, names: Sequence[str], up: bool) -> list[str]:
        """Take the switch-to-switch links ``names`` down (both veth ends, as a cut cable would) or bring them back
        up; returns the interfaces. The switches' tables do not change: :meth:`apply` with ``down`` reroutes."""
        fab = self.spec.fabric
        interfaces = []
        for link in names:
            if link not in fab.links:
                raise KeyError(f"no link {link!r} in fabric {self.name} (links: {', '.join(fab.links)})")
            for sw, port in fab.links[link].ends:
                if port is None:
                    raise ValueError(f"link {link} ends at host {sw}: only links between switches are taken down")
                interfaces.append(layout.interface(list(fab.switches).index(sw) + 1, port))
        ns = NetNS(layout.switch_ns(self.name))
        try:
            for ifname in interfaces:
                (index,) = ns.link_lookup(ifname=ifname)
                ns.link("set", index=index, state="up" if up else "down")
        finally:
            ns.close()
        return interfaces

    def apply(self, down: Sequence[str] = ()) -> list[dict[str, Any]]:
        """The controller writes every switch's tables (its process, inside the switch namespace); ``down``: links
        known to be down, which routes and ECMP groups avoid.

        Returns its report per switch (:func:`dlcp.testbed.controlplane.configure`)."""
        argv = controlplane.argv(self.spec.path, self.spec.settings.switch, down)
        try:
            done = run_in(layout.switch_ns(self.name), argv, APPLY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise TestbedError(f"the controller did not finish within {APPLY_TIMEOUT_S:.0f} s") from None
        with open(self.dir / "controller.log", "ab") as f:
            f.write(done.stdout + done.stderr)
        if done.returncode != 0:
            raise TestbedError(
                f"the controller could not configure the switches:\n{done.stderr.decode(errors='replace')}"
            )
        try:
            reports: list[dict[str, Any]] = json.loads(done.stdout.decode(errors="replace").strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise TestbedError(f"the controller gave no report; see {self.dir / 'controller.log'}") from None
        return reports

    def release(self) -> None:
        """Close this process's handles on the namespaces (they stay)."""
        for ns in self._namespaces.values():
            ns.release()
        self._namespaces.clear()

    # ---- down ----

    def down(self) -> Removed:
        self.release()
        return remove(self.name, self.store)

    def __enter__(self) -> Testbed:
        self.up()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        with signals_raise():
            self.down()

    # ---- running things on hosts ----

    def host_env(self, host: str) -> dict[str, str]:
        h = self.spec.fabric.hosts[host]
        return {"DLCP_HOST": h.ip, "DLCP_TESTBED_HOST": host, "DLCP_TESTBED_FABRIC": self.name}

    def popen(
        self, host: str, argv: Sequence[str], env: dict[str, str] | None = None, **kw: Any
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside ``host``'s namespace (with its address in ``DLCP_HOST``)."""
        if host not in self.spec.fabric.hosts:
            raise KeyError(f"no host {host!r} in fabric {self.name} (hosts: {', '.join(self.spec.fabric.hosts)})")
        full = {**os.environ, **self.host_env(host), **(env or {})}
        return host_popen(layout.host_ns(self.name, host), argv, env=full, **kw)


def host_popen(namespace: str, argv: Sequence[str], **kw: Any) -> subprocess.Popen[bytes]:
    """Start ``argv`` in namespace ``namespace``."""
    if namespace_inode(namespace) is None:
        raise TestbedError(f"namespace {namespace} does not exist (is the fabric up?)")
    return popen_in(namespace, argv, **kw)


def run_in(namespace: str, argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` in namespace ``namespace`` to its end, its stdout and stderr captured; after ``timeout_s`` it is
    killed and reaped, and :class:`subprocess.TimeoutExpired` raised."""
    proc = host_popen(namespace, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


def _offloads_off(ifname: str) -> None:
    from pyroute2.ethtool import Ethtool

    eth = Ethtool()
    try:
        feats = eth.get_features(ifname)
        for name in OFFLOADS_OFF:
            f = feats.features.get(name)
            if f is not None and f.available:
                f.enable = False
        eth.set_features(ifname, feats)
    finally:
        eth.close()
