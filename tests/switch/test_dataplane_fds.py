"""The C switch closes the descriptors it opened, each once, when it is closed, and none it does not own.

A descriptor closed twice closes whatever the process opened under that number in
between (a gRPC poller's epoll descriptor, say), so these tests reuse the numbers
the switch gave back and check that nothing of the switch closes them later.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from dlcp.testbed.netns import Namespace
from dlcp.testbed.switch.config import PortConfig
from dlcp.testbed.switch.dataplane import DataPlane

pytestmark = pytest.mark.root


def _fds() -> dict[int, tuple[int, int]]:
    """This process's descriptors: number -> (device, inode)."""
    out = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            st = os.stat(int(name))
        except OSError:
            continue  # the listing's own descriptor, gone already
        out[int(name)] = (st.st_dev, st.st_ino)
    return out


@pytest.fixture
def ns() -> Iterator[Namespace]:
    with Namespace("fds") as n:
        n.add_veth("dlcpS1", "dlcpH1")
        n.add_veth("dlcpS2", "dlcpH2")
        yield n


def _switch(ns: Namespace) -> DataPlane:
    dp = DataPlane()
    with ns.entered():
        dp.add_port(PortConfig(port=1, interface="dlcpS1"), rx_block_bytes=1 << 16, rx_blocks=4)
        dp.add_port(PortConfig(port=2, interface="dlcpS2"), rx_block_bytes=1 << 16, rx_blocks=4)
        with pytest.raises(ValueError, match="port 1 given twice"):
            dp.add_port(PortConfig(port=1, interface="dlcpS2"), rx_block_bytes=1 << 16, rx_blocks=4)
        with pytest.raises(OSError, match="no interface named dlcpNoSuch"):
            dp.add_port(PortConfig(port=3, interface="dlcpNoSuch"), rx_block_bytes=1 << 16, rx_blocks=4)
    return dp


def test_close_gives_back_every_descriptor_and_closes_none_twice(ns: Namespace) -> None:
    # Earlier tests' garbage (endpoints, sockets) is collected first: the collection below would close its
    # descriptors, and this test counts only what the switch opens and closes.
    gc.collect()
    before = _fds()
    for _ in range(20):
        dp = _switch(ns)
        assert len(_fds()) == len(before) + 3, "two port sockets and the wake-up eventfd"
        dp.start()
        dp.stop()
        dp.start()
        dp.close()
        assert not dp.running
        with pytest.raises(ValueError, match="the switch is closed"):
            dp.start()
        # the ports' numbers are free again: take them, and the switch must never close them
        reused = [os.pipe() for _ in range(2)]
        mine = {fd: os.stat(fd).st_ino for pair in reused for fd in pair}
        del dp
        gc.collect()
        assert {fd: os.stat(fd).st_ino for fd in mine} == mine, "the switch closed a descriptor it gave back"
        for r, w in reused:
            os.close(r)
            os.close(w)
        assert _fds() == before, "descriptors left open, or others' closed"


def test_a_closed_switch_keeps_its_statistics_readable_and_refuses_ports(ns: Namespace) -> None:
    dp = _switch(ns)
    dp.start()
    dp.close()
    dp.close()  # twice is harmless
    assert dp.stats()["ports"] == {}
    with ns.entered(), pytest.raises(ValueError, match="the switch is closed"):
        dp.add_port(PortConfig(port=4, interface="dlcpS1"))
    with pytest.raises(ValueError, match="no port 1"):
        dp.pause(1, 0)


# Several threads stop (or close) one running switch at once: each call must return with the thread joined
# once. Run in a child: joining a thread twice is undefined (a crash or a hang), and pytest must survive it.
STOPS = """
import sys, threading
from dlcp.testbed.netns import inside
from dlcp.testbed.switch.config import PortConfig
from dlcp.testbed.switch.dataplane import DataPlane

ns, trials = sys.argv[1], int(sys.argv[2])
for trial in range(trials):
    dp = DataPlane()
    with inside(ns):
        dp.add_port(PortConfig(port=1, interface="dlcpS1"), rx_block_bytes=1 << 16, rx_blocks=4)
    dp.start()
    barrier = threading.Barrier(3)

    def stop():
        barrier.wait()
        dp.stop()

    def close():
        barrier.wait()
        dp.close()

    threads = [threading.Thread(target=f) for f in (stop, stop, close if trial % 2 else stop)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not dp.running, trial
    dp.close()
print("ok")
"""


@pytest.mark.slow
def test_threads_stopping_one_switch_at_once(ns: Namespace) -> None:
    try:
        r = subprocess.run([sys.executable, "-c", STOPS, ns.name, "300"], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("300 concurrent stops did not end within 120 s: a stop waits forever (the thread joined twice)")
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stdout[-2000:], r.stderr[-2000:])


def test_a_started_switch_names_its_thread_at_once(ns: Namespace) -> None:
    # thread_times() measures the data-plane thread from the moment start() returns: a test reads it right after
    # starting (tests/switch/test_veth_traffic.py), so start() returns once the thread has published its id.
    sw = _switch(ns)
    try:
        for _ in range(300):
            sw.start()
            assert sw.thread_times() is not None, "start() returned before its thread said who it is"
            sw.stop()
            assert sw.thread_times() is None
    finally:
        sw.close()
