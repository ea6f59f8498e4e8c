"""``dlcp demo --core``: the conclusion it prints is what its own table shows."""

from __future__ import annotations

import re

import pytest

from dlcp.cli.demo_cmd import conclude
from dlcp.cli.main import main

ROW = re.compile(r"^\s*([\d.]+)% (uniform|selective)\s+([\d.]+)%\s+([\d.]+)%(\s+\d+)+$")


def table_and_conclusion(text: str) -> tuple[dict[str, dict[str, float]], str]:
    mass: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            mass.setdefault(m[1] + "%", {})[m[2]] = float(m[4])
    return mass, text.rsplit("\n\n", 1)[-1]


@pytest.mark.parametrize("seed", [0, 1])  # 0: selective loses less at one rate of three; 1: at all three
def test_the_conclusion_is_read_from_the_table(seed: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--core", "--seed", str(seed)]) == 0
    mass, conclusion = table_and_conclusion(capsys.readouterr().out)
    assert len(mass) == 3
    less = {q for q, m in mass.items() if m["selective"] < m["uniform"]}
    claims_always = "at every link loss rate" in conclusion or "costs less" in conclusion
    assert claims_always == (less == set(mass)), conclusion
    if less != set(mass):
        named_less = conclusion.split(", and")[0]
        for q in mass:
            assert (q in named_less) == (q in less), (q, conclusion)


def row(q: float, strategy: str, mass: float, lost: int = 3, by_layer: float = 0.004) -> dict[str, object]:
    return {"congestion_loss": q, "strategy": strategy, "gradient_mass_lost": mass, "packets_lost": lost,
            "packets_retransmitted": 0, "loss_fraction_by_layer": {"0": by_layer}}  # fmt: skip


def test_conclusions_for_each_outcome() -> None:
    every = conclude([row(0.01, "uniform", 0.02), row(0.01, "selective", 0.01)], 0.01)
    assert every[0].startswith("Selective dropping lost less gradient mass than uniform dropping at every")
    assert "2.00x to 2.00x less" in every[0] and len(every) == 2
    never = conclude([row(0.01, "uniform", 0.01), row(0.01, "selective", 0.02)], 0.01)
    assert "no less gradient mass" in never[0] and never[1].startswith("Only 3 packets stayed lost")
    over = conclude([row(0.01, "uniform", 0.02, by_layer=0.02), row(0.01, "selective", 0.01)], 0.01)
    assert over[-1] == "A layer accepted 2.000% loss, above the 1.0% bound."
