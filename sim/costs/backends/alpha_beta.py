"""Collectives on measured or alpha-beta links: the algorithm's steps at the link's own figures.

A ``loopback`` link is what ``scalebench calibrate`` fitted to a library's own collective, a
``custom`` link a user's alpha and beta: whatever the library's protocol costs is already in
those figures, so every backend costs an operation on them as its algorithm's counted steps,
each alpha + bytes / B with the flows that share a link (sim.costs.collectives). The library's
tuner has nothing to choose by there: ``auto`` is the ring.
"""

from __future__ import annotations

from sim.cluster import Cluster
from sim.costs.backends.common import (
    CommCost,
    CommOptions,
    alltoall_bytes_by_link,
    alltoall_s,
    zero_cost,
)
from sim.costs.collectives import (
    ALLREDUCE,
    Step,
    bytes_by_link,
    collective_time_s,
    ring_allgather,
    ring_reduce_scatter,
)
from sim.costs.network import message_time_s

CHAIN_OPS = ("broadcast", "reduce")


def _chain(n_bytes: float, group: Cluster) -> list[Step]:
    """A pipelined chain rooted at rank 0 over the node-major ring: n-1 hops of S each,
    modelled as n-1 ring steps of S/n plus the bandwidth of S once (the last hop's)."""
    steps = ring_reduce_scatter(n_bytes, group)
    return steps + ([Step(1, steps[0].groups, pays_latency=False)] if steps else [])


def cost(op: str, n_bytes: float, group: Cluster, options: CommOptions) -> CommCost:
    n = group.world_size
    if n == 1 or n_bytes <= 0:
        return zero_cost("ring")
    if op == "allreduce":
        algorithm = options.algorithm if options.algorithm in ALLREDUCE else "ring"
        steps = ALLREDUCE[algorithm](n_bytes, group)
    elif op == "reduce_scatter":
        algorithm, steps = "ring", ring_reduce_scatter(n_bytes, group)
    elif op == "allgather":
        algorithm, steps = "ring", ring_allgather(n_bytes, group)
    elif op in CHAIN_OPS:
        algorithm, steps = "ring", _chain(n_bytes, group)
    elif op == "alltoall":
        alpha = (group.inter_link if group.nodes > 1 else group.intra_link).alpha_s
        return CommCost(alltoall_s(n_bytes, group, 1, alpha), "p2p", "", alltoall_bytes_by_link(n_bytes, group))
    else:  # sendrecv
        across = group.nodes > 1
        link = group.inter_link if across else group.intra_link
        return CommCost(message_time_s(n_bytes, link), "p2p", "",
                        {"intra": 0.0 if across else n_bytes, "inter": n_bytes if across else 0.0})
    return CommCost(collective_time_s(steps, group), algorithm, "", bytes_by_link(steps))
