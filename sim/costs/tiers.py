"""What a fabric's tiers give a collective's flows when nothing collides: the fast path's view.

With every switch spreading flows evenly over its equal-cost next hops (per-hop ECMP as a fluid,
sim.topology.routing.Router.spread; on a symmetric layout exactly what a collision-free routing
such as D-mod-k gives), F concurrent flows that each want a NIC's rate B put load
load_l = sum over flows of their share on link l on each link l of capacity C_l. Max-min then
gives every flow min(B, min_l C_l / load_l): the bottleneck tier's share. The fast path's cluster
carries that as its ``oversubscription`` o = max(1, max_l B x load_l / C_l) ("inter-node flows
get 1/o of a NIC", sim.cluster.Cluster) and the longest path's extra switch hops in its
inter_link's latency, for the pattern that carries data-parallel training: the node-major ring
over the placement (node k sends to node k+1, split over NIC j -> NIC j). Formula and its source:
the max-min share of symmetric flows on a link, Bertsekas & Gallager, *Data Networks* sec. 6.5.2.
A ring whose steps wait for every edge (a plain ring: each step as long as its slowest edge) pays
the longest path's latency at every step; a pipelined library's ring (sim.costs.backends.ring_maxplus)
pays each edge's own latency as its data passes it, so its chain sums the edges' latencies: the
mean over the ring's edges (``mean_extra_latency_s``) is its figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.topology.fabric import Fabric
from sim.topology.routing import Router


@dataclass(frozen=True)
class TierView:
    load_factor: float
    """max(1, max_l B x load_l / C_l): what the bottleneck tier divides a NIC's rate by."""
    extra_latency_s: float
    """The longest path's hop latencies beyond the NICs' first switch."""
    mean_extra_latency_s: float
    """The mean over the pattern's node-to-node messages of their hop latencies (a message's: its
    slowest NIC's path), 0 where none crosses a switch."""
    bottleneck: str
    """The tier of the link that sets load_factor ('nic' when no fabric link binds)."""
    loads: dict[int, float]
    """Flows per directed fabric link (fluid)."""


def flows_view(fabric: Fabric, pairs: Sequence[tuple[int, int, int, int]], nic_Bps: float,
               router: Router | None = None) -> TierView:
    """``pairs``: concurrent flows (src slot, src NIC, dst slot, dst NIC), each wanting ``nic_Bps``."""
    router = router or Router(fabric)
    demand: dict[tuple[int, int], int] = {}
    for a, i, b, j in pairs:
        key = (fabric.host_ports[a][i], fabric.host_ports[b][j])
        if key[0] != key[1]:
            demand[key] = demand.get(key, 0) + 1
    loads: dict[int, float] = {}
    extra = 0.0
    latency_of: dict[tuple[int, int], float] = {}
    for (s, t), count in demand.items():
        shares, latency = router.spread(s, t)
        latency_of[(s, t)] = latency
        extra = max(extra, latency)
        for link, share in shares.items():
            loads[link] = loads.get(link, 0.0) + count * share
    messages: dict[tuple[int, int], float] = {}  # (src slot, dst slot) -> its slowest NIC's latency
    for a, i, b, j in pairs:
        key = (fabric.host_ports[a][i], fabric.host_ports[b][j])
        messages[(a, b)] = max(messages.get((a, b), 0.0), latency_of.get(key, 0.0))
    mean = sum(messages.values()) / len(messages) if messages else 0.0
    factor, neck = 1.0, "nic"
    for link, load in loads.items():
        kind = fabric.kinds[fabric.cables[link // 2][2]]
        f = nic_Bps * load / kind.link.effective_Bps
        if f > factor * (1 + 1e-12):
            factor, neck = f, kind.tier
    return TierView(factor, extra, mean, neck, loads)


def ring_pairs(slots: Sequence[int], nics: int) -> list[tuple[int, int, int, int]]:
    """The node-major ring's inter-node flows: node k to node k+1 (mod nodes), NIC j to NIC j."""
    n = len(slots)
    if n < 2:
        return []
    return [(slots[k], j, slots[(k + 1) % n], j) for k in range(n) for j in range(nics)]


def ring_view(fabric: Fabric, slots: Sequence[int], nics: int, nic_Bps: float) -> TierView:
    """The ring's bottleneck-tier share and longest extra latency on ``fabric``."""
    return flows_view(fabric, ring_pairs(slots, nics), nic_Bps)


def bisection_pairs(slots: Sequence[int], nics: int) -> list[tuple[int, int, int, int]]:
    """Node k of the first half to node k of the second half (and back), every NIC: the traffic
    that measures a fabric's bisection bandwidth."""
    half = len(slots) // 2
    out = []
    for k in range(half):
        for j in range(nics):
            out.append((slots[k], j, slots[half + k], j))
            out.append((slots[half + k], j, slots[k], j))
    return out
