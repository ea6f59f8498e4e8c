"""Fabric files: generated topologies, the address allocator, and every invalid configuration named by field."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from toml_support import wrong_everywhere

from dlcp.controller import fabric, state
from dlcp.controller.fabric import FabricError
from dlcp.controller.model import IP_OVERHEAD, mac_text
from dlcp.controller.paths import Paths
from dlcp.p4 import sizes
from dlcp.switch_limits import MAX_PORT

ROOT = Path(__file__).resolve().parents[2]
ECMP_GROUPS = sizes.TABLE_SIZES["ECMP_GROUPS"]

EXPLICIT = """
[[switch]]
name = "s1"
grpc = "127.0.0.1:9559"
ports = { 1 = "h1-s1", 2 = "h2-s1", 3 = "s1-s2" }
[[switch]]
name = "s2"
grpc = "127.0.0.1:9560"
ports = { 1 = "s1-s2", 2 = "h3-s2" }
[[host]]
name = "h1"
switch = "s1"
port = 1
[[host]]
name = "h2"
switch = "s1"
port = 2
ip = "10.9.0.2"
mac = "02:aa:00:00:00:02"
[[host]]
name = "h3"
switch = "s2"
port = 2
[[link]]
name = "s1-s2"
rate = "1gbit"
buffer = "256KiB"
[[job]]
id = 7
mode = "ps"
workers = ["h1", "h2", "h3"]
servers = ["h3"]
[job.transport]
port = 19111
payload_bytes = 1400
"""


def load(text: str) -> fabric.Fabric:
    return fabric.from_dict(tomllib.loads(text))


def error(text: str) -> str:
    with pytest.raises(FabricError) as info:
        load(text)
    return str(info.value)


def test_explicit_fabric_with_allocated_addresses() -> None:
    f = load(EXPLICIT)
    assert [h.ip for h in f.hosts.values()] == ["10.0.0.1", "10.9.0.2", "10.0.0.2"]
    assert mac_text(f.hosts["h1"].mac) == "02:dc:00:00:00:01" and mac_text(f.hosts["h2"].mac) == "02:aa:00:00:00:02"
    assert f.link_of("s1", 3).ends == (("s1", 3), ("s2", 1))
    assert f.link_of("s1", 3).rate_bps == 10**9 and f.link_of("s1", 3).buffer_bytes == 256 * 1024
    assert f.peer("s2", 2) == ("h3", None)
    assert f.jobs[7].workers == ("h3", "h1", "h2"), "servers take the first ranks, as the host stack runs them"
    assert f.jobs[7].host.job.mode == "ps" and f.jobs[7].host.job.workers == 3
    assert f.jobs[7].host.policy.kinds  # the host's policy, defaults included


def test_star_leaf_spine_and_fat_tree_are_generated_and_routed() -> None:
    star = load('[topology]\nkind = "star"\nhosts = 3')
    assert list(star.switches) == ["s1"] and len(star.hosts) == 3
    ls = load('[topology]\nkind = "leaf-spine"\nleaves = 2\nspines = 3\nhosts_per_leaf = 2\n'
              '[[link]]\nname = "leaf1-spine2"\nrate = "100mbit"')  # fmt: skip
    assert sorted(ls.switches) == ["leaf1", "leaf2", "spine1", "spine2", "spine3"]
    assert ls.links["leaf1-spine2"].rate_bps == 10**8
    paths = Paths(ls)
    assert paths.next_hops("leaf1", "h3") == (3, 4, 5), "every uplink toward another leaf's host"
    assert paths.next_hops("leaf1", "h1") == (1,)
    assert paths.next_hops("spine2", "h3") == (2,)
    ft = load('[topology]\nkind = "fat-tree"\nk = 4')
    assert len(ft.switches) == 20 and len(ft.hosts) == 16
    paths = Paths(ft)
    assert len(paths.next_hops("edge1_1", "h16")) == 2 and len(paths.next_hops("agg1_1", "h16")) == 2
    assert len(paths.next_hops("core1", "h16")) == 1
    assert len(paths.next_hops("edge1_1", "h2")) == 1
    # Every switch gets a route to every host; leaf1 has one group per downlink plus the uplink set.
    wanted = state.desired(ls)
    routes = [e for e in wanted["leaf1"] if e.entity.table_id.endswith("ipv4_routes")]
    groups = [e for e in wanted["leaf1"] if e.entity.table_id.endswith("next_hops")]
    assert len(routes) == 4 and len(groups) == 3


def test_host_job_file_is_the_same_source(tmp_path: Path) -> None:
    (tmp_path / "job.toml").write_text('[job]\nid = 7\nmode = "ps"\n[policy.push]\nloss_bound = 0.03\n'
                                       '[transport]\nport = 19111\npayload_bytes = 1400\n')  # fmt: skip
    text = EXPLICIT.split("[[job]]")[0] + '[[job]]\nid = 7\nmode = "ps"\nworkers = ["h1", "h3"]\nservers = ["h3"]\n'
    (tmp_path / "fabric.toml").write_text(text + 'config = "job.toml"\n')
    f = fabric.load(tmp_path / "fabric.toml")
    assert f.jobs[7].host.policy.kinds[next(iter(f.jobs[7].host.policy.kinds))].loss_bound == 0.03
    (tmp_path / "fabric.toml").write_text(text.replace("id = 7", "id = 8") + 'config = "job.toml"\n')
    with pytest.raises(FabricError, match=r"job\.8\.config: .* says job\.id = 7"):
        fabric.load(tmp_path / "fabric.toml")


JOB2 = '[[job]]\nid = 8\nmode = "ring"\nworkers = ["h1", "h2"]\n[job.transport]\nport = {port}\npayload_bytes = 1400\n'


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (('switch = "s2"\nport = 2', 'switch = "s9"\nport = 2'), "host.h3.switch: unknown switch 's9'"),
        (('switch = "s2"\nport = 2', 'switch = "s2"\nport = 7'), "host.h3.port: switch s2 has no port 7"),
        (('switch = "s2"\nport = 2', 'switch = "s2"\nport = 1'), "link.s1-s2: has 3 ends (s1:3, s2:1, h3)"),
        (('switch = "s1"\nport = 1', 'switch = "s1"\nport = 1\nip = "10.9.0.2"'), "host.h2.ip: duplicate IP 10.9.0.2"),
        (
            ('switch = "s1"\nport = 1', 'switch = "s1"\nport = 1\nmac = "02:AA:00:00:00:02"'),
            "host.h2.mac: duplicate MAC 02:aa:00:00:00:02",
        ),
        (('3 = "s1-s2" }', '600 = "s1-s2" }'), f"switch.s1.ports.600: port 600 is out of range 0..{MAX_PORT}"),
        (
            ("[job.transport]", "[job.switch]\nthresholds = { 1 = 200 }\n[job.transport]"),
            "job.7.switch.thresholds.1: 200 packets of 1482 B (289 KiB) exceed the 256 KiB buffer of link s1-s2",
        ),
        (
            (
                'ports = { 1 = "s1-s2", 2 = "h3-s2" }',
                'ports = { 2 = "h3-s2" }\n[[switch]]\nname = "s3"\ngrpc = "127.0.0.1:9561"\nports = { 1 = "s1-s2" }',
            ),
            "job.7.workers: h1 cannot reach h3",
        ),
        (("", JOB2.format(port=19111)), "job.8.transport.port: UDP port 19111 is also job 7's"),
        (('mode = "ps"', 'mode = "collective"'), 'job.7.mode: must be "ps" or "ring"'),
        (('servers = ["h3"]', 'servers = ["h9"]'), "job.7.servers: unknown host 'h9'"),
        (("payload_bytes = 1400", "payload_bytes = 9000"), f"job.7.transport.payload_bytes: 9000 B + {IP_OVERHEAD} B"),
        (("payload_bytes = 1400", "payload_bytes = 99999"), "job.7.transport.payload_bytes: got 99999, must be"),
        (('grpc = "127.0.0.1:9560"', 'grpc = "127.0.0.1:9559"'), "switch.s2.grpc: 127.0.0.1:9559 device 1 is also"),
        (('buffer = "256KiB"', 'buffer = "1KiB"'), "link.s1-s2.buffer: 1 KiB cannot hold one frame"),
        (('rate = "1gbit"', 'rate = "fast"'), "link.s1-s2.rate: cannot read 'fast'"),
        (('rate = "1gbit"', "rate = inf"), "link.s1-s2.rate: inf is not a finite quantity"),
        (('buffer = "256KiB"', 'buffer = "1e400"'), "link.s1-s2.buffer: '1e400' is not a finite quantity"),
        (("[job.transport]", '[job.switch]\non_congestion = "drop"\n[job.transport]'), None),
        (
            ("", JOB2.format(port=19200) + '[job.switch]\non_congestion = "drop"'),
            "job.8.switch.on_congestion: 'drop' differs from job 7's 'trim' on switch s1",
        ),
        (("", JOB2.format(port=19110) + "[job.switch]\nfeatures = false"), "job.8.switch.features: false needs"),
        (
            ("[job.transport]", "[job.policy.push]\nloss_bound = 2.0\n[job.transport]"),
            "job.7.policy.push.loss_bound must be a fraction",
        ),
        (("id = 7", "id = 70000"), "job[0].id: 70000 is out of range 0..65535"),
    ],
)
def test_invalid_configuration_names_the_field(change: tuple[str, str], field: str | None) -> None:
    old, new = change
    assert old in EXPLICIT
    text = EXPLICIT.replace(old, new, 1) if old else EXPLICIT + new
    if field is None:
        load(text)  # the variant is valid: the checks are not blanket refusals
    else:
        assert field in error(text)


def test_all_errors_are_reported_together() -> None:
    text = EXPLICIT.replace('switch = "s2"\nport = 2', 'switch = "s9"\nport = 2').replace(
        'ip = "10.9.0.2"', 'ip = "10.0.0.300"'
    )
    message = error(text)
    assert (
        "3 errors" in message
        and "link.h3-s2: only one end" in message
        and "host.h3.switch" in message
        and "host.h2.ip" in message
    )


def test_links_to_nowhere_and_unknown_tables() -> None:
    text = EXPLICIT.replace('ports = { 1 = "h1-s1", 2 = "h2-s1", 3 = "s1-s2" }',
                            'ports = { 1 = "h1-s1", 2 = "h2-s1", 3 = "s1-s2", 4 = "dangling" }')  # fmt: skip
    assert "link.dangling: only one end (s1:4)" in error(text)
    assert "unknown table(s) swtich" in error(EXPLICIT + "\n[[swtich]]\nname = 'x'\n")
    assert "topology.kind: must be one of" in error('[topology]\nkind = "ring"')
    assert "topology.k: must be even" in error('[topology]\nkind = "fat-tree"\nk = 3')
    assert "link[0].name: 'h9-s1' is not in the generated fabric" in error(
        '[topology]\nkind = "star"\nhosts = 2\n[[link]]\nname = "h9-s1"\nrate = "1gbit"'
    )


def test_table_capacity_is_checked_before_writing() -> None:
    f = load('[topology]\nkind = "star"\nhosts = 300\n'
             '[[job]]\nid = 1\nmode = "ring"\nworkers = ["h1", "h2"]\n[job.transport]\nport = 20000')  # fmt: skip
    full = rf"switch\.s1: 300 entries for DlcpIngress.ecmp.next_hops, which holds {ECMP_GROUPS}"
    with pytest.raises(FabricError, match=full):
        state.desired(f)


@pytest.mark.parametrize("text", [EXPLICIT, (ROOT / "docs/examples/star.toml").read_text()])
def test_a_value_of_any_type_anywhere_gives_a_named_error_never_a_traceback(text: str) -> None:
    tried = 0
    for path, value, doc in wrong_everywhere(tomllib.loads(text)):
        try:
            fabric.from_dict(doc)
        except ValueError:
            pass
        except Exception as exc:
            raise AssertionError(f"{path} = {value!r}: {exc!r}") from exc
        tried += 1
    assert tried > 150  # every value of TOML: its tables and arrays too


def test_a_testbed_fabric_file_is_a_controller_configuration() -> None:
    """The testbed's fabric files carry a [testbed] table; `dlcp controller` reads the same files."""
    examples = Path(__file__).resolve().parents[2] / "docs" / "examples" / "testbed"
    files = sorted(examples.glob("*.toml"))
    assert files
    for path in files:
        assert "[testbed]" in path.read_text()
        f = fabric.load(path)
        assert f.switches and f.jobs, path
