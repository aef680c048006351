"""Parameter servers with whole layers placed on them (model parallelism across PS tasks).

In the seeds' first hands-on layout (TensorFlow between-graph replication with
``replica_device_setter``), each variable lives whole on one PS task, assigned round-robin;
workers compute and pull/push every variable each step. Servers then hold unequal bytes, and
the busiest server's NIC sets the pace.
"""

from __future__ import annotations

from sim.cluster import Cluster
from sim.costs.collectives import FlowGroup, Step


def round_robin_placement(tensor_bytes: list[float], servers: int) -> list[float]:
    """Bytes held by each server when tensors are placed in turn (replica_device_setter's default
    round-robin strategy, tensorflow/python/training/device_setter.py)."""
    held = [0.0] * servers
    for i, size in enumerate(tensor_bytes):
        held[i % servers] += size
    return held


def even_placement(total_bytes: float, servers: int) -> list[float]:
    """Every tensor sharded 1/P per server."""
    return [total_bytes / servers] * servers


def ps_placed_push_pull(server_bytes: list[float], cluster: Cluster) -> list[Step]:
    """Push then pull; each phase: alpha + max(worker node NIC: g S over/nics, busiest server NIC:
    n S_max over) / B, with S the model bytes and S_max the busiest server's. Equal shards give
    ``collectives.ps_push_pull`` exactly."""
    n = cluster.world_size
    if n == 1:
        return []
    total = sum(server_bytes)
    over = cluster.oversubscription
    groups = (
        FlowGroup("inter", total, cluster.gpus_per_node * over / cluster.nics_per_node, n),
        FlowGroup("inter", max(server_bytes), n * over, 0),  # the same flows at the busiest server
    )
    return [Step(2, groups)]
