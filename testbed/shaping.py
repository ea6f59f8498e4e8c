"""Link rates and buffers carried out by the kernel, for switches that cannot carry them out themselves.

BMv2 sets a port's queue rate and depth only over Thrift; a ``simple_switch_grpc`` built without Thrift
(docs/p4-toolchain.md's recipe) has no way to take them. The testbed then puts a token-bucket queue (``tbf``) on
the egress of each of the switch's port interfaces, in the switch namespace: the port sends at the link's rate
and holds at most the link's buffer, tail-dropping the rest, as the software switch's egress does. The queue sits
behind BMv2's, which then stays short: BMv2's priority queues, selective drop and trimming (which read its queue
depth) do not act. The drops are read back per interface (:func:`drops`) and counted as the port's.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from dlcp.controller.model import LinkSpec
from dlcp.frames import ETH_HEADER

log = logging.getLogger(__name__)

ROOT_HANDLE = 0x10000
"""``1:``, the qdisc's handle (ours: the namespace holds nothing else)."""
BURST_S = 0.001
"""Tokens the bucket holds, in time at the link's rate (at least two frames): a 1 ms burst at most."""


def tbf_params(link: LinkSpec) -> dict[str, int] | None:
    """The tbf of a port on ``link``: rate (bits/s), burst and limit (bytes); None for a link without a rate."""
    if link.rate_bps is None:
        return None
    frame = link.mtu + ETH_HEADER.size
    burst = max(2 * frame, int(link.rate_bps * BURST_S / 8))
    return {"rate_bps": int(link.rate_bps), "burst": burst, "limit": max(frame, int(link.buffer_bytes))}


def shape(ipr: Any, ports: Sequence[tuple[str, LinkSpec]]) -> list[str]:
    """Put each link's tbf on its interface (``ipr``: pyroute2 in the namespace); returns one line per port."""
    done = []
    for ifname, link in ports:
        p = tbf_params(link)
        if p is None:
            continue
        (index,) = ipr.link_lookup(ifname=ifname)
        ipr.tc("replace", "tbf", index, ROOT_HANDLE, rate=f"{p['rate_bps']}bit", burst=p["burst"], limit=p["limit"])
        done.append(f"{ifname}: tbf rate {p['rate_bps'] / 1e6:g} Mbit/s, buffer {p['limit']} B")
    log.info("kernel queues: %s", "; ".join(done))
    return done


def drops(ipr: Any) -> dict[str, int]:
    """Interface name -> packets its tbf dropped so far (interfaces without ours are left out)."""
    names = {int(m["index"]): m.get_attr("IFLA_IFNAME") for m in ipr.get_links()}
    out = {}
    for q in ipr.get_qdiscs():
        if q.get_attr("TCA_KIND") == "tbf" and q["handle"] == ROOT_HANDLE:
            stats = q.get_attr("TCA_STATS2")
            queue = stats.get_attr("TCA_STATS_QUEUE") if stats is not None else None
            if queue is not None and int(q["index"]) in names:
                out[names[int(q["index"])]] = int(queue["drops"])
    return out
