"""Files rendered from the Python sources (P4 constants, test vectors): compare with disk, or write."""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


def stale(files: dict[Path, str]) -> list[Path]:
    """The files whose text on disk differs from ``files`` (or that are missing)."""
    return [p for p, text in files.items() if not p.exists() or p.read_text() != text]


def write(files: dict[Path, str]) -> list[Path]:
    """Write the stale files (creating folders); returns them."""
    changed = stale(files)
    for path in changed:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[path])
        log.info("wrote %s", path)
    return changed
