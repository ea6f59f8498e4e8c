"""The C module from several Python threads at once: it releases the GIL, so its own lock must serialise.

Run in a child process: on failure the switch frees a port twice, which aborts the process
(glibc: "double free" / "corrupted size"), and pytest must survive to report it.
"""

from __future__ import annotations

import subprocess
import sys

RACE = """
import threading
from dlcp.testbed.switch import _dataplane as _c

TRIALS, THREADS = 200, 4
for trial in range(TRIALS):
    sw = _c.Switch(max_frame=9216, virtual_clock=True)
    barrier = threading.Barrier(THREADS)
    refused = []

    def add():
        barrier.wait()
        try:
            sw.add_port(5, None, 64 << 20, 1 << 20, 4)
        except ValueError as exc:
            refused.append(str(exc))

    threads = [threading.Thread(target=add) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(refused) == THREADS - 1, f"trial {trial}: {THREADS - len(refused)} threads added port 5"
    assert all("port 5 given twice" in r for r in refused), refused
    assert list(sw.stats()["ports"]) == [5]
    del sw  # frees every port once
print("ok")
"""


def test_one_port_added_by_threads_at_once_is_added_once() -> None:
    r = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
