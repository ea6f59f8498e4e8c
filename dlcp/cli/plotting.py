"""matplotlib for the demos' plots, imported on first use (it is an optional extra)."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def pyplot() -> Any | None:
    """``matplotlib.pyplot`` on the file-only Agg backend, or None (with a warning) where matplotlib is absent."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no plot")
        return None
    return plt
