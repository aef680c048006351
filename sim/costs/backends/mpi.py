"""MPI: MPICH's default collective algorithms over point-to-point messages (alpha-beta per step).

Thakur, Rabenseifner and Gropp 2005, 'Optimization of Collective Communication Operations in
MPICH' (IJHPCA 19(1)), which MPICH's defaults follow (src/mpi/coll/*, the MPIR_CVAR_*
thresholds named below), each step a message of alpha + m / R over the transport:
- allreduce: recursive doubling, log2 p (alpha + S/R), up to MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE =
  2048 bytes; beyond, Rabenseifner's reduce-scatter by recursive halving + allgather by recursive
  doubling, 2 log2 p alpha + 2 (p-1)/p S/R; or a ring, 2(p-1) alpha + 2(p-1)/p S/R, when asked.
- broadcast: binomial tree, ceil(log2 p)(alpha + S/R), below MPIR_CVAR_BCAST_SHORT_MSG_SIZE =
  12288 bytes; beyond, scatter + ring allgather (van de Geijn), (log2 p + p - 1) alpha + 2(p-1)/p S/R.
- reduce: binomial tree up to 2048 bytes, else Rabenseifner's reduce-scatter + binomial gather,
  2 log2 p alpha + 2(p-1)/p S/R.
- allgather: recursive doubling for a power-of-two p and less than MPIR_CVAR_ALLGATHER_LONG_MSG_SIZE
  = 524288 bytes in all, log2 p alpha + (p-1)/p S/R; else a ring, (p-1) alpha + (p-1)/p S/R.
- reduce_scatter: recursive halving, log2 p alpha + (p-1)/p S/R.
- alltoall: pairwise exchange, (p-1)(alpha + S/(p R)).
A non-power-of-two p adds two steps to the recursive algorithms (the extra ranks fold in first).
Every rank of an algorithm other than the ring sends across the network at once, so a node's
ranks share its NICs; the node-major ring sends one flow per node.
"""

from __future__ import annotations

import math

from sim.cluster import Cluster
from sim.costs.backends.common import (
    Backend,
    CommCost,
    CommOptions,
    alltoall_bytes_by_link,
    inter_node_Bps,
    library_ops,
    ring_bytes_by_link,
    ring_hop_link,
    ring_rate_Bps,
    ring_volume_bytes,
    zero_cost,
)
from sim.costs.transports import cold_start_s, connection_Bps
from sim.errors import ConfigError

ALLREDUCE_SHORT_BYTES = 2048
BCAST_SHORT_BYTES = 12288
REDUCE_SHORT_BYTES = 2048
ALLGATHER_LONG_BYTES = 524288
ALGORITHMS = ("ring", "recursive_doubling", "rabenseifner", "binomial", "pairwise")


def _log2(p: int) -> tuple[int, int]:
    """(steps of a recursive algorithm, extra fold-in steps for a non-power-of-two p)."""
    steps = math.floor(math.log2(p))
    return steps, 0 if 2**steps == p else 2


def _all_ranks_rate(group: Cluster) -> float:
    """Per-rank rate when every rank sends across the network at once."""
    rates = []
    if group.gpus_per_node > 1:
        rates.append(connection_Bps(group.intra_link, 1))
    if group.nodes > 1:
        rates.append(inter_node_Bps(group, group.gpus_per_node) / group.gpus_per_node)
    return min(rates)


def _cost(op: str, n_bytes: float, group: Cluster, options: CommOptions) -> CommCost:
    p = group.world_size
    if p == 1 or n_bytes <= 0:
        return zero_cost("none")
    hop = ring_hop_link(group)
    alpha = hop.alpha_s
    ring_r, all_r = ring_rate_Bps(group, 1), _all_ranks_rate(group)
    lg, extra = _log2(p)
    frac = (p - 1) / p
    choice = options.algorithm
    if op == "allreduce":
        choice = choice or ("recursive_doubling" if n_bytes <= ALLREDUCE_SHORT_BYTES else "rabenseifner")
        table = {"recursive_doubling": (lg + extra) * (alpha + n_bytes / all_r),
                 "rabenseifner": (2 * lg + extra) * alpha + 2 * frac * n_bytes / all_r + extra * n_bytes / all_r,
                 "ring": 2 * (p - 1) * alpha + 2 * frac * n_bytes / ring_r}
    elif op == "broadcast":
        choice = choice or ("binomial" if n_bytes < BCAST_SHORT_BYTES else "ring")
        table = {"binomial": math.ceil(math.log2(p)) * (alpha + n_bytes / all_r),
                 "ring": (lg + p - 1) * alpha + n_bytes / all_r + frac * n_bytes / ring_r}
    elif op == "reduce":
        choice = choice or ("binomial" if n_bytes <= REDUCE_SHORT_BYTES else "rabenseifner")
        table = {"binomial": math.ceil(math.log2(p)) * (alpha + n_bytes / all_r),
                 "rabenseifner": (2 * lg + extra) * alpha + 2 * frac * n_bytes / all_r}
    elif op == "allgather":
        short = 2**lg == p and n_bytes < ALLGATHER_LONG_BYTES
        choice = choice or ("recursive_doubling" if short else "ring")
        table = {"recursive_doubling": lg * alpha + frac * n_bytes / all_r,
                 "ring": (p - 1) * alpha + frac * n_bytes / ring_r}
    elif op == "reduce_scatter":
        choice = choice or "recursive_doubling"
        table = {"recursive_doubling": (lg + extra) * alpha + frac * n_bytes / all_r,
                 "ring": (p - 1) * alpha + frac * n_bytes / ring_r}
    elif op == "alltoall":
        choice = choice or "pairwise"
        table = {"pairwise": (p - 1) * (alpha + n_bytes / p / all_r)}
    else:  # sendrecv
        link = group.inter_link if group.nodes > 1 else group.intra_link
        t = link.alpha_s + n_bytes / connection_Bps(link, 1)
        if group.nodes > 1:
            t += cold_start_s(link, n_bytes, 1, options.idle_s)
        return CommCost(t, "p2p", "", {"intra": 0.0 if group.nodes > 1 else n_bytes,
                                       "inter": n_bytes if group.nodes > 1 else 0.0})
    if choice not in table:
        raise ConfigError("strategy.collective", choice, f"an MPI algorithm for {op}: " + ", ".join(sorted(table)))
    t = table[choice]
    volume = ring_volume_bytes(op, n_bytes, p) if op != "alltoall" else n_bytes
    if group.nodes > 1:
        streams = 1 if choice == "ring" else group.gpus_per_node
        t += cold_start_s(group.inter_link, volume, streams, options.idle_s)
    by_link = alltoall_bytes_by_link(n_bytes, group) if op == "alltoall" else ring_bytes_by_link(volume, group)
    return CommCost(t, choice, "", by_link)


BACKEND = Backend(
    name="mpi",
    ops=library_ops(_cost, lambda b, g, o: _cost("alltoall", b, g, o), lambda b, g, o: _cost("sendrecv", b, g, o)),
    algorithms=ALGORITHMS,
    protocols=(),
    description="MPI (MPICH's defaults): recursive doubling, Rabenseifner, binomial trees, rings",
)
