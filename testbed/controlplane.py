"""The controller's part in a testbed: configure the switches of a running fabric.

The switches serve P4Runtime on the loopback of the fabric's switch namespace,
so the controller runs there, as its own process (``dlcp testbed apply
--inside``, started by :meth:`Testbed.apply`): every gRPC socket it opens is
then in that namespace, whatever threads grpc starts.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from dlcp.testbed.spec import TestbedSpec

log = logging.getLogger(__name__)


def configure(spec: TestbedSpec, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """Apply the fabric and its jobs to every switch; raises with every switch that failed."""
    from dlcp.controller import apply

    logging.getLogger("finsy").setLevel(logging.ERROR)  # it warns on every connect that there is no gNMI
    reports = asyncio.run(apply.configure(spec.fabric, timeout=timeout_s))
    bad = [r for r in reports if r.status != "ok"]
    if bad:
        raise RuntimeError("; ".join(f"switch {r.switch} ({r.address}): {r.status}: {r.error}" for r in bad))
    return [r.as_dict() for r in reports]
