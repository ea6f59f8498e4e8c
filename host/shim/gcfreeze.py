"""Keep Python's garbage collector off a rank's set-up: :func:`freeze_after_setup`, once the model is built.

Completing a DLCP message takes the GIL (the receive thread books it in Python), so a full collection in any
thread of a rank stalls that rank's receiving, and with it every rank of a ring. In a process holding torch
(about 170,000 objects after the imports) a full collection took 16-90 ms on the test machine, landing in
whichever iteration triggered it (docs/transport.md §1). Everything built before training (torch's modules,
the model, the data, the session) lives as long as the run: frozen, it is out of the collector's reach, and a
full collection walks only what the iterations allocate. It is not garbage: freezing frees nothing and keeps
nothing alive that was not alive already.

Example::

    >>> ddp = DDP(model)
    >>> ddp.register_comm_hook(DLCPState(session, model=ddp), dlcp_hook)
    >>> freeze_after_setup()  # after the model, the data loaders and the session; before the first iteration
"""

from __future__ import annotations

import gc

__all__ = ["freeze_after_setup"]


def freeze_after_setup(enabled: bool = True) -> int:
    """Collect, then move every object alive now to the permanent generation (``gc.freeze``).

    ``enabled`` false does nothing (``dlcp train --no-gc-freeze``). Returns the objects frozen in all
    (``gc.get_freeze_count()``; 0 when disabled and nothing was frozen before).
    """
    if enabled:
        gc.collect()
        gc.freeze()
    return gc.get_freeze_count()
