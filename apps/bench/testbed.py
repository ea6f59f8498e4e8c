"""``dlcp testbed bench``: DLCP against DDP's default (gloo's all-reduce) on the emulated cluster, in the same run.

Every scenario runs five ways (:mod:`dlcp.apps.testbed.scenario`): gloo all-reduce (DDP's default, the baseline), full
DLCP ring, full DLCP PS, and DLCP ring and PS with the switch features off; ``extra_gloo_ps`` adds a parameter
server over gloo's point-to-point TCP as an extra row (not a baseline). The scenarios:

* ``incast``: a star; background web-search flows and incast toward h1 (the parameter server), whose
  200 Mbit/s link is the bottleneck;
* ``loss``: 1% random loss on h1's link, at the hosts' 1 Gbit/s, no other traffic;
* ``leaf-spine``: 2 leaves, 2 spines; the leaf-spine links (200 Mbit/s) are the bottleneck, not the host links
  (1 Gbit/s); 4 workers alternate between the leaves (h1, h3, h2, h4), so the ring's data crosses the spines,
  two flows each way: TCP's per-flow ECMP hashing may put both on one spine, DLCP sprays every packet over both;
* ``loss-200mbit`` (only when named): ``loss`` with that link at 200 Mbit/s;
* ``incast-resnet`` (only when named): ``incast`` training ``resnet18`` (0.70M parameters in about 6 DDP
  buckets), full DLCP ring and PS each with the layer priorities on and off (one priority class, the switch
  features on: :data:`dlcp.apps.testbed.scenario.ONE_CLASS`); it reports how long each iteration waits for its
  front layers' bucket (``front_wait_p50_s``, :func:`dlcp.host.timeline.front_bucket_waits`) and its p50.

Each scenario's fabric comes up once; its ways then take turns, ``repeat`` times, so that a slow moment of the
machine hits every way alike. Each ratio is computed within a repeat (:mod:`dlcp.apps.bench.compare`), over the
repeats in which both sides completed; the report gives their median and range, and for each goal in how many
repeats it holds.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlcp.apps.bench.compare import Goal, Ratio, best_mode, missing_runs, ratios
from dlcp.apps.testbed.scenario import (
    GLOO_ALLREDUCE,
    GLOO_PS,
    PS,
    PS_1CLASS,
    PS_OFF,
    RING,
    RING_1CLASS,
    RING_OFF,
    Scenario,
    Way,
    run_scenario,
)
from dlcp.apps.train.trainer import TrainConfig

WAYS = (GLOO_ALLREDUCE, RING, PS, RING_OFF, PS_OFF)
"""What every scenario runs; the first is the baseline."""

SCENARIOS: dict[str, tuple[Scenario, tuple[Way, ...]]] = {
    "incast": (Scenario(name="bincast"), WAYS),
    "loss": (
        Scenario(name="bloss", bottleneck_rate="1gbit", bottleneck_loss=0.01, traffic_load=0.0, incast=0),
        WAYS,
    ),
    "leaf-spine": (
        Scenario(
            name="bleaf",
            workers=4,
            topology="leaf-spine",
            bottleneck_rate=None,
            fabric_rate="200mbit",
            fabric_buffer="256KiB",
            alternate_leaves=True,
            background_host=False,
            traffic_load=0.0,
            incast=0,
        ),
        WAYS,
    ),
    "loss-200mbit": (
        Scenario(name="blosb", bottleneck_loss=0.01, traffic_load=0.0, incast=0),
        WAYS,
    ),
    "incast-resnet": (
        Scenario(name="bresn", model="resnet18", one_class_jobs=True),
        (RING, RING_1CLASS, PS, PS_1CLASS),
    ),
}
DEFAULT_SCENARIOS = ("incast", "loss", "leaf-spine")
"""What a plain ``dlcp testbed bench`` runs (``--scenario`` names one; ``loss-200mbit`` and ``incast-resnet`` only
when named)."""

SWITCHES = ("dlcp", "bmv2")
RATE_PROFILES = ("full", "bmv2")
"""``full``: the scenarios as above. ``bmv2``: the same scenarios at link rates BMv2 carries (:data:`BMV2_RATES`)."""

BMV2_RATES: dict[str, dict[str, Any]] = {
    "incast": {"host_rate": "50mbit", "bottleneck_rate": "10mbit", "bottleneck_buffer": "64KiB", "incast": 1,
               "incast_bytes": 16_000},
    "leaf-spine": {"host_rate": "50mbit", "fabric_rate": "10mbit", "fabric_buffer": "64KiB"},
}  # fmt: skip
"""The scenarios BMv2 can run, at rates it carries: a twentieth of the full rates. BMv2 ``simple_switch_grpc``
forwards a few thousand packets/s on an idle core; in the bench it shares the 2 cores with three or four ranks and
the background traffic, and at 40 Mbit/s to h1 (and 200 Mbit/s hosts, 1,700 incast datagrams/s) it received 2,000-
3,000 frames/s and lost a third to half of them at its input (``input_lost``), the bottleneck instead of the
links. At 10 Mbit/s a rank sends about 140 frames of 9 KB per second: the star's BMv2 gets about 900 frames/s with
gloo's acknowledgements, and each leaf-spine switch 300-600. Incast: one sender of 16 kB (11 datagrams) every
50 ms, 26% of the 10 Mbit/s link, as three senders of 128 kB take 31% of 200 Mbit/s. Buffers: 64 KiB (52 ms at
10 Mbit/s, seven 9 KB frames, room for a paced burst). The loss scenarios have no BMv2 rates: BMv2 cannot drop at
random."""
BMV2_MODEL = "mlp"
"""The model at BMv2 rates: ~50k parameters, 200 kB of gradients per iteration (one DDP bucket); a ring moves
267-300 kB through each bottleneck port per iteration, 210-240 ms at 10 Mbit/s, as ``mlp-wide``'s 2.4 MB takes
130-250 ms at the full rates."""

_OFF = {
    f"p99_dlcp_{m}_vs_off": Goal("<", 1.0, "below 1 (full DLCP's p99 below the switch-off p99)") for m in ("ring", "ps")
}
GOALS: dict[str, dict[str, Goal]] = {
    "incast": {
        "p99_dlcp_best_vs_gloo_allreduce": Goal("<=", 0.6, "at most 0.60"),
        "p50_dlcp_best_vs_gloo_allreduce": Goal("<=", 0.9, "at most 0.90"),
        "tta_dlcp_best_vs_gloo_allreduce": Goal("<=", 0.85, "at most 0.85"),
        "accuracy_dlcp_best_minus_gloo_allreduce": Goal(">=", -0.005, "at least -0.005"),
        **_OFF,
    },
    "loss": {
        "p99_dlcp_best_vs_gloo_allreduce": Goal("<=", 0.5, "at most 0.50"),
        "p50_dlcp_best_vs_gloo_allreduce": Goal("<=", 1.0, "at most 1.00"),
        **_OFF,
    },
    "leaf-spine": {"p50_dlcp_best_vs_gloo_allreduce": Goal("<=", 0.75, "at most 0.75"), **_OFF},
    "loss-200mbit": dict(_OFF),
    "incast-resnet": {
        **{
            f"front_wait_dlcp_{m}_vs_1class": Goal("<=", 0.8, "at most 0.80 (the front layers' bucket 20% sooner)")
            for m in ("ring", "ps")
        },
        **{f"p50_dlcp_{m}_vs_1class": Goal("<=", 1.0, "at most 1.00 (no cost to p50)") for m in ("ring", "ps")},
    },
}
"""Per scenario, ratio name -> goal. A goal holds when it holds in two thirds of the repeats measured (2 of 3)."""


def scenario_named(name: str, rates: str = "full", switch: str = "dlcp") -> tuple[Scenario, tuple[Way, ...]]:
    """The scenario ``name`` at the ``rates`` profile on ``switch``, and its ways; :class:`ValueError` naming the
    choices for any other name, profile or switch, or a scenario that profile has no rates for."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}: the bench knows {', '.join(SCENARIOS)}")
    if rates not in RATE_PROFILES:
        raise ValueError(f"unknown rates {rates!r}: the bench knows {', '.join(RATE_PROFILES)}")
    if switch not in SWITCHES:
        raise ValueError(f"unknown switch {switch!r}: the bench knows {', '.join(SWITCHES)}")
    if switch == "bmv2" and rates != "bmv2":
        raise ValueError(f"--switch bmv2 runs at --rates bmv2 only: at {rates} rates BMv2, not the links, would be "
                         "the bottleneck")  # fmt: skip
    scenario, ways = SCENARIOS[name]
    if rates == "bmv2":
        if name not in BMV2_RATES:
            raise ValueError(f"scenario {name!r} has no BMv2 rates: BMv2 cannot drop at random (the bench at "
                             f"--rates bmv2 knows {', '.join(BMV2_RATES)})")  # fmt: skip
        scenario = dataclasses.replace(scenario, **BMV2_RATES[name])
    return dataclasses.replace(scenario, switch=switch), ways


def default_scenarios(rates: str) -> tuple[str, ...]:
    """What the bench runs unless ``--scenario`` says: at BMv2 rates, every scenario that has them."""
    return tuple(BMV2_RATES) if rates == "bmv2" else DEFAULT_SCENARIOS


def summary(name: str, runs: dict[str, list[dict[str, Any] | None]], names: dict[str, str]) -> dict[str, Any]:
    """One scenario's ratios (with goals), its best full mode, and the runs that failed."""
    found: list[Ratio] = ratios(name, runs, GOALS.get(name, {}))
    return {
        "best_mode": best_mode(runs),
        "ratios": [r.as_dict() for r in found],
        "missing": missing_runs(runs, names),
    }


def links_text(s: Scenario) -> str:
    """The scenario's link rates in words: hosts, and the bottleneck (to h1, or between leaves and spines)."""
    out = f"hosts {s.host_rate}"
    if s.bottleneck_rate:
        out += f", h1 {s.bottleneck_rate} ({s.bottleneck_buffer})"
    if s.fabric_rate:
        out += f", leaf-spine {s.fabric_rate} ({s.fabric_buffer})"
    return out


def run(
    cfg: TrainConfig,
    folder: Path,
    *,
    repeat: int,
    scenarios: tuple[str, ...] = DEFAULT_SCENARIOS,
    extra_gloo_ps: bool = False,
    switch: str = "dlcp",
    rates: str = "full",
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the scenarios (on ``switch``, at the ``rates`` profile); the report's ``failed`` lists every run in which
    a rank failed (the others are kept)."""
    say = progress or (lambda text: None)
    chosen = {name: scenario_named(name, rates, switch) for name in scenarios}
    report: dict[str, Any] = {
        "config": {"model": cfg.model, "samples": cfg.train_samples, "epochs": cfg.epochs, "loss_bound": cfg.loss_bound,
                   "eval_every": cfg.eval_every, "repeat": repeat, "switch": switch, "rates": rates},
        "scenarios": {}, "ratios": [], "runs": {}, "failed": [], "folder": str(folder),
    }  # fmt: skip
    for name, (scenario, ways) in chosen.items():
        ways = ways + ((GLOO_PS,) if extra_gloo_ps else ())
        # The fabric's name carries the process id: two benches on one machine must not share namespaces.
        scenario = dataclasses.replace(
            scenario, name=f"{scenario.name}{os.getpid() % 100000}", loss_bound=cfg.loss_bound
        )
        job = dataclasses.replace(cfg, workers=scenario.workers, model=scenario.model or cfg.model)

        def told(text: str, name: str = name) -> None:
            say(f"{name} {text}")

        turns = run_scenario(scenario, ways, job, folder / name, repeat=repeat, progress=told)
        doc = summary(name, turns.runs, turns.names)
        report["scenarios"][name] = {
            "workers": scenario.worker_hosts, "topology": scenario.topology, "model": job.model,
            "best_mode": doc["best_mode"], "missing": doc["missing"], "switch": scenario.switch,
            "links": links_text(scenario),
        }  # fmt: skip
        report["ratios"] += doc["ratios"]
        report["failed"] += [{"scenario": name, **f} for f in turns.failures]
        report["runs"][name] = {
            turns.names[key]: [None if row is None else {k: v for k, v in row.items() if k != "iter_times_s"}
                               for row in rows]
            for key, rows in turns.runs.items()
        }  # fmt: skip
    return report
