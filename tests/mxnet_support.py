"""Process entry points for the MXNet KVStore tests (``tests/mxnet_shim``), run in ``.venv-mxnet``.

Spawned children import these by module name, so they live at the top of ``tests``
(pytest's pythonpath). Each worker sets the rendezvous variables the way a
launcher would, then uses the documented one-liner: ``mx.kv.create("dlcp")``.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

IN_UNITS, HIDDEN = 8, 16
BATCH, STEPS, LR = 32, 25, 0.05


def _create_kvstore(rank: int, world: int, store_port: int, job_file: str) -> Any:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), DLCP_STORE_PORT=str(store_port), DLCP_CONFIG=job_file)
    # isort: off
    import dlcp.host.shim.mxnet  # noqa: F401  (registers "dlcp"; first, so that torch keeps its threads)
    import mxnet as mx

    # isort: on

    return mx.kv.create("dlcp")


def kvstore_worker(rank: int, world: int, store_port: int, job_file: str) -> dict[str, Any]:
    """The KVStore API: identity, pushpull (one device, several devices, several keys, ``out``), broadcast."""
    kv = _create_kvstore(rank, world, store_port, job_file)
    import mxnet as mx

    from dlcp.host.shim.mxnet import DLCP

    try:
        r = rank + 1
        base = np.arange(10_000, dtype=np.float32)
        single = mx.nd.array(base * r)
        kv.pushpull(0, single)  # in place
        devices = [mx.nd.array(base * r, ctx=mx.cpu(0)), mx.nd.array(base * 2 * r, ctx=mx.cpu(1))]
        kv.pushpull(1, devices)  # summed over the devices too, written back to each
        out = [mx.nd.zeros(3), mx.nd.zeros(3)]
        kv.pushpull("bias", mx.nd.full(3, r), out=out)
        keyed = [mx.nd.full(5, r), mx.nd.full(7, 10 * r)]
        kv.pushpull([2, 3], keyed)
        halves = mx.nd.full((4, 5), r, dtype="float16")
        kv.pushpull(4, halves)
        bcast_out = [mx.nd.zeros((2, 3)), mx.nd.zeros((2, 3))]
        kv.broadcast(5, mx.nd.full((2, 3), 100 + rank), out=bcast_out)
        return {
            "is_dlcp": isinstance(kv, DLCP),
            "type": kv.type,
            "rank": kv.rank,
            "num_workers": kv.num_workers,
            "mode": kv.mode,
            "optimizer_capable": kv.is_capable(mx.kvstore.KVStoreBase.OPTIMIZER),
            "single": single.asnumpy(),
            "devices": [d.asnumpy() for d in devices],
            "out": [o.asnumpy() for o in out],
            "keyed": [k.asnumpy() for k in keyed],
            "halves": halves.asnumpy(),
            "broadcast": [o.asnumpy() for o in bcast_out],
            "layers": {str(k): v for k, v in kv._layers.items()},
            "lost": kv.collectives.stats.lost_elems,
        }
    finally:
        kv.close()


def make_net(seed: int) -> Any:
    import mxnet as mx
    from mxnet import gluon

    mx.random.seed(seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(HIDDEN, activation="relu"), gluon.nn.Dense(1))  # deferred init: shapes at first forward
    net.initialize(mx.init.Xavier())
    return net


def shard(rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s training data: a noisy linear target, different on every rank."""
    rng = np.random.default_rng(100 + rank)
    x = rng.standard_normal((STEPS, BATCH, IN_UNITS)).astype(np.float32)
    w = np.linspace(-1.0, 1.0, IN_UNITS, dtype=np.float32)
    y = (x @ w + 0.5 + 0.01 * rng.standard_normal((STEPS, BATCH))).astype(np.float32)
    return x, y


def eval_set() -> tuple[np.ndarray, np.ndarray]:
    x, y = shard(999)
    return x.reshape(-1, IN_UNITS), y.reshape(-1)


def _params(net: Any) -> dict[str, np.ndarray]:
    # Names carry a per-process counter prefix; the order is the layer order.
    return {f"{i}": p.data().asnumpy() for i, p in enumerate(net.collect_params().values())}


def _eval_loss(net: Any) -> float:
    import mxnet as mx

    x, y = eval_set()
    pred = net(mx.nd.array(x)).reshape(-1)
    return float(((pred - mx.nd.array(y)) ** 2).mean().asscalar())


def train(net: Any, trainer: Any, batches: list[tuple[np.ndarray, np.ndarray]], global_batch: int) -> list[float]:
    import mxnet as mx
    from mxnet import autograd, gluon

    loss_fn = gluon.loss.L2Loss()
    losses = []
    for x, y in batches:
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(x)), mx.nd.array(y).reshape(-1, 1))
        loss.backward()
        trainer.step(global_batch)
        losses.append(_eval_loss(net))
    return losses


def trainer_worker(rank: int, world: int, store_port: int, job_file: str) -> dict[str, Any]:
    """gluon.Trainer loops over the DLCP KVStore; each rank starts from its own random weights.

    The first loop relies on the Trainer's broadcast alone. gluon broadcasts inside the first
    ``step``, after that step's backward pass, so the first gradients of ranks other than 0
    come from their own weights; the second loop calls ``kv.resync`` first and so must follow
    single-process training on the global batch.
    """
    kv = _create_kvstore(rank, world, store_port, job_file)
    import mxnet as mx
    from mxnet import gluon

    x, y = shard(rank)
    batches = list(zip(x, y, strict=True))
    result: dict[str, Any] = {"lost": 0}
    try:
        for name, resync_first in (("trainer_only", False), ("resynced", True)):
            net = make_net(seed=rank)
            net(mx.nd.array(x[0]))  # finish deferred init: the weights differ per rank
            start = _params(net)
            if resync_first:
                kv.resync(net.collect_params())
            trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": LR}, kvstore=kv)
            before = _eval_loss(net)
            losses = train(net, trainer, batches, BATCH * kv.num_workers)
            result[name] = {"start": start, "params": _params(net), "before": before, "losses": losses}
            result["update_on_kvstore"] = trainer._update_on_kvstore
        if kv.mode == "ps":
            # Knock the replicas apart, then bring them back with the reliable broadcast.
            for p in net.collect_params().values():
                p.set_data(p.data() + rank)
            kv.resync(net.collect_params())
            result["knocked_and_resynced"] = _params(net)
        result["lost"] = kv.collectives.stats.lost_elems
        return result
    finally:
        kv.close()


def reference_training(world: int) -> dict[str, Any]:
    """The same training in one process on the concatenated global batch, from rank 0's initial weights."""
    import mxnet as mx
    from mxnet import gluon

    net = make_net(seed=0)
    shards = [shard(r) for r in range(world)]
    net(mx.nd.array(shards[0][0][0]))
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": LR}, kvstore=None)
    batches = [
        (np.concatenate([s[0][i] for s in shards]), np.concatenate([s[1][i] for s in shards])) for i in range(STEPS)
    ]
    losses = train(net, trainer, batches, BATCH * world)
    return {"params": _params(net), "losses": losses}
