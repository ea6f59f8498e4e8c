"""Fabric files are checked whole before anything is created; every error names its field."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from testbed_support import dlcp, namespaces_of, star, unique_name

from dlcp.testbed import spec, tomlout
from dlcp.testbed.layout import interface, plan


def test_star_loads_with_allocated_addresses(tmp_path: Path) -> None:
    s = spec.load(star(tmp_path, "good", hosts=4))
    assert s.name == "good"
    ips = [h.ip for h in s.fabric.hosts.values()]
    assert len(set(ips)) == 4
    (sw,) = plan(s)
    assert [p.peer_host for p in sw.ports] == ["h1", "h2", "h3", "h4"]
    assert sw.ports[0].interface == interface(1, 1) == "dlcp1p1"


BAD = [
    ('[[link]]\nname = "h1-s1"\nrate = "2tbit"\n', "link.h1-s1.rate"),
    ('[[link]]\nname = "h1-s1"\nbuffer = "4KiB"\n', "link.h1-s1.buffer"),
    ('[[link]]\nname = "h1-s1"\ndelay = "20s"\n', "link.h1-s1.delay"),
    ('[[job]]\nid = 2\nmode = "ring"\nworkers = ["h1", "h9"]\n[job.transport]\nport = 19112\n', "job.2.workers"),
    ('[[host]]\nname = "h2"\nip = "10.0.0.5"\n[[host]]\nname = "h3"\nip = "10.0.0.5"\n', "host.h3.ip"),
    ('[[link]]\nname = "h7-s1"\n', "link[0].name"),
]


@pytest.mark.parametrize(("extra", "field"), BAD, ids=[f for _, f in BAD])
def test_bad_fabric_names_the_field(tmp_path: Path, extra: str, field: str) -> None:
    with pytest.raises(spec.SpecError, match=field.replace(".", r"\.").replace("[", r"\[")):
        spec.load(star(tmp_path, "bad", extra=extra))


def test_link_to_nowhere(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    path.write_text(
        '[[switch]]\nname = "s1"\nports = { 1 = "a", 2 = "b" }\n[[host]]\nname = "h1"\nswitch = "s1"\nport = 1\n'
    )
    with pytest.raises(spec.SpecError, match=r"link\.b: only one end"):
        spec.load(path)


def test_testbed_table_is_checked(tmp_path: Path) -> None:
    path = star(tmp_path, "x")
    path.write_text(path.read_text().replace('name = "x"', 'name = "x"\nswitch = "tofino"\ncolour = 1'))
    with pytest.raises(spec.SpecError) as exc:
        spec.load(path)
    assert "testbed.switch" in str(exc.value) and "testbed.colour" in str(exc.value)


def test_a_name_with_a_final_newline_is_refused(tmp_path: Path) -> None:
    """A regex ``$`` also matches before a final newline; names become namespace names."""
    path = star(tmp_path, "x")
    path.write_text(path.read_text().replace('name = "x"', 'name = "x\\n"'))
    with pytest.raises(spec.SpecError, match=r"testbed\.name"):
        spec.load(path)


def test_cli_refuses_before_creating_anything(tmp_path: Path) -> None:
    name = unique_name("bad")
    path = star(tmp_path, name, extra=BAD[0][0])
    r = dlcp("testbed", "up", str(path))
    assert r.returncode == 2, r.stderr
    assert "link.h1-s1.rate" in r.stderr and "Traceback" not in r.stderr
    assert namespaces_of(name) == []


scalars = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.booleans(),
    st.text(max_size=20),
    st.floats(allow_nan=False, allow_infinity=False),
)
keys = st.text(min_size=1, max_size=10)
tables = st.recursive(
    st.dictionaries(keys, st.one_of(scalars, st.lists(scalars, max_size=4)), max_size=4),
    lambda inner: st.dictionaries(keys, st.one_of(inner, st.lists(inner, min_size=1, max_size=2)), max_size=3),
    max_leaves=12,
)


@given(tables)
def test_toml_writer_round_trips(doc: dict) -> None:
    assert tomllib.loads(tomlout.dumps(doc)) == doc


def test_bmv2_refuses_loss_and_delay(tmp_path: Path) -> None:
    path = star(tmp_path, "bm", extra='[[link]]\nname = "h1-s1"\nloss = 0.01\ndelay = "1ms"\n')
    assert spec.load(path).fabric.links["h1-s1"].loss == 0.01  # the software switch carries them out
    with pytest.raises(spec.SpecError) as exc:
        spec.load(path, switch="bmv2")
    assert "link.h1-s1.loss" in str(exc.value) and "link.h1-s1.delay" in str(exc.value)


@pytest.mark.parametrize("topology", ["star", "leaf-spine"])
def test_demo_scenario_fabrics(tmp_path: Path, topology: str) -> None:
    from dlcp.apps.testbed.scenario import Scenario

    sc = Scenario(name="sc", workers=3, topology=topology, switch="bmv2")
    s = spec.load(sc.write(tmp_path))
    assert s.settings.switch == "bmv2" and len(s.fabric.hosts) == 4
    link = s.fabric.links[sc.bottleneck_link]
    assert link.rate_bps == 200_000_000 and ("h1", None) in link.ends
    if topology == "leaf-spine":
        assert sorted(s.fabric.switches) == ["leaf1", "leaf2", "spine1", "spine2"]
        assert [s.fabric.hosts[h].switch for h in ("h1", "h2", "h3", "h4")] == ["leaf1", "leaf1", "leaf2", "leaf2"]
    else:
        assert list(s.fabric.switches) == ["s1"]


def test_job_file_paces_the_hosts_to_their_share_of_the_bottleneck(tmp_path: Path) -> None:
    from dlcp.config import load as load_job
    from dlcp.controller import pacing
    from dlcp.rate_control import headroom
    from dlcp.testbed.jobs import write_job_file

    bottleneck = '[[link]]\nname = "h1-s1"\nrate = "200mbit"\nbuffer = "256KiB"\n'
    s = spec.load(star(tmp_path, "paced", extra=bottleneck))
    job = s.fabric.jobs[1]
    transport = load_job(write_job_file(s, job, tmp_path)).transport
    ip = {name: h.ip for name, h in s.fabric.hosts.items()}
    # The ring's data: h1 -> h2 -> h3 -> h1; only h3's crosses the 200 Mbit/s port (toward h1).
    assert transport.send_rate_bps[ip["h3"]] == int(200e6 * headroom(8192))
    assert transport.send_rate_bps[ip["h1"]] == int(1e9 * headroom(8192))
    assert transport.send_burst_bytes == pacing.send_burst_bytes(job)
    # What the file says wins.
    own = bottleneck.replace("[[link]]", "[job.transport.send_rate_bps]\n'10.0.0.3' = 1000\n[[link]]")
    s = spec.load(star(tmp_path, "own", extra=own))
    assert load_job(write_job_file(s, s.fabric.jobs[1], tmp_path)).transport.send_rate_bps == {"10.0.0.3": 1000}


def test_scenario_jobs_carry_the_loss_bound_the_ranks_read(tmp_path: Path) -> None:
    """On the testbed the ranks take their policy from the job file, not from ``--loss-bound``."""
    from dlcp.apps.testbed.scenario import Scenario
    from dlcp.config import load as load_job
    from dlcp.protocol import MessageKind
    from dlcp.testbed.jobs import write_job_file

    s = spec.load(Scenario(name="bound", loss_bound=0.025).write(tmp_path))
    for job in s.fabric.jobs.values():
        policy = load_job(write_job_file(s, job, tmp_path)).policy
        assert policy.loss_bound(MessageKind.PUSH, 0) == policy.loss_bound(MessageKind.REDUCE_SCATTER, 0) == 0.025
        assert policy.kinds[MessageKind.PUSH].drop_quantiles == (0.5,), "the rest of the kind's policy is kept"
