import numpy as np
import pytest

from dlcp.policy import KindPolicy, Policy
from dlcp.protocol import MessageKind


def test_front_layers_get_higher_classes() -> None:
    p = Policy()
    classes = p.priority_of_layers(np.arange(20), 20)
    assert classes[0] == 6 and classes[-1] == 0  # top class 7 is reserved for control/retx
    assert np.all(np.diff(classes.astype(int)) <= 0), "priority never increases with depth"
    assert set(classes.tolist()) == set(range(7)), "layers use every data class"
    assert p.control_class == 7


def test_few_layers_take_top_classes() -> None:
    p = Policy(num_classes=4, reserve_top_class=False)
    assert p.priority_of_layers(np.arange(2), 2).tolist() == [3, 2]
    with pytest.raises(ValueError, match="layer index"):
        p.priority_of_layers(5, 2)


def test_small_gradients_are_drop_eligible() -> None:
    p = Policy(kinds={**Policy().kinds, MessageKind.PUSH: KindPolicy(drop_quantiles=(0.25, 0.5))})
    epp = 10
    mags = np.repeat(np.arange(1, 101, dtype=np.float32), epp)  # packet i has |g| = i + 1
    signs = np.where(np.arange(mags.size) % 2, -1, 1).astype(np.float32)
    drops = p.drop_classes(mags * signs, epp, MessageKind.PUSH)
    assert drops.shape == (100,)
    assert np.all(drops[:25] == 2) and np.all(drops[25:50] == 1) and np.all(drops[50:] == 0)
    assert np.all(p.drop_classes(mags, epp, MessageKind.ALL_GATHER) == 0), "all-gather has no drop cuts"


def test_statistics_and_partial_last_packet() -> None:
    values = np.array([1, -3, 2, 2, -4], dtype=np.float32)
    assert Policy(statistic="mean_abs").packet_statistic(values, 2).tolist() == [2.0, 2.0, 4.0]
    assert Policy(statistic="max_abs").packet_statistic(values, 2).tolist() == [3.0, 2.0, 4.0]
    assert Policy(statistic="rms").packet_statistic(values, 2)[0] == pytest.approx(np.sqrt(5))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"loss_bound": 1.0}, "loss_bound"),
        ({"loss_bound": -0.1}, "loss_bound"),
        ({"drop_quantiles": (0.5, 0.2)}, "increasing"),
        ({"drop_quantiles": (0.1, 0.2, 0.3, 0.4)}, "at most"),
        ({"layer_bounds": {-1: 0.1}}, "layer"),
    ],
)
def test_kind_policy_validation(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        KindPolicy(**kwargs)


def test_per_layer_bounds() -> None:
    kp = KindPolicy(loss_bound=0.02, layer_bounds={0: 0.0})
    assert kp.bound_for(0) == 0.0 and kp.bound_for(3) == 0.02
    assert Policy().loss_bound(MessageKind.ALL_GATHER, 0) == 0.0


def test_classify_large_tensor_is_vectorised() -> None:
    values = np.random.default_rng(0).standard_normal(5_000_000).astype(np.float32)
    prio, drops = Policy().classify(values, 2048, MessageKind.PUSH, layer=3, num_layers=10)
    assert drops.size == -(-values.size // 2048)
    assert 0.45 < drops.mean() < 0.55  # half the packets fall under the median cut
    assert prio == 4


def test_sampled_statistic_ranks_like_the_full_one() -> None:
    rng = np.random.default_rng(1)
    epp, npk = 2048, 400
    scale = np.repeat(rng.lognormal(0, 1.5, npk), epp)  # magnitudes differ between packets
    g = (rng.standard_normal(npk * epp) * scale).astype(np.float32)
    sampled = Policy(sample_elems=256).drop_classes(g, epp, MessageKind.PUSH)
    exact = Policy(sample_elems=0).drop_classes(g, epp, MessageKind.PUSH)
    assert np.mean(sampled == exact) > 0.95
    assert Policy(sample_elems=256).packet_statistic(g, epp).shape == (npk,)


@pytest.mark.parametrize("n", [1, 3, 2047, 2048, 2049])
def test_tensors_smaller_than_a_packet(n) -> None:
    """Biases and other tiny tensors have no full packet: classification must still work."""
    drops = Policy().drop_classes(np.ones(n, dtype=np.float32), 2048, MessageKind.REDUCE_SCATTER)
    assert drops.shape == (-(-n // 2048),)
