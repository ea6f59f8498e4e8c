"""The switch process under malformed P4Runtime requests and stream churn, at CI size (tests/stress/p4rt_fuzz.py).

``make test-stress-p4rt`` runs the full size (100,000 requests, 10,000 churns).
Premise of the memory check: the switch's resident memory is read after a
warm-up of the same mix of requests, twice the storm's size (gRPC's worker
threads started, the allocator's pools and the tables at their steady size;
after a warm-up of the storm's size alone, the growth measured 9-26 MB on the
same code, the pools still filling), then after the storm; a growth of 20 MB
over that is memory the server keeps per request.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parents[1] / "stress" / "p4rt_fuzz.py"


@pytest.mark.timing
@pytest.mark.root
@pytest.mark.slow
def test_malformed_requests_and_stream_churn_leave_the_switch_serving() -> None:
    argv = [sys.executable, str(FUZZ), "--malformed", "2000", "--churns", "300", "--warmup", "4000", "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    report = json.loads(done.stdout)
    assert report["failures"] == [], report
    assert done.returncode == 0, done.stderr[-2000:]
    assert report["malformed"] == 2000 and report["churns"] == 300
    assert not set(report["codes"]) & {"INTERNAL", "DEADLINE_EXCEEDED", "UNAVAILABLE"}, report["codes"]
    assert report["still_serving"] and report["streams_open_at_once_after"] == 16
    assert report["switch_exit_status"] == 0
    assert report["rss_growth_mb"] < 20, report
    # every kind of bad input was sent, and refused with a P4Runtime error
    assert {"random_bytes", "mutated_bytes", "bad_update", "long_field", "bad_read"} <= set(report["codes_by_kind"])
    assert report["codes_by_kind"]["random_bytes"].get("INVALID_ARGUMENT", 0) > 0
