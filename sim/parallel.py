"""Node-aware placement of a dp x pp x tp layout, and the sub-clusters its groups run on.

Ranks are numbered node-major; rank = (d pp + s) tp + t for data-parallel replica d, stage s,
tensor rank t: tensor-parallel groups are contiguous (inside a node when tp <= gpus_per_node,
as Megatron-LM and torchtitan place them), then pipeline stages, then replicas.
"""

from __future__ import annotations

from dataclasses import replace

from sim.cluster import Cluster
from sim.errors import ConfigError


def check_placement(cluster: Cluster, tp: int, pp: int) -> None:
    """A group must tile nodes: tp and tp x pp each divide, or are multiples of, gpus_per_node."""
    g = cluster.gpus_per_node
    if cluster.nodes == 1:
        return
    for name, size in (("strategy.tp", tp), ("strategy.tp * pp", tp * pp)):
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


def dp_group(cluster: Cluster, dp: int, tp: int, pp: int) -> Cluster:
    """Ranks tp x pp apart; all tp x pp groups synchronise at about the same time, so each node's
    NICs carry one ring segment of every group that has members on it."""
    stride = tp * pp
    concurrent = min(stride, cluster.gpus_per_node)
    return group_cluster(cluster, dp, stride, concurrent)


def stage_boundary_link(cluster: Cluster, dp: int, tp: int, pp: int, stage: int) -> str:
    """'intra' or 'inter': the link between stage and stage + 1 (inter if any replica crosses)."""
    g = cluster.gpus_per_node
    for d in range(min(dp, max(1, g))):
        a = (d * pp + stage) * tp
        b = (d * pp + stage + 1) * tp
        if a // g != b // g:
            return "inter"
    return "intra"
