from pathlib import Path

import pytest

from dlcp.config import ConfigError, from_dict, load
from dlcp.protocol import MessageKind

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "job.toml"


def test_example_job_file_loads() -> None:
    cfg = load(EXAMPLE)
    assert cfg.job.mode in ("ring", "ps")
    assert cfg.policy.kinds[MessageKind.PUSH].layer_bounds.get(0) == 0.0


def test_defaults() -> None:
    cfg = from_dict({})
    assert cfg.policy.num_classes == 8 and cfg.transport.port == 19110


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"job": {"idd": 1}}, "job.idd"),
        ({"job": {"mode": "mesh"}}, "job.mode"),
        ({"job": {"workers": 0}}, "job.workers"),
        ({"transport": {"port": "x"}}, "transport.port"),
        ({"policy": {"push": {"loss_bound": 1.5}}}, "policy.push.loss_bound"),
        ({"policy": {"pull": {"layer_bounds": {"a": 0.1}}}}, "policy.pull.layer_bounds"),
        ({"policy": {"num_classes": 9}}, "policy.num_classes"),
        ({"policy": {"statistic": "median"}}, "policy.statistic"),
        ({"limits": {"max_message_bytes": -1}}, "max_message_bytes"),
        ({"policy": {"push": 3}}, "policy.push"),
        ({"transport": {"send_rate_bps": {"10.0.0.2": 0}}}, r"transport\.send_rate_bps\.10\.0\.0\.2"),
        ({"transport": {"send_rate_bps": {"10.0.0.2": "fast"}}}, r"transport\.send_rate_bps\.10\.0\.0\.2"),
        ({"transport": {"send_burst_bytes": -1}}, "transport.send_burst_bytes"),
    ],
)
def test_errors_name_the_field(data, match) -> None:
    with pytest.raises(ConfigError, match=match):
        from_dict(data)


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such"):
        load(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[job\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load(bad)
