"""Collective algorithms costed per algorithm step, with a count of flows per link.

Each algorithm is a function ``(n_bytes, cluster, **options) -> list[Step]``. A ``Step`` is a
set of concurrent transfers that all ranks perform together (bulk synchronous); its
``FlowGroup``s say which link class each transfer crosses, how many bytes it carries and how
many equal flows share the busiest link of that class (``load``; max-min fair share B/load).
A step lasts as long as its slowest group; identical steps are counted, not repeated, so a
ring of 16,384 ranks costs as little to evaluate as a ring of 8.

The registry ``ALLREDUCE`` maps a strategy's ``collective`` name to its algorithm: a new
collective is one new entry here. Closed forms live next to them as test oracles.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from sim.catalog import Link
from sim.cluster import Cluster
from sim.costs.network import message_time_s, transfer_time_s


@dataclass(frozen=True)
class FlowGroup:
    link: str
    """'intra' or 'inter': the cluster's link class the flows cross."""
    bytes_per_flow: float
    load: float
    """Equal flows sharing the busiest link of this class (fractional with several NICs)."""
    flows: int
    """Flows of this group in the whole cluster during the step (for byte accounting)."""


@dataclass(frozen=True)
class Step:
    count: int
    groups: tuple[FlowGroup, ...]
    pays_latency: bool = True
    """False for the bandwidth term of a pipelined algorithm whose latency steps are separate."""


def link_of(cluster: Cluster, link_class: str) -> Link:
    return cluster.intra_link if link_class == "intra" else cluster.inter_link


def step_time_s(step: Step, cluster: Cluster) -> float:
    """One step: the slowest of its flow groups."""
    cost = message_time_s if step.pays_latency else transfer_time_s
    return max((cost(g.bytes_per_flow, link_of(cluster, g.link), g.load) for g in step.groups), default=0.0)


def collective_time_s(steps: list[Step], cluster: Cluster) -> float:
    return sum(s.count * step_time_s(s, cluster) for s in steps)


def bytes_by_link(steps: list[Step]) -> dict[str, float]:
    """Bytes put on each link class by the whole cluster (each byte counted once, as sent)."""
    totals: dict[str, float] = {"intra": 0.0, "inter": 0.0}
    for s in steps:
        for g in s.groups:
            totals[g.link] += s.count * g.bytes_per_flow * g.flows
    return totals


# -- ring ---------------------------------------------------------------------------------

def _ring_step_groups(chunk_bytes: float, cluster: Cluster) -> tuple[FlowGroup, ...]:
    """One ring step over all ranks in node-major order: every rank sends one chunk to the next.

    Within a node, g-1 flows each use their own GPU's intra port (load 1). Between nodes one
    flow leaves each node; the data is split over the node's NICs as NCCL splits it over
    channels, so a NIC carries load = oversubscription / nics_per_node.
    """
    n = cluster.world_size
    groups = []
    intra_flows = n - cluster.nodes if cluster.nodes > 1 else n
    if cluster.gpus_per_node > 1:
        groups.append(FlowGroup("intra", chunk_bytes, 1.0, intra_flows))
    if cluster.nodes > 1:
        groups.append(FlowGroup("inter", chunk_bytes, cluster.oversubscription / cluster.nics_per_node, cluster.nodes))
    return tuple(groups)


def ring_allreduce(n_bytes: float, cluster: Cluster) -> list[Step]:
    """Reduce-scatter then allgather: 2(n-1) steps of S/n each (Patarasuk & Yuan 2009; NCCL)."""
    n = cluster.world_size
    if n == 1:
        return []
    return [Step(2 * (n - 1), _ring_step_groups(n_bytes / n, cluster))]


def ring_reduce_scatter(n_bytes: float, cluster: Cluster) -> list[Step]:
    """(n-1) steps of S/n."""
    n = cluster.world_size
    return [] if n == 1 else [Step(n - 1, _ring_step_groups(n_bytes / n, cluster))]


def ring_allgather(n_bytes: float, cluster: Cluster) -> list[Step]:
    """(n-1) steps of S/n; ``n_bytes`` is the gathered (output) size."""
    return ring_reduce_scatter(n_bytes, cluster)


def ring_allreduce_time(n: int, n_bytes: float, alpha_s: float, bandwidth_Bps: float) -> float:
    """Closed form: T = 2(n-1) alpha + 2(n-1)/n x S/B (DESIGN.md; NCCL tuning.cc's form)."""
    return 2 * (n - 1) * alpha_s + 2 * (n - 1) / n * n_bytes / bandwidth_Bps


# -- tree ---------------------------------------------------------------------------------

def tree_allreduce(n_bytes: float, cluster: Cluster) -> list[Step]:
    """NCCL's double binary tree between nodes with a chain inside each node, pipelined.

    Latency: up and down the tree, 2 ceil(log2 nodes) inter-node hops plus 2(g-1) intra-node
    chain hops. Bandwidth: every byte crosses a link twice (reduce up, broadcast down), so the
    algorithm bandwidth is half the link's: 2S/B on the slower link class (DESIGN.md; NCCL).
    """
    n = cluster.world_size
    if n == 1:
        return []
    g, nodes = cluster.gpus_per_node, cluster.nodes
    steps = []
    if nodes > 1:
        steps.append(Step(2 * math.ceil(math.log2(nodes)), (FlowGroup("inter", 0.0, 1.0, 0),)))
    if g > 1:
        steps.append(Step(2 * (g - 1), (FlowGroup("intra", 0.0, 1.0, 0),)))
    bw_groups = []
    if g > 1:
        bw_groups.append(FlowGroup("intra", 2.0 * n_bytes, 1.0, n - nodes if nodes > 1 else n))
    if nodes > 1:
        bw_groups.append(FlowGroup("inter", 2.0 * n_bytes, cluster.oversubscription / cluster.nics_per_node, nodes))
    steps.append(Step(1, tuple(bw_groups), pays_latency=False))
    return steps


def tree_allreduce_time(nodes: int, gpus_per_node: int, n_bytes: float, alpha_inter_s: float,
                        alpha_intra_s: float, bandwidth_Bps: float) -> float:
    """Closed form: 2 ceil(log2 nodes) a_inter + 2(g-1) a_intra + 2S/B (B the slower link)."""
    latency = 2 * math.ceil(math.log2(nodes)) * alpha_inter_s if nodes > 1 else 0.0
    return latency + 2 * (gpus_per_node - 1) * alpha_intra_s + 2 * n_bytes / bandwidth_Bps


# -- hierarchical -------------------------------------------------------------------------

def hierarchical_allreduce(n_bytes: float, cluster: Cluster) -> list[Step]:
    """Intra-node ring reduce-scatter, inter-node ring allreduce of S/g, intra-node allgather.

    The g inter-node rings (one per local rank) run at once and share the node's NICs:
    load g x oversubscription / nics_per_node (DESIGN.md; Horovod's hierarchical allreduce).
    """
    g, nodes = cluster.gpus_per_node, cluster.nodes
    if nodes == 1 or g == 1:
        return ring_allreduce(n_bytes, cluster)
    shard = n_bytes / g
    intra = (FlowGroup("intra", shard, 1.0, cluster.world_size),)
    inter = (FlowGroup("inter", shard / nodes, g * cluster.oversubscription / cluster.nics_per_node, g * nodes),)
    return [Step(g - 1, intra), Step(2 * (nodes - 1), inter), Step(g - 1, intra)]


def hierarchical_allreduce_time(nodes: int, g: int, n_bytes: float, intra: Link, inter: Link,
                                nics_per_node: int = 1) -> float:
    """Closed form: 2(g-1)(a_i + S/(g B_i)) + 2(nodes-1)(a_e + S/(g nodes) x g/nics / B_e)."""
    t_intra = 2 * (g - 1) * (intra.alpha_s + n_bytes / g / intra.effective_Bps)
    t_inter = 2 * (nodes - 1) * (inter.alpha_s + n_bytes / (g * nodes) * g / nics_per_node / inter.effective_Bps)
    return t_intra + t_inter


# -- parameter server ---------------------------------------------------------------------

def ps_push_pull(n_bytes: float, cluster: Cluster, servers: int = 1) -> list[Step]:
    """Synchronous sharded parameter server on dedicated server hosts (TensorFlow 2016 style).

    Every worker pushes S/P to each of P servers, then pulls S/P back from each. A worker
    node's NIC carries g x P flows; a server's NIC carries n flows. With equal flows max-min
    fairness gives each min(B / (gP/nics), B / n), so a phase takes
    alpha + (S/P) x max(gP/nics, n) / B; one server: 2(alpha + nS/B) (DESIGN.md).
    """
    n = cluster.world_size
    if n == 1:
        return []
    shard = n_bytes / servers
    over = cluster.oversubscription
    groups = (
        FlowGroup("inter", shard, cluster.gpus_per_node * servers * over / cluster.nics_per_node, n * servers),
        FlowGroup("inter", shard, n * over, 0),  # the same flows, seen at a server's NIC
    )
    return [Step(2, groups)]


def ps_push_pull_time(n: int, n_bytes: float, servers: int, alpha_s: float, bandwidth_Bps: float,
                      gpus_per_node: int = 1) -> float:
    """Closed form: 2 (alpha + S/P x max(g P, n) / B)."""
    return 2 * (alpha_s + n_bytes / servers * max(gpus_per_node * servers, n) / bandwidth_Bps)


# -- registry -----------------------------------------------------------------------------

ALLREDUCE: dict[str, Callable[..., list[Step]]] = {
    "ring": ring_allreduce,
    "tree": tree_allreduce,
    "hierarchical": hierarchical_allreduce,
    "ps": ps_push_pull,
}
