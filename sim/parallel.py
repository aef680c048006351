"""Node-aware placement of a dp x pp x cp x tp layout, and the sub-clusters its groups run on.

Ranks are numbered node-major; rank = ((d pp + s) cp + c) tp + t for data-parallel replica d,
stage s, context-parallel rank c, tensor rank t: tensor-parallel groups are contiguous (inside a
node when tp <= gpus_per_node, as Megatron-LM and torchtitan place them), then context-parallel
ranks (Megatron-LM's order tp-cp-...), then pipeline stages, then replicas. Expert parallelism
splits the data-parallel dimension: ep consecutive replicas form an expert-parallel group, and
the replicas ep apart share the experts' gradients (the expert data-parallel group).
"""

from __future__ import annotations

from dataclasses import replace

from sim.cluster import Cluster
from sim.errors import ConfigError


def check_placement(cluster: Cluster, tp: int, pp: int, cp: int = 1) -> None:
    """A group must tile nodes: tp, tp x cp and tp x cp x pp each divide, or are multiples of, gpus_per_node."""
    g = cluster.gpus_per_node
    if cluster.nodes == 1:
        return
    sizes = [("strategy.tp", tp)] + ([("strategy.tp * cp", tp * cp)] if cp > 1 else [])
    sizes.append(("strategy.tp * cp * pp" if cp > 1 else "strategy.tp * pp", tp * cp * pp))
    for name, size in sizes:
        if g % size and size % g:
            raise ConfigError(name, size, f"a divisor or a multiple of cluster.gpus_per_node={g} (groups must tile nodes)")


def group_cluster(cluster: Cluster, size: int, stride: int, concurrent: int) -> Cluster:
    """The cluster a group of ``size`` ranks spaced ``stride`` apart runs on, with ``concurrent``
    such groups sharing each node's NICs (as a load factor on the inter-node links)."""
    g = cluster.gpus_per_node
    if size == 1:
        return replace(cluster, nodes=1, gpus_per_node=1)
    if cluster.nodes == 1 or size * stride <= g:
        return replace(cluster, nodes=1, gpus_per_node=size)
    per_node = max(1, g // stride)
    nodes = size // per_node
    return replace(cluster, nodes=nodes, gpus_per_node=per_node,
                   oversubscription=cluster.oversubscription * max(1, concurrent))


def tp_group(cluster: Cluster, tp: int) -> Cluster:
    """Contiguous ranks; every GPU of a node is in one, so groups on a node share its NICs."""
    return group_cluster(cluster, tp, 1, min(cluster.gpus_per_node, cluster.world_size) // min(tp, cluster.gpus_per_node))


def cp_group(cluster: Cluster, cp: int, tp: int) -> Cluster:
    """Ranks tp apart (a ring of cp); the tp groups of each node exchange at once."""
    return group_cluster(cluster, cp, tp, min(tp, cluster.gpus_per_node))


def dp_group(cluster: Cluster, dp: int, tp: int, pp: int, cp: int = 1) -> Cluster:
    """Ranks tp x cp x pp apart; all of those groups synchronise at about the same time, so each
    node's NICs carry one ring segment of every group that has members on it."""
    stride = tp * cp * pp
    concurrent = min(stride, cluster.gpus_per_node)
    return group_cluster(cluster, dp, stride, concurrent)


def grad_group(cluster: Cluster, dp: int, tp: int, pp: int, cp: int = 1) -> Cluster:
    """The ranks that reduce the same gradients: the dp replicas and, with context parallelism,
    their cp ranks (which hold the same parameters): ``dp_group`` when cp = 1, else the dp x cp
    ranks of one (stage, tensor rank) as ``ranks_group`` places them."""
    if cp == 1:
        return dp_group(cluster, dp, tp, pp)
    ranks = [((d * pp) * cp + c) * tp for d in range(dp) for c in range(cp)]
    return ranks_group(cluster, ranks, min(tp, cluster.gpus_per_node))


def ranks_group(cluster: Cluster, ranks: list[int], concurrent: int) -> Cluster:
    """The cluster a group of these ranks runs on: the nodes they span with the most members any
    of those nodes holds, ``concurrent`` such groups sharing each node's NICs."""
    g = cluster.gpus_per_node
    per_node: dict[int, int] = {}
    for rank in ranks:
        per_node[rank // g] = per_node.get(rank // g, 0) + 1
    if len(per_node) == 1:
        return replace(cluster, nodes=1, gpus_per_node=len(ranks))
    return replace(cluster, nodes=len(per_node), gpus_per_node=max(per_node.values()),
                   oversubscription=cluster.oversubscription * max(1, concurrent))


def ep_group(cluster: Cluster, ep: int, tp: int, pp: int, cp: int = 1) -> Cluster:
    """ep consecutive data-parallel replicas (ranks tp x cp x pp apart), all exchanging tokens at once."""
    stride = tp * cp * pp
    return group_cluster(cluster, ep, stride, min(stride, cluster.gpus_per_node))


def expert_grad_group(cluster: Cluster, dp: int, ep: int, tp: int, pp: int, cp: int = 1) -> Cluster:
    """The ranks that hold the same experts and reduce their gradients: dp / ep replicas ep apart
    and their cp ranks (Megatron-LM's expert data-parallel group, dp x cp / ep ranks)."""
    ranks = [((d * ep * pp) * cp + c) * tp for d in range(dp // ep) for c in range(cp)]
    return ranks_group(cluster, ranks, min(tp, cluster.gpus_per_node))


def stage_boundary_link(cluster: Cluster, dp: int, tp: int, pp: int, stage: int, cp: int = 1) -> str:
    """'intra' or 'inter': the link between stage and stage + 1 (inter if any replica crosses)."""
    return stage_pair_link(cluster, dp, tp, pp, stage, stage + 1, cp)


def stage_pair_link(cluster: Cluster, dp: int, tp: int, pp: int, src: int, dst: int, cp: int = 1) -> str:
    """'intra' or 'inter': the link between pipeline stages ``src`` and ``dst`` of one replica
    (the interleaved schedule also sends from the last stage back to the first)."""
    g = cluster.gpus_per_node
    width = tp * cp
    for d in range(min(dp, max(1, g))):
        a = (d * pp + src) * width
        b = (d * pp + dst) * width
        if a // g != b // g:
            return "inter"
    return "intra"
