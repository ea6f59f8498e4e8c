"""Where the P4 sources, the committed P4Info and the compiled programs are: the one module that says so.

The compiler (``dlcp p4 build``) writes its outputs at these paths, and
the controller, the switch and the BMv2 runner read them from here, without
importing the compiler.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository root (``dlcp/p4/paths.py`` is two folders down)."""
P4SRC = ROOT / "p4src"
V1MODEL_PROGRAM = P4SRC / "v1model" / "dlcp.p4"
TNA_PROGRAM = P4SRC / "tna" / "dlcp.p4"
COMMITTED_P4INFO = P4SRC / "v1model" / "dlcp.p4info.txtpb"
"""The v1model P4Info, committed: the controller's and the software switch's schema."""
DEFAULT_OUT = ROOT / "build" / "p4"
"""The build folder of ``dlcp p4 build`` (never committed)."""
P4INFO_NAME = "dlcp.p4info.txtpb"
"""The P4Info's file name in a target's build folder."""


def target_dir(target: str, out: Path = DEFAULT_OUT) -> Path:
    """The build folder of one target (``v1model``, ``tna``, ``tofino``, ``tofino2``) under ``out``."""
    return out / target


def v1model_json(out: Path = DEFAULT_OUT) -> Path:
    """The BMv2 program that the v1model build writes under ``out``."""
    return target_dir("v1model", out) / "dlcp.json"


def p4info(target: str, out: Path = DEFAULT_OUT) -> Path:
    """The P4Info that a target's build writes under ``out``."""
    return target_dir(target, out) / P4INFO_NAME


BMV2_JSON = v1model_json()
"""Where ``dlcp p4 build`` writes the BMv2 program, the default ``p4blob`` of a bmv2 switch."""
