"""Traffic as plain data: messages and training jobs a scenario asks for, drawn with a seeded RNG.

Background flow sizes follow the data-center distributions of :mod:`dlcp.flow_sizes` (web search and
data mining), the same tables the testbed's traffic generator draws from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dlcp import flow_sizes
from dlcp.policy import Policy
from dlcp.protocol import MessageKind
from dlcp.simulations import models
from dlcp.simulations.scenario import Features, Workload

TCP, DLCP = 1, 0


@dataclass(frozen=True)
class Message:
    src: int
    dst: int
    start_s: float
    bytes: int
    transport: int
    tag: str
    kind: int = 0
    layer: int = 0
    priority: int = 0
    loss_bound: float = 0.0
    drop_fractions: tuple[float, ...] = (1.0, 0.0, 0.0, 0.0)


PS_MODE, RING_MODE = 0, 1
"""A job's ``mode``: through parameter servers, or ring all-reduce (``JobSpec.mode`` in simulations/cpp/api.h)."""


@dataclass(frozen=True)
class Job:
    mode: int  # PS_MODE or RING_MODE
    transport: int
    tag: str
    workers: tuple[int, ...]
    servers: tuple[int, ...]
    layer_bytes: tuple[int, ...]
    forward_s: tuple[float, ...]
    backward_s: tuple[float, ...]
    priority: tuple[int, ...]
    push_bound: tuple[float, ...]
    pull_bound: tuple[float, ...]
    push_drop_fractions: tuple[float, ...]
    pull_drop_fractions: tuple[float, ...]
    iterations: int
    start_s: float


@dataclass
class Traffic:
    messages: list[Message] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)

    def tag_id(self, tag: str) -> int:
        if tag not in self.tags:
            self.tags.append(tag)
        return self.tags.index(tag)


def drop_fractions(policy: Policy, kind: MessageKind) -> tuple[float, ...]:
    """Fractions of a message's packets in drop classes 0..3 under the policy's quantile cuts."""
    cuts = policy.kinds[kind].drop_quantiles
    out = [0.0, 0.0, 0.0, 0.0]
    prev = 0.0
    for i, c in enumerate(cuts):  # below the first cut: the highest class
        out[len(cuts) - i] = c - prev
        prev = c
    out[0] = 1.0 - prev
    return tuple(out)


def generate(
    workloads: tuple[Workload, ...],
    hosts: int,
    host_bps: float,
    features: Features,
    policy: Policy,
    seed: int,
) -> Traffic:
    """The scenario's traffic as its baseline sends it (``features``: transport, priority, loss bound)."""
    rng = np.random.default_rng(seed)
    traffic = Traffic()
    f = features
    gradient_transport = DLCP if f.dlcp_transport else TCP
    background_transport = DLCP if f.srpt else TCP  # pFabric carries every flow
    for w in workloads:
        start = w.start_us * 1e-6
        if w.type in ("incast", "permutation"):
            kind = MessageKind[w.kind.upper()]
            prio = int(policy.priority_of_layers(w.layer, w.num_layers)) if f.priority else 0
            meta = dict(
                transport=TCP if w.transport == "tcp" else gradient_transport,
                tag=w.tag or "gradient",
                kind=int(kind),
                layer=w.layer,
                priority=prio,
                loss_bound=policy.loss_bound(kind, w.layer) if f.bounded_loss else 0.0,
                drop_fractions=drop_fractions(policy, kind),
            )
            for r in range(w.rounds):
                t = start + r * w.gap_us * 1e-6
                if w.type == "incast":
                    dst = w.receiver if w.receiver >= 0 else hosts - 1
                    others = [h for h in range(hosts) if h != dst]
                    for src in rng.choice(others, size=w.senders, replace=False):
                        traffic.messages.append(Message(int(src), dst, t, w.bytes, **meta))  # type: ignore[arg-type]
                else:
                    perm = rng.permutation(hosts)
                    while np.any(perm == np.arange(hosts)):
                        perm = rng.permutation(hosts)
                    for src in range(hosts):
                        traffic.messages.append(Message(src, int(perm[src]), t, w.bytes, **meta))  # type: ignore[arg-type]
        elif w.type == "background":
            # Poisson arrivals per host at `load` of its link, to uniformly random other hosts.
            rate = w.load * host_bps / 8 / flow_sizes.mean(w.distribution, w.max_flow_bytes)
            end = start + w.duration_us * 1e-6
            for src in range(hosts):
                t = start + rng.exponential(1 / rate)
                while t < end:
                    dst = int(rng.integers(hosts - 1))
                    dst += dst >= src
                    size = int(flow_sizes.sizes(w.distribution, rng.random(1), w.max_flow_bytes)[0])
                    traffic.messages.append(Message(src, dst, t, size, background_transport, w.tag or "background"))
                    t += rng.exponential(1 / rate)
        else:
            traffic.jobs.append(_job(w, gradient_transport, policy, start, f))
    traffic.messages.sort(key=lambda m: m.start_s)
    return traffic


def buckets(model: str, bucket_bytes: int, partition_bytes: int = 0) -> list[tuple[int, float]]:
    """(bytes, forward FLOPs per sample) per bucket of consecutive layers, forward order (fp32 gradients).

    Layers of more than ``partition_bytes`` (if set) are first cut into parts of at most that size, their
    FLOPs shared by bytes.
    """
    out: list[tuple[int, float]] = []
    cur_b, cur_f = 0, 0.0
    for nbytes, flops in _partitions(model, partition_bytes):
        cur_b += nbytes
        cur_f += flops
        if cur_b >= bucket_bytes:
            out.append((cur_b, cur_f))
            cur_b, cur_f = 0, 0.0
    if cur_b:
        out.append((cur_b, cur_f))
    return out


def _partitions(model: str, partition_bytes: int) -> list[tuple[int, float]]:
    out: list[tuple[int, float]] = []
    for layer in models.layers(model):
        nbytes = layer.params * 4
        n = -(-nbytes // partition_bytes) if partition_bytes else 1
        for i in range(n):
            part = nbytes * (i + 1) // n - nbytes * i // n
            out.append((part, layer.flops * part / nbytes if nbytes else layer.flops / n))
    return out


def _job(w: Workload, transport: int, policy: Policy, start: float, f: Features) -> Job:
    parts = (
        [(b, float(b)) for b in w.layer_bytes] if w.layer_bytes else buckets(w.model, w.bucket_bytes, w.partition_bytes)
    )
    if w.max_buckets:
        parts = parts[: w.max_buckets]
    n = len(parts)
    fwd = tuple(f * w.batch / (w.gpu_tflops * 1e12) for _, f in parts)
    if w.compute_us or w.layer_bytes:
        total = sum(f for _, f in parts) or 1.0  # forward + backward (2x) = compute_us, by FLOPs
        fwd = tuple(w.compute_us * 1e-6 / 3 * f / total for _, f in parts)
    ps = w.type == "ps"
    first, second = (MessageKind.PUSH, MessageKind.PULL) if ps else (MessageKind.REDUCE_SCATTER, MessageKind.ALL_GATHER)
    order = w.hosts or tuple(range(w.first_host, w.first_host + w.workers + (w.servers if ps else 0)))
    workers, servers = order[: w.workers], order[w.workers :]
    return Job(
        mode=PS_MODE if ps else RING_MODE,
        transport=transport,
        tag=w.tag or w.type,
        workers=workers,
        servers=servers,
        layer_bytes=tuple(b for b, _ in parts),
        forward_s=fwd,
        backward_s=tuple(2 * f for f in fwd),  # backward costs about twice the forward pass
        priority=tuple(int(p) if f.priority else 0 for p in policy.priority_of_layers(np.arange(n), n)),
        push_bound=tuple(policy.loss_bound(first, i) if f.bounded_loss else 0.0 for i in range(n)),
        pull_bound=tuple(policy.loss_bound(second, i) if f.bounded_loss else 0.0 for i in range(n)),
        push_drop_fractions=drop_fractions(policy, first),
        pull_drop_fractions=drop_fractions(policy, second),
        iterations=w.iterations,
        start_s=start,
    )
