"""MXNet KVStore over DLCP, for ``gluon.Trainer`` (MXNet 1.9.1).

Importing this module registers the KVStore under the name ``dlcp``
(``mx.kvstore.KVStoreBase.register``, MXNet's mechanism for custom stores)::

    import dlcp.host.shim.mxnet  # registers mx.kv.create("dlcp"); import it before mxnet
    import mxnet as mx

    kv = mx.kv.create("dlcp")  # rendezvous from the environment: see LaunchEnv
    trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore=kv)
    ...
    trainer.step(batch_size * kv.num_workers)  # pushpull sums over the workers

Example::

    >>> kv = DLCP(config="job.toml", launch=LaunchEnv(rank=0, world=2, store_port=29500))
    >>> kv.pushpull(0, mx.nd.ones((2, 3)))  # in place: every element becomes 2.0

**Pass the object, not the name.** With one device per process,
``gluon.Trainer(..., kvstore="dlcp")`` uses no KVStore at all:
``mxnet.model._create_kvstore`` skips it for a single device unless the name
contains ``dist``.

**Sum, not mean.** ``pushpull`` sums over the devices in the call and over the
workers, as MXNet's ``dist_sync`` and Horovod's KVStore do. The Trainer scales
gradients by ``1 / batch_size``, so pass the global batch size to
``trainer.step`` to get the mean over all samples.

**Layer priorities.** ``gluon.Trainer`` uses the parameter's index as the key,
and a ``Sequential`` net registers its parameters in forward order, so an
integer key is the layer index (0 = front, highest priority class). Other keys
are numbered in the order they are first seen.

**Replica consistency** (``docs/transport.md`` §4). Ring mode's all-gather is
reliable by default, so replicas stay identical. In PS mode a lost pull range
keeps the previous round's value; the KVStore sees gradients only, never the
parameters, so it cannot re-synchronise them on its own: call
:meth:`DLCP.resync` every so often, or set ``policy.pull.loss_bound = 0``.

**torch threads.** DLCP's rendezvous uses torch's TCPStore, so torch is
imported here, before mxnet: importing mxnet calls
``omp_set_num_threads(omp_get_num_procs() / 2)`` on x86 (``src/engine/openmp.cc``)
unless ``OMP_NUM_THREADS`` or ``MXNET_OMP_MAX_THREADS`` is set, and torch reads
its intra-op thread count from the same libgomp. The count torch had before is
restored.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dlcp.config import DLCPConfig
from dlcp.host.collectives import Mode
from dlcp.host.launch_env import LaunchEnv
from dlcp.host.session import Session, open_session_from_env
from dlcp.protocol import MessageKind

log = logging.getLogger(__name__)


def _import_mxnet() -> Any:
    """Import mxnet and give torch back the intra-op thread count it had before."""
    if "mxnet" in sys.modules:
        if "OMP_NUM_THREADS" not in os.environ and "MXNET_OMP_MAX_THREADS" not in os.environ:
            log.warning(
                "mxnet was imported before dlcp.host.shim.mxnet, so it may have lowered torch's intra-op "
                "thread count (now %d); import this module first, or set OMP_NUM_THREADS",
                torch.get_num_threads(),
            )
        return sys.modules["mxnet"]
    before = torch.get_num_threads()
    module = importlib.import_module("mxnet")
    if torch.get_num_threads() != before:
        log.debug("importing mxnet set torch's threads to %d; restoring %d", torch.get_num_threads(), before)
        torch.set_num_threads(before)
    return module


mx = _import_mxnet()
KVStoreBase: Any = mx.kvstore.KVStoreBase


@KVStoreBase.register
class DLCP(KVStoreBase):
    """A KVStore whose ``pushpull`` is a DLCP bounded-loss all-reduce (ring or parameter server).

    ``mx.kv.create("dlcp")`` calls ``DLCP()``: the rendezvous comes from the
    environment (:class:`LaunchEnv`) and the job from ``DLCP_CONFIG``. Pass
    ``launch`` and ``config`` to set them in code, or ``session`` to use an
    open :class:`~dlcp.host.session.Session` (its policy, and the mode from
    ``mode`` or the config).
    """

    def __init__(
        self,
        *,
        mode: Mode | None = None,
        config: DLCPConfig | str | Path | None = None,
        launch: LaunchEnv | None = None,
        session: Session | None = None,
    ) -> None:
        if mode not in (None, "ring", "ps"):
            raise ValueError(f"mode must be 'ring' or 'ps', got {mode!r}")
        if session is not None and (launch is not None or config is not None):
            raise ValueError("pass either session, or launch and config, not both")
        if session is None:
            session = open_session_from_env(launch, config=config, mode=mode)
            self._owns_session = True
        else:
            self._owns_session = False
        self.mode: Mode = mode or session.mode
        self.session = session
        self.collectives = session.collectives
        self._layers: dict[object, int] = {}
        self._num_layers = 1
        self._named = 0
        if self.mode == "ps" and self.collectives.policy.kinds[MessageKind.PULL].loss_bound > 0:
            log.warning(
                "PS mode with pull loss bound %g: lost pull ranges keep stale values and replicas can drift; "
                "call kv.resync(params) periodically or set policy.pull.loss_bound = 0",
                self.collectives.policy.kinds[MessageKind.PULL].loss_bound,
            )
        log.info("DLCP KVStore: rank %d of %d, mode %s", self.rank, self.num_workers, self.mode)

    # -- identity ---------------------------------------------------------------------
    @property
    def type(self) -> str:
        # No "dist" in the name: gluon.Trainer would then try update_on_kvstore first.
        return "dlcp"

    @property
    def rank(self) -> int:
        return self.collectives.rank

    @property
    def num_workers(self) -> int:
        return len(self.collectives.workers)

    @staticmethod
    def is_capable(capability: str) -> bool:
        """No optional capability: the optimizer stays in the Trainer (``update_on_kvstore=False``)."""
        return False

    # -- key -> layer ----------------------------------------------------------------
    def layer_of(self, key: object) -> int:
        """Layer index of a key: an integer key is gluon's parameter index; others count in first-seen order."""
        layer = self._layers.get(key)
        if layer is None:
            if isinstance(key, int) and not isinstance(key, bool) and key >= 0:
                layer = key
            else:
                layer, self._named = self._named, self._named + 1
            self._layers[key] = layer
            self._num_layers = max(self._num_layers, layer + 1)
        return layer

    @property
    def num_layers(self) -> int:
        return self._num_layers

    # -- data path --------------------------------------------------------------------
    def broadcast(self, key: Any, value: Any, out: Any = None, priority: int = 0) -> None:
        """Copy rank 0's ``value`` into ``out`` (every array of a list; ``value`` itself if None) on every rank.

        Always reliable: gluon.Trainer calls it once per parameter so that every replica starts equal.
        """
        if isinstance(key, (list, tuple)):
            outs = out if out is not None else [None] * len(key)
            for k, v, o in zip(key, value, outs, strict=True):
                self.broadcast(k, v, o, priority)
            return
        self.layer_of(key)
        x = _to_numpy(value)
        if x.size:
            self.collectives.broadcast(x, root=0)
        for o in _as_list(value if out is None else out):
            o[:] = x

    def pushpull(self, key: Any, value: Any, out: Any = None, priority: int = 0) -> None:
        """Sum ``value`` (an NDArray or a list, one per device) over the devices and the workers.

        The sum goes to ``out`` (every array of a list), or back into every array of ``value``
        when ``out`` is None. MXNet's ``priority`` is ignored: the class comes from the key's layer.
        """
        if isinstance(key, (list, tuple)):
            outs = out if out is not None else [None] * len(key)
            for k, v, o in zip(key, value, outs, strict=True):
                self.pushpull(k, v, o, priority)
            return
        layer = self.layer_of(key)
        values = _as_list(value)
        x = _to_numpy(values[0])
        for v in values[1:]:
            x += v.asnumpy()
        if x.size:
            self.collectives.allreduce(x, mode=self.mode, tag=key, layer=layer, num_layers=self.num_layers)
        for o in _as_list(value if out is None else out):
            o[:] = x

    def resync(self, params: Any) -> None:
        """Broadcast rank 0's parameters to every worker, reliably (PS mode with a lossy pull).

        ``params`` is a gluon ``ParameterDict``, or an iterable of ``Parameter`` or NDArray.
        Call it on every rank at the same point, outside ``autograd.record()``.
        """
        items: Iterable[Any] = params.values() if hasattr(params, "values") else params
        for p in items:
            arrays = p.list_data() if hasattr(p, "list_data") else [p]
            x = _to_numpy(arrays[0])
            if x.size:
                self.collectives.broadcast(x, root=0)
            for a in arrays:
                a[:] = x

    # -- what the Trainer keeps for itself ----------------------------------------------
    def set_optimizer(self, optimizer: Any) -> None:
        raise NotImplementedError("the DLCP KVStore does not run the optimizer: use gluon.Trainer's own update")

    def save_optimizer_states(self, fname: str, dump_optimizer: bool = False) -> None:
        raise NotImplementedError("the optimizer lives in gluon.Trainer: use Trainer.save_states")

    def load_optimizer_states(self, fname: str) -> None:
        raise NotImplementedError("the optimizer lives in gluon.Trainer: use Trainer.load_states")

    def set_gradient_compression(self, compression_params: Any) -> None:
        raise NotImplementedError("the DLCP KVStore does not compress gradients (its loss bounds do the saving)")

    # -- lifetime ---------------------------------------------------------------------
    def close(self) -> None:
        """Close the session if this KVStore opened it."""
        if self._owns_session:
            self.session.close()

    def __enter__(self) -> DLCP:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _to_numpy(value: Any) -> np.ndarray:
    """A private, writeable, C-contiguous copy (``asnumpy`` waits for pending writes to ``value``)."""
    return np.ascontiguousarray(value.asnumpy())


__all__ = ["DLCP", "LaunchEnv", "Mode"]
