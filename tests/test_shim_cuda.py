"""The DDP hook with CUDA buckets: pinned host buffers reused, side streams ordered by events, never the default
stream synchronised; and ``dlcp train --device cuda``.

The buffer bookkeeping, the dispatch and the refusal run anywhere. The rest needs a CUDA device and skips,
saying so, where ``torch.cuda.is_available()`` is False.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
import torch

from dlcp.apps.launch import spawn
from dlcp.apps.train.trainer import TrainConfig, _rank_main
from dlcp.checks import BadValue
from dlcp.cli.main import main
from dlcp.config import TransportConfig
from dlcp.host.collectives import Collectives
from dlcp.host.local import local_endpoints, run_ranks
from dlcp.host.session import Session
from dlcp.host.shim.torch import DLCPState, HostBuffers, dlcp_hook

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device: torch.cuda.is_available() is False")
SLEEP_CYCLES = 2_000_000_000
"""torch.cuda._sleep: about a second of GPU clock cycles; each test checks the stream was still busy."""


def local_sessions(world: int) -> list[Session]:
    eps = local_endpoints(world, transport=TransportConfig(port=0, payload_bytes=1024))
    return [Session(None, ep, Collectives(ep, world)) for ep in eps]  # type: ignore[arg-type]


class Bucket:
    """What the hook reads of DDP's GradBucket."""

    def __init__(self, tensor: Any, index: int = 0, last: bool = True) -> None:
        self.tensor, self.i, self.last = tensor, index, last

    def buffer(self) -> Any:
        return self.tensor

    def is_last(self) -> bool:
        return self.last

    def index(self) -> int:
        return self.i

    def parameters(self) -> list[torch.Tensor]:
        return []


# -- anywhere ---------------------------------------------------------------------------------------------------


def test_host_buffers_are_kept_per_bucket_and_reused_across_iterations() -> None:
    buffers = HostBuffers(pin=False)
    grads = {0: torch.zeros(1000), 1: torch.zeros(10, dtype=torch.float64)}
    first = {k: buffers.get(k, g) for k, g in grads.items()}
    for _ in range(20):  # iterations: the same bucket gets the same memory, nothing new is made
        for k, g in grads.items():
            assert buffers.get(k, g) is first[k]
    assert buffers.allocations == 2 and len(buffers) == 2
    assert first[0].shape == (1000,) and first[1].dtype == torch.float64
    # DDP rebuilds its buckets once: a bucket of another size or type gets a new buffer, which is kept in turn.
    rebuilt = buffers.get(0, torch.zeros(3, 4))
    assert rebuilt is not first[0] and rebuilt.numel() == 12 and buffers.allocations == 3
    assert buffers.get(0, torch.zeros(12)) is rebuilt
    assert buffers.get(1, torch.zeros(10, dtype=torch.float32)).dtype == torch.float32
    assert buffers.allocations == 4 and len(buffers) == 2


def test_cpu_buckets_take_the_cpu_path_and_never_touch_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU bucket goes to :meth:`DLCPState.submit`, as before; nothing of the CUDA path runs."""

    def no_cuda(*_a: object, **_k: object) -> None:
        raise AssertionError("the CPU path touched the CUDA path")

    monkeypatch.setattr(DLCPState, "cuda_copies", no_cuda)
    monkeypatch.setattr(DLCPState, "submit_cuda", no_cuda)
    sessions = local_sessions(2)
    states = [DLCPState(s) for s in sessions]
    try:
        buckets = [torch.full((3000,), float(r + 1)) for r in range(2)]
        out = run_ranks(lambda r: dlcp_hook(states[r], Bucket(buckets[r], index=3)).wait(), 2)  # type: ignore[arg-type]
        for r, t in enumerate(out):
            assert t.data_ptr() == buckets[r].data_ptr() and torch.equal(
                t, torch.full((3000,), 1.5)
            )  # in place, the mean
    finally:
        for st, s in zip(states, sessions, strict=True):
            st.close()
            s.close()


def test_cuda_buckets_go_to_the_side_stream_path_with_their_index(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[object, int, object, object]] = []

    class OnCuda:
        is_cuda = True

    def submit_cuda(_self: DLCPState, tensor: object, layer: int, tag: object, key: object) -> str:
        seen.append((tensor, layer, tag, key))
        return "future"

    def submit(*_a: object, **_k: object) -> None:
        raise AssertionError("a CUDA bucket took the CPU path")

    monkeypatch.setattr(DLCPState, "submit_cuda", submit_cuda)
    monkeypatch.setattr(DLCPState, "submit", submit)
    (session,) = local_sessions(1)
    state = DLCPState(session)
    try:
        tensor = OnCuda()
        assert dlcp_hook(state, Bucket(tensor, index=7)) == "future"  # type: ignore[arg-type, comparison-overlap]
        assert seen == [(tensor, 0, ("bucket", 7), 7)]
    finally:
        state.close()
        session.close()


@pytest.mark.skipif(CUDA, reason="checks the refusal where CUDA is absent; this machine has it")
def test_train_device_cuda_is_refused_with_the_reason_where_cuda_is_absent(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(BadValue, match=r"--device: got 'cuda', CUDA is not available here .*is_available\(\) is False"):
        TrainConfig(device="cuda")
    assert main(["train", "--device", "cuda", "--workers", "2"]) == 2
    assert "CUDA is not available here" in capsys.readouterr().err


def test_train_device_names_the_choices() -> None:
    with pytest.raises(BadValue, match="--device"):
        TrainConfig(device="tpu")
    assert TrainConfig().device == "cpu"


# -- on a CUDA device -------------------------------------------------------------------------------------------


def _pair(fn: Any) -> list[Any]:
    """``fn(rank, state)`` for two ranks (threads) whose states exchange over loopback."""
    sessions = local_sessions(2)
    states = [DLCPState(s, mode="ring") for s in sessions]
    try:
        out = run_ranks(lambda r: fn(r, states[r]), 2, timeout_s=120)
    finally:
        for st, s in zip(states, sessions, strict=True):
            st.close()
            s.close()
    for r in out:
        if isinstance(r, BaseException):
            raise r
    return out


@needs_cuda
def test_a_bucket_still_being_written_when_the_hook_is_called_is_copied_after_the_write() -> None:
    """The producing stream is still asleep, with the gradient's last write queued behind, when the hook is called:
    the copy to the host waits for the event recorded on that stream, so the result counts the write."""

    def rank(r: int, state: DLCPState) -> tuple[bool, torch.Tensor]:
        producer = torch.cuda.Stream()
        with torch.cuda.stream(producer):
            grad = torch.full((1 << 16,), 0.0, device="cuda")
            dlcp_hook(state, Bucket(grad, index=0)).wait()  # type: ignore[arg-type]  # makes the pinned buffer
            grad.fill_(float(r + 1))
            torch.cuda._sleep(SLEEP_CYCLES)
            grad.add_(10.0)  # the last write, queued behind the sleep
            fut = dlcp_hook(state, Bucket(grad, index=0))  # type: ignore[arg-type]
            busy = not producer.query()  # the premise: the write had not run when the hook was called
            fut.wait()  # makes this (the consumer's) stream wait for the copy back
            return busy, grad.cpu()

    out = _pair(rank)
    for busy, result in out:
        assert busy, "the producing stream finished before the hook: raise SLEEP_CYCLES"
        assert torch.equal(result, torch.full((1 << 16,), (11.0 + 12.0) / 2))


@needs_cuda
def test_the_hook_never_synchronises_the_default_stream() -> None:
    """A second of work on the default stream, queued first, is still running when the future completes: neither
    the hook's call nor its thread waited for the default stream (the old ``.to("cpu")`` on the hook's thread
    did). The buckets come from a stream of their own, as a bucket of a side-stream backward would."""
    torch.cuda.init()

    def rank(r: int, state: DLCPState) -> tuple[float, bool, torch.Tensor]:
        producer = torch.cuda.Stream()
        with torch.cuda.stream(producer):
            grad = torch.full((1 << 16,), 0.0, device="cuda")
            # A first exchange makes the bucket's pinned buffer (a page-locked allocation may serialise the GPU's
            # streams); the measured one reuses it, as every iteration after the first does.
            dlcp_hook(state, Bucket(grad, index=0)).wait()  # type: ignore[arg-type]
            grad.fill_(float(r + 1))
        producer.synchronize()
        default = torch.cuda.default_stream()
        with torch.cuda.stream(default):
            torch.cuda._sleep(SLEEP_CYCLES)
        with torch.cuda.stream(producer):
            t0 = time.monotonic()
            fut = dlcp_hook(state, Bucket(grad, index=0))  # type: ignore[arg-type]
            call_s = time.monotonic() - t0
            deadline = time.monotonic() + 60
            while not fut.done() and time.monotonic() < deadline:
                time.sleep(0.001)
            default_still_busy = fut.done() and not default.query()
            fut.wait()
            return call_s, default_still_busy, grad.cpu()

    torch.cuda.synchronize()
    out = _pair(rank)
    for call_s, default_still_busy, result in out:
        assert default_still_busy, "the future completed only after the default stream's work (or never)"
        assert call_s < 0.2, f"the hook's call took {call_s:.3f} s"
        assert torch.equal(result, torch.full((1 << 16,), 1.5))


@needs_cuda
def test_cuda_buckets_reuse_one_pinned_buffer_per_bucket_across_iterations() -> None:
    def rank(r: int, state: DLCPState) -> tuple[int, bool, int]:
        grad = torch.empty(1 << 15, device="cuda")
        for i in range(10):
            grad.fill_(float(r + i))
            dlcp_hook(state, Bucket(grad, index=0)).wait()  # type: ignore[arg-type]
            assert torch.equal(grad.cpu(), torch.full((1 << 15,), i + 0.5))
        copies = state.cuda_copies(grad.device)
        host = copies.buffers.get(0, grad)
        return copies.buffers.allocations, host.is_pinned(), len(copies.buffers)

    assert _pair(rank) == [(1, True, 1)] * 2


@needs_cuda
@pytest.mark.slow
def test_dlcp_with_cuda_tensors_is_bit_identical_to_gloo_in_ring_mode() -> None:
    """Two ranks sharing the GPU, DDP on CUDA: gloo's all-reduce (DDP's default) against DLCP's ring with a loss
    bound of 0. With two ranks the sum has one order and halving is exact, so the parameters must be equal bit
    for bit."""
    base = {"workers": 2, "device": "cuda", "epochs": 1, "train_samples": 1024, "test_samples": 256,
            "batch_size": 32, "loss_bound": 0.0}  # fmt: skip
    gloo = spawn(_rank_main, 2, TrainConfig(backend="gloo", **base), timeout_s=300)  # type: ignore[arg-type]
    dlcp = spawn(_rank_main, 2, TrainConfig(backend="dlcp", mode="ring", **base), timeout_s=300)  # type: ignore[arg-type]
    assert len(gloo[0]["times"]) == len(dlcp[0]["times"]) == 16
    for g, d in zip(gloo, dlcp, strict=True):
        assert d["param_digest"] == g["param_digest"]
        assert np.array_equal(d["sample"], g["sample"])
    assert dlcp[0]["param_digest"] == dlcp[1]["param_digest"]
