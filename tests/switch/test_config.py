"""The software switch's configuration: TOML into dataclasses, value parsers, the statistics socket."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from toml_support import wrong_everywhere

from dlcp.testbed.switch import config as c
from dlcp.testbed.switch import stats

TOML = """
device_id = 3
grpc = "127.0.0.1:9559"
buffer = "1MiB"
seed = 7

[[port]]
id = 1
interface = "dlcpS1"

[[port]]
id = 2
interface = "dlcpS2"
rate = "2.5gbit"
buffer = "256KiB"
delay = "100us"
loss = {3 = 0.05, 1 = "1%"}
"""


def test_toml_into_dataclasses(tmp_path: Path) -> None:
    path = tmp_path / "sw.toml"
    path.write_text(TOML)
    cfg = c.load(path)
    assert cfg.device_id == 3 and cfg.grpc == "127.0.0.1:9559" and cfg.seed == 7
    p1, p2 = cfg.port(1), cfg.port(2)
    assert p1.buffer_bytes == 1 << 20 and p1.rate_bps == 0 and p1.loss == (0.0,) * 8
    assert p2.rate_bps == 2_500_000_000 and p2.buffer_bytes == 256 << 10 and p2.delay_ns == 100_000
    assert p2.loss == (0.0, 0.01, 0.0, 0.05, 0.0, 0.0, 0.0, 0.0)


@pytest.mark.parametrize(
    ("doc", "named"),
    [
        ({"port": [{"id": 1, "interface": "a"}, {"id": 1, "interface": "b"}]}, "port 1 is given twice"),
        ({"port": [{"id": 1, "interface": "a", "speed": 1}]}, "unknown settings ['speed']"),
        ({"ports": []}, "unknown settings ['ports']"),
        ({"port": [{"id": 1, "interface": "a", "loss": {9: 0.1}}]}, "class 9"),
        ({"port": [{"id": 1}]}, "needs id and interface"),
        ({"device_id": 0}, "sw.toml: device_id"),
        ({"grpc": "9559"}, "grpc"),
        # values of the wrong type: named, never a TypeError or a silent truncation
        ({"device_id": [1]}, "sw.toml: device_id: expected an integer"),
        ({"device_id": "x"}, "sw.toml: device_id: expected an integer"),
        ({"rx_blocks": {"a": 1}}, "sw.toml: rx_blocks: expected an integer"),
        ({"max_frame": 1.5}, "sw.toml: max_frame: expected an integer"),
        ({"seed": -1}, "sw.toml: seed: -1 is out of range"),
        ({"grpc": 5}, "sw.toml: grpc: expected a string"),
        ({"stats_dir": 5}, "sw.toml: stats_dir: expected a string"),
        ({"buffer": [1]}, "sw.toml: buffer: expected a number or a string with a unit"),
        ({"buffer": True}, "sw.toml: buffer: expected a number"),
        ({"buffer": float("inf")}, "sw.toml: buffer: inf is not a finite quantity"),
        ({"port": 5}, "sw.toml: port: expected [[port]] tables"),
        ({"port": [{"id": 2.5, "interface": "a"}]}, "port[0].id: port 2.5 is not a number"),
        ({"port": [{"id": True, "interface": "a"}]}, "port[0].id: port True is not a number"),
        ({"port": [{"id": 1, "interface": 7}]}, "port[0].interface: expected a string"),
        ({"port": [{"id": 1, "interface": "a", "rate": [1]}]}, "port[0].rate: expected a number"),
        ({"port": [{"id": 1, "interface": "a", "rate": float("inf")}]}, "port[0].rate: inf is not a finite"),
        ({"port": [{"id": 1, "interface": "a", "delay": "1e400s"}]}, "port[0].delay: '1e400s' is not a finite"),
        ({"port": [{"id": 1, "interface": "a", "loss": [1]}]}, "port[0].loss: cannot read [1]"),
        ({"port": [{"id": 1, "interface": "a", "loss": True}]}, "port[0].loss: cannot read True"),
    ],
)
def test_bad_settings_are_named(doc: dict, named: str) -> None:
    with pytest.raises(c.ConfigError, match=None) as info:
        c.from_dict(doc, "sw.toml")
    assert named in str(info.value)


@pytest.mark.parametrize(
    ("text", "bps"), [("1gbit", 10**9), ("100mbit", 10**8), ("2.5Gbit", 25 * 10**8), ("64kbit", 64000), (1e6, 10**6)]
)
def test_rates(text: str, bps: int) -> None:
    assert c.parse_rate(text) == bps


def test_times_sizes_probabilities() -> None:
    assert c.parse_delay("100us") == 100_000 and c.parse_delay("1.5ms") == 1_500_000 and c.parse_delay(0) == 0
    assert c.parse_size("4MiB") == 4 << 20 and c.parse_size("1mb") == 10**6 and c.parse_size(65536) == 65536
    assert c.parse_probability("1%") == 0.01 and c.parse_probability(0.5) == 0.5
    for bad in (lambda: c.parse_rate("fast"), lambda: c.parse_delay("-1ms"), lambda: c.parse_size("1TiB")):
        with pytest.raises(c.ConfigError):
            bad()


def test_statistics_socket_serves_fresh_documents(tmp_path: Path) -> None:
    n = {"calls": 0}

    def snapshot() -> dict:
        n["calls"] += 1
        return {"device_id": 4, "time": float(n["calls"]), "uptime_s": 1.0, "ports": {}, "calls": n["calls"]}

    path = stats.socket_path(tmp_path, 4)
    server = stats.StatsServer(path, snapshot).start()
    try:
        assert stats.fetch(path)["calls"] == 1 and stats.fetch(path)["calls"] == 2
        with pytest.raises(OSError, match="already running"):
            stats.StatsServer(path, snapshot).start()
        lines: list[str] = []
        stats.watch(path, 0.01, lines.append, rounds=2)
        assert len(lines) == 2 and all(line.startswith("device 4") for line in lines)
    finally:
        server.stop()
    assert not path.exists()
    with pytest.raises(OSError, match="no switch is running"):
        stats.fetch(path)


def test_a_stale_socket_is_replaced(tmp_path: Path) -> None:
    import socket

    path = stats.socket_path(tmp_path, 5)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()  # bound, never listening: what a killed switch leaves
    server = stats.StatsServer(path, lambda: {"ok": 1}).start()
    try:
        assert stats.fetch(path) == {"ok": 1}
    finally:
        server.stop()


def test_a_value_of_any_type_anywhere_gives_a_config_error_never_a_traceback() -> None:
    tried = 0
    for path, value, doc in wrong_everywhere(tomllib.loads(TOML)):
        try:
            c.from_dict(doc, "sw.toml")
        except c.ConfigError:
            pass
        except Exception as exc:
            raise AssertionError(f"{path} = {value!r}: {exc!r}") from exc
        tried += 1
    assert tried > 150  # every value of TOML: its tables and arrays too


def test_range_errors_show_whole_numbers_in_full() -> None:
    with pytest.raises(c.ConfigError) as exc:
        c.parse_size("1", "buffer")
    text = str(exc.value)
    assert f"{c.MIN_BUFFER}..{c.MAX_BUFFER}" in text, text
    assert "e+" not in text, text
