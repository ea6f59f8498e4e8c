"""``dlcp demo``: the most complete end-to-end path available.

By default it trains one job three ways on loopback (gloo; DLCP without loss;
DLCP under injected loss), prints a side-by-side table, and saves a plot of the
iteration times and the raw JSON (``--out``).

``dlcp demo --core`` runs the in-process core path instead: a synthetic model's
gradients are classified by the policy, cut into packets, pushed over an
in-memory congested link that sheds packets (selectively by drop class, or
uniformly), assembled with bounded loss, and retransmitted where the loss
exceeds the bound. It prints how much gradient mass each strategy lost.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

import numpy as np

from dlcp import checks, resources
from dlcp.assembler import Assembler
from dlcp.lossy_link import choose_losses
from dlcp.message import MessageKey, MessageSpec
from dlcp.models import MODELS
from dlcp.packetizer import build_packets
from dlcp.policy import KindPolicy, Policy
from dlcp.protocol import MessageKind

log = logging.getLogger(__name__)


class _Given(argparse.Action):
    """Stores the value and records that the flag was given (``args.given``): a flag of the other mode is refused."""

    def __call__(
        self, parser: argparse.ArgumentParser, ns: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        setattr(ns, self.dest, values)
        ns.given = ns.given | {self.option_strings[0]}


_TRAINING_ONLY = ("--workers", "--model", "--epochs", "--samples", "--inject-loss", "--out")
_CORE_ONLY = ("--layers", "--elems", "--congestion-loss")
_TESTBED_ONLY = ("--fabric", "--ways", "--switch", "--repeat")


def _check_mode(args: argparse.Namespace) -> None:
    """A flag that the chosen demo does not read is refused, not ignored (its value would never be checked)."""
    unused, valid = (
        (_CORE_ONLY, "applies only with --core")
        if not args.core
        else (_TRAINING_ONLY, "applies only without --core (the training demo)")
    )
    if args.core and args.testbed:
        raise checks.BadValue("--testbed", True, "applies only without --core (the training demo)")
    if not args.testbed:
        for flag in _TESTBED_ONLY:
            if flag in args.given:
                raise checks.BadValue(flag, getattr(args, flag[2:]), "applies only with --testbed")
    for flag in unused:
        if flag in args.given:
            raise checks.BadValue(flag, getattr(args, flag[2:].replace("-", "_")), valid)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "demo",
        help="run the end-to-end demo",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--core", action="store_true", help="run the in-process core demo (no training)")
    p.add_argument(
        "--testbed",
        action="store_true",
        help="train on an emulated cluster (network namespaces, DLCP switches, incast; needs root): "
        "DDP's default (gloo all-reduce) vs full DLCP ring and PS (--ways), taking turns --repeat times",
    )
    train = p.add_argument_group("training (without --core)")
    train.add_argument("--workers", type=int, default=2, action=_Given, help="worker processes")
    train.add_argument(
        "--model", choices=tuple(MODELS), default="mlp-large", action=_Given, help="model (dlcp train --model)"
    )
    train.add_argument("--epochs", type=int, default=1, action=_Given, help="epochs")
    train.add_argument("--samples", type=int, default=4096, action=_Given, help="training samples")
    train.add_argument("--inject-loss", type=float, default=0.01, action=_Given, help="injected loss of the lossy run")
    train.add_argument("--out", default="out/demo", action=_Given, help="folder for demo.json and iteration_times.png")
    tb = p.add_argument_group("testbed (with --testbed)")
    tb.add_argument(
        "--fabric", choices=("star", "leaf-spine"), default="star", action=_Given,
        help="one switch, or 2 leaves and 2 spines (the PS on one leaf, traffic from the other sprayed over both)",
    )  # fmt: skip
    tb.add_argument(
        "--switch", choices=("dlcp", "bmv2"), default="dlcp", action=_Given,
        help="DLCP's software switch, or BMv2 simple_switch_grpc where installed (about 5k packets/s: slow)",
    )  # fmt: skip
    tb.add_argument(
        "--ways", default="gloo,ring,ps", action=_Given,
        help="which runs, in order (comma-separated): gloo (DDP's default: gloo all-reduce, the baseline), ring and "
        "ps (full DLCP), ring-off and ps-off (DLCP with the switch features off), gloo-ps (a PS over gloo's TCP)",
    )  # fmt: skip
    tb.add_argument(
        "--repeat", type=int, default=3, action=_Given,
        help="turns of every way (the table and the verdict give medians over them)",
    )  # fmt: skip
    core = p.add_argument_group("core (with --core)")
    core.add_argument("--layers", type=int, default=8, action=_Given, help="layers of the synthetic model")
    core.add_argument("--elems", type=int, default=400_000, action=_Given, help="gradient elements per layer")
    core.add_argument(
        "--congestion-loss",
        type=float,
        nargs="+",
        default=[0.005, 0.01, 0.02],
        action=_Given,
        help="fractions of packets the link sheds",
    )
    p.add_argument("--loss-bound", type=float, default=0.01, help="loss bound p of gradient pushes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(given=frozenset())
    p.set_defaults(func=run)


def _one_strategy(grads: list[np.ndarray], policy: Policy, loss: float, selective: bool, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    asm = Assembler()
    asm.add_job(1, 1234)
    epp = 2048
    retransmitted = lost_packets = 0
    lost_mass = 0.0
    total_mass = 0.0
    for layer, g in enumerate(grads):
        spec = MessageSpec(
            MessageKey(1, 0, layer, 0), MessageKind.PUSH, g.size, epp, layer=layer,
            loss_bound=policy.loss_bound(MessageKind.PUSH, layer),
        )  # fmt: skip
        prio, drops = policy.classify(g, epp, MessageKind.PUSH, layer, len(grads))
        out = np.zeros_like(g)
        msg = asm.expect(spec, out)
        batch = build_packets(spec, g, token=1234, priority=prio, drop_classes=drops)
        dropped = set(choose_losses(drops, loss, rng, selective).tolist())
        for i, pkt in enumerate(batch.packets()):
            if i not in dropped:
                asm.ingest(pkt)
        asm.on_probe(spec.key)
        if not msg.done:  # over the bound: the receiver's bitmap asks for the rest
            missing = msg.missing_seqs()
            retransmitted += missing.size
            for pkt in build_packets(spec, g, token=1234, priority=policy.control_class, seqs=missing,
                                     retransmit=True).packets():  # fmt: skip
                asm.ingest(pkt)
        lost_packets += int(msg.missing_seqs().size)
        lost_mass += float(np.abs(g - out).sum())
        total_mass += float(np.abs(g).sum())
    stats = asm.stats.as_dict()
    return {
        "strategy": "selective" if selective else "uniform",
        "loss_fraction_accepted": stats["loss_fraction"],
        "gradient_mass_lost": lost_mass / total_mass if total_mass else 0.0,
        "packets_lost": lost_packets,
        "packets_retransmitted": retransmitted,
        "loss_fraction_by_layer": stats["loss_fraction_by_layer"],
    }


_CORE_BYTES_PER_ELEMENT = 40
"""Peak memory of the core demo per gradient element: the gradients, their float64
draft, the received copy, the packets and the policy's scratch."""


def _check_core(args: argparse.Namespace) -> None:
    """Refuse values the core demo cannot run with, before it starts (:class:`~dlcp.checks.BadValue`)."""
    checks.at_least("--layers", args.layers, 1)
    checks.at_least("--elems", args.elems, 1)
    if not args.congestion_loss:
        raise checks.BadValue("--congestion-loss", args.congestion_loss, "must name at least one fraction")
    for q in args.congestion_loss:
        checks.fraction("--congestion-loss", q)
    checks.fraction("--loss-bound", args.loss_bound)
    checks.seed("--seed", args.seed)
    need = _CORE_BYTES_PER_ELEMENT * args.layers * args.elems
    fits = (resources.available_memory() or 0) // (_CORE_BYTES_PER_ELEMENT * args.layers)
    resources.check_memory(
        "--elems", args.elems, need, f"{args.layers} layers x {_CORE_BYTES_PER_ELEMENT} bytes per element",
        f"at most {fits} fit with --layers {args.layers}",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    _check_mode(args)
    if args.testbed and not args.core:
        from dlcp.cli.testbed_demo import run_testbed_demo

        return run_testbed_demo(args)
    if not args.core:
        from dlcp.cli.train_demo import run_training_demo

        return run_training_demo(args)
    _check_core(args)
    rng = np.random.default_rng(args.seed)
    # Gradients with channel structure, as in real layers: each 512-element row (an
    # output channel) has its own log-normal scale, so packet magnitudes differ widely.
    grads = []
    for i in range(args.layers):
        rows = -(-args.elems // 512)
        scale = np.repeat(rng.lognormal(mean=-(1 + i / args.layers), sigma=1.5, size=rows), 512)[: args.elems]
        grads.append((rng.standard_normal(args.elems) * scale).astype(np.float32))
    policy = Policy(
        kinds={**Policy().kinds, MessageKind.PUSH: KindPolicy(loss_bound=args.loss_bound, drop_quantiles=(0.5,))}
    )
    results = [
        _one_strategy(grads, policy, q, selective, args.seed) | {"congestion_loss": q}
        for q in args.congestion_loss
        for selective in (False, True)
    ]
    conclusion = conclude(results, args.loss_bound)
    if args.json:
        out = {
            "results": results,
            "conclusion": conclusion,
            "config": vars(args) | {"func": None, "given": sorted(args.given)},
        }
        sys.stdout.write(json.dumps(out) + "\n")
        return 0
    sys.stdout.write(
        f"DLCP core demo: {args.layers} layers x {args.elems} elements, gradient loss bound {args.loss_bound:.1%}\n\n"
        f"{'link sheds':>10} {'strategy':<10} {'accepted loss':>14} {'grad mass lost':>15} {'packets lost':>13}"
        f" {'retransmitted':>14}\n"
    )
    for r in results:
        sys.stdout.write(
            f"{r['congestion_loss']:>10.1%} {r['strategy']:<10} {r['loss_fraction_accepted']:>14.3%}"
            f" {r['gradient_mass_lost']:>15.4%} {r['packets_lost']:>13} {r['packets_retransmitted']:>14}\n"
        )
    sys.stdout.write("\n" + "\n".join(conclusion) + "\n")
    return 0


def conclude(results: list[dict[str, Any]], bound: float) -> list[str]:
    """What the table shows, read from its numbers: selective against uniform at each loss rate, and the bound."""
    pairs: dict[float, dict[str, dict[str, Any]]] = {}
    for r in results:
        pairs.setdefault(r["congestion_loss"], {})[r["strategy"]] = r
    less = [q for q, p in pairs.items() if p["selective"]["gradient_mass_lost"] < p["uniform"]["gradient_mass_lost"]]
    more = [q for q, p in pairs.items() if p["selective"]["gradient_mass_lost"] > p["uniform"]["gradient_mass_lost"]]
    rates = ", ".join
    lines = []
    lost = [r["packets_lost"] for r in results]
    if max(lost) == 0:
        lines.append("No packet stayed lost in any run: there is no gradient mass to compare.")
    elif len(less) == len(pairs):
        sel = [p["selective"]["gradient_mass_lost"] for p in pairs.values()]
        ratios = [p["uniform"]["gradient_mass_lost"] / s for p, s in zip(pairs.values(), sel, strict=True) if s]
        by = f" ({min(ratios):.2f}x to {max(ratios):.2f}x less)" if len(ratios) == len(sel) else ""
        lines.append(
            f"Selective dropping lost less gradient mass than uniform dropping at every link loss rate{by}:"
            " it sheds the smallest-magnitude packets first."
        )
    elif not less:
        lines.append("Selective dropping lost no less gradient mass than uniform dropping at any link loss rate here.")
    else:
        lines.append(
            f"Selective dropping lost less gradient mass than uniform dropping at {rates(f'{q:.1%}' for q in less)}"
            + (f", and more at {rates(f'{q:.1%}' for q in more)}." if more else ", and as much at the others.")
        )
    if 0 < max(lost) and len(less) < len(pairs):
        count = f"{min(lost)}" if min(lost) == max(lost) else f"{min(lost)} to {max(lost)}"
        lines.append(
            f"Only {count} packets stayed lost per run, so which packets the link hit decides"
            " these figures; other seeds (--seed), a higher --loss-bound or more --elems show how much they vary."
        )
    worst = max(max(r["loss_fraction_by_layer"].values(), default=0.0) for r in results)
    retransmitted = sum(r["packets_retransmitted"] for r in results)
    if worst <= bound:
        lines.append(
            f"Every layer's accepted loss stayed within the {bound:.1%} bound"
            + ("; the loss beyond it was retransmitted." if retransmitted else "; nothing needed retransmitting.")
        )
    else:
        lines.append(f"A layer accepted {worst:.3%} loss, above the {bound:.1%} bound.")
    return lines
