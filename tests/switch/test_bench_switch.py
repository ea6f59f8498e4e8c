"""`dlcp switch bench` runs end to end (a smoke test: speed itself is reported, never asserted)."""

from __future__ import annotations

import pytest

from dlcp.apps.bench import switch as bench


def test_json_keys_name_their_units() -> None:
    """Gbit/s is named in the keys (``gbit_per_s``), never a bare ``gbps`` (#11: one key held GB/s)."""
    r = bench.BenchResult("dlcp", "drain", 1500, 10, 1.0, 10.0, 10 * 1500 * 8 / 1e9, 10.0, 20.0)
    row = bench.ratios([r])[0]
    assert r.as_dict()["gbit_per_s"] == row["dlcp_gbit_per_s"] == 1.2e-4
    assert not [k for k in [*r.as_dict(), *row] if "gbps" in k]


@pytest.mark.root
def test_bench_runs_and_every_frame_comes_out() -> None:
    results, notes = bench.run(
        sizes=(1500,),
        systems=("dlcp", "plain", "bmv2"),
        modes=("drain", "stream"),
        seconds=0.3,
        repeat=1,
        ring_blocks=8,
    )
    got = {(r.system, r.mode) for r in results}
    assert {("dlcp", "drain"), ("plain", "drain"), ("dlcp", "stream"), ("plain", "stream")} <= got
    for r in results:
        assert r.frames > 0 and r.pps > 0 and r.gbit_per_s > 0
        if r.mode == "drain" and r.system != "bmv2":
            assert r.frames == bench.ring_frames(1500, 8) and r.cpu_pps > 0  # the whole ring came out
    rows = bench.ratios(results)
    assert {row["mode"] for row in rows} == {"drain", "stream"} and all("vs_plain" in row for row in rows)
    assert ("bmv2", "stream") in got or any(n.startswith("bmv2 skipped") for n in notes)
