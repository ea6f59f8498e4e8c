"""The models ``dlcp train`` trains (dlcp.models), their synthetic tasks (dlcp.apps.train.tasks), the wait for the front
layers' bucket (dlcp.host.timeline), and the garbage-collector switch (dlcp.host.shim.gcfreeze)."""

from __future__ import annotations

import argparse
import gc
import subprocess
import sys

import numpy as np
import pytest

from dlcp import models
from dlcp.apps.train import tasks
from dlcp.apps.train.trainer import TrainConfig, run
from dlcp.host.shim.gcfreeze import freeze_after_setup
from dlcp.host.timeline import Timeline, front_bucket_waits


def _choices(*path: str) -> tuple[str, ...]:
    from dlcp.cli.main import build_parser

    parser: argparse.ArgumentParser = build_parser()
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    (option,) = [a for a in parser._actions if "--model" in a.option_strings]
    return tuple(option.choices)


def test_every_command_offers_the_models_of_the_one_list() -> None:
    names = tuple(models.MODELS)
    assert {"mlp", "mlp-wide", "mlp-large", "resnet18", "gpt"} <= set(names)
    assert _choices("train") == _choices("demo") == _choices("testbed", "bench") == names
    with pytest.raises(ValueError, match=r"unknown model 'vgg'.*resnet18, gpt"):
        models.spec("vgg")
    with pytest.raises(ValueError, match="--model"):
        TrainConfig(model="vgg")


def test_the_core_builds_no_torch_at_import() -> None:
    code = "import sys, dlcp.models, dlcp.cli.train_cmd; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_resnet18_has_resnet18s_parameters_at_width_64_and_a_sixteenth_at_16() -> None:
    # ResNet-18 with the CIFAR stem and 10 classes: 11,173,962 parameters (the common reference figure).
    assert models.param_count("resnet18", 64) == 11_173_962
    assert models.param_count("resnet18") == 701_466
    assert models.param_count("gpt") == 112_448
    assert models.param_count("mlp-wide") == 596_490  # counted without torch, as built
    with pytest.raises(ValueError, match="not to an mlp"):
        models.check_width(models.MODELS["mlp"], 32)
    with pytest.raises(ValueError, match="multiple of the 4 attention heads"):
        models.check_width(models.MODELS["gpt"], 30)
    with pytest.raises(ValueError, match="--width"):
        TrainConfig(model="resnet18", width=-1)


def test_the_simulators_resnet50_is_the_shared_builders_with_resnet50s_parameters() -> None:
    from dlcp.simulations.models import layers

    found = layers("resnet50")
    assert sum(layer.params for layer in found) == 25_557_032  # torchvision's resnet50
    assert found[0].name == "0" and found[0].params == 64 * 3 * 7 * 7  # the ImageNet stem comes first


def test_gpt_is_causal_and_resnet_classifies_32x32_images() -> None:
    import torch

    torch.manual_seed(0)
    net = models.build("gpt").eval()
    m = models.MODELS["gpt"]
    idx = torch.randint(0, m.vocab, (2, m.context))
    changed = idx.clone()
    changed[:, -1] = (changed[:, -1] + 1) % m.vocab
    with torch.no_grad():
        a, b = net(idx), net(changed)
    assert a.shape == (2, m.context, m.vocab)
    assert torch.equal(a[:, :-1], b[:, :-1]), "a token sees no later token"
    assert not torch.equal(a[:, -1], b[:, -1])
    resnet = models.build("resnet18", width=8)
    assert resnet(torch.zeros(2, *models.IMAGE_SHAPE)).shape == (2, models.CLASSES)


@pytest.mark.parametrize("name", ["mlp", "resnet18", "gpt"])
def test_tasks_are_deterministic_from_the_seed(name: str) -> None:
    m = models.MODELS[name]
    a, b, c = tasks.make(m, 3, 64, 16), tasks.make(m, 3, 64, 16), tasks.make(m, 4, 64, 16)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])
    assert [len(x) for x in a] == [64, 64, 16, 16]


def test_the_token_task_allows_at_most_its_likeliest_successor() -> None:
    """Counted from a large sample: the best next-token accuracy of the chain is 0.7, so the ``gpt`` model's
    accuracy has a known ceiling."""
    m = models.MODELS["gpt"]
    x, y, _, _ = tasks.make(m, 0, 2000, 1)
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])  # the target is the input one token on
    counts = np.zeros((m.vocab, m.vocab))
    np.add.at(counts, (x.reshape(-1), y.reshape(-1)), 1)
    best = counts.max(axis=1).sum() / counts.sum()
    assert best == pytest.approx(tasks.SUCCESSOR_PROBS[0], abs=0.01)
    assert (counts > 0).sum(axis=1).max() == len(tasks.SUCCESSOR_PROBS)


def test_front_bucket_wait_is_the_front_layers_bucket_of_each_iteration() -> None:
    tl = Timeline()
    # Iteration 1: two buckets, the back layers' handed first; the front one (layer 0) queues 0.2 s behind it.
    tl.at("iter", 10.0, 10.1, 10.5, 10.6, 0.0)
    tl.at("bucket", 10.2, 10.2, 10.3, 100, 7)
    tl.at("bucket", 10.25, 10.3, 10.45, 100, 0)
    # Iteration 2: the buckets in the other order; iteration 3: none (as with gloo).
    tl.at("iter", 11.0, 11.1, 11.5, 11.6, 0.0)
    tl.at("bucket", 11.2, 11.2, 11.25, 100, 0)
    tl.at("bucket", 11.3, 11.3, 11.4, 100, 5)
    tl.at("iter", 12.0, 12.1, 12.5, 12.6, 0.0)
    got = front_bucket_waits(tl.as_dict()["events"])
    assert got[0] == pytest.approx((0.2, 0.05)) and got[1] == pytest.approx((0.05, 0.0)) and got[2] is None


def test_freeze_after_setup_freezes_only_when_asked() -> None:
    try:
        gc.unfreeze()
        assert freeze_after_setup(False) == 0 == gc.get_freeze_count()
        frozen = freeze_after_setup()
        # Another thread of the test process may free frozen objects meanwhile: the count only falls.
        assert frozen > 1000 and frozen - 1000 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()


def test_no_gc_freeze_is_the_train_configs_switch() -> None:
    from dlcp.cli.main import build_parser

    parser = build_parser()
    assert parser.parse_args(["train"]).gc_freeze is True
    assert parser.parse_args(["train", "--no-gc-freeze"]).gc_freeze is False


SMALL = {"workers": 2, "epochs": 1, "train_samples": 1024, "batch_size": 32, "payload_bytes": 4096, "eval_every": 8}


@pytest.mark.slow
@pytest.mark.parametrize(("name", "chance"), [("resnet18", 0.1), ("gpt", 1 / 64)])
def test_resnet_and_gpt_train_over_dlcp(name: str, chance: float) -> None:
    """16 iterations of each: accuracy well above chance, replicas identical, the wait for the front layers'
    bucket reported, set-up's objects frozen."""
    r = run(TrainConfig(model=name, **SMALL))
    assert r["replicas_identical"]
    assert r["test_accuracy"] > 3 * chance, r["accuracy_curve"]
    assert [p[1] for p in r["accuracy_curve"]] == [8, 16, 16]  # a measurement every 8, then the final one
    assert r["front_wait_p50_s"] > 0
    if name == "resnet18":  # 2.8 MB of gradients in 0.5 MB buckets: the front layers' comes after the others
        assert 0 < r["front_queued_p50_s"] < r["front_wait_p50_s"]
    assert r["gc_frozen_objects"] > 10_000


def test_no_gc_freeze_leaves_the_ranks_unfrozen() -> None:
    r = run(TrainConfig(model="mlp", gc_freeze=False, **SMALL))
    assert r["gc_frozen_objects"] == 0
