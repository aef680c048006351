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


# -- layouts, over the transport -----------------------------------------------------------

PS_LAYOUTS = ("dedicated", "colocated", "node_aggregated", "centralized")
"""Where the servers sit and what is pushed (TensorFlow's layouts, DESIGN.md):
- dedicated: P server hosts apart from the workers; every worker pushes S/P to each and pulls
  S/P back (TF 2016 between-graph replication).
- colocated: one server shard per worker node (P = nodes), so 1/P of every push stays local
  (TF's PS tasks on the worker machines).
- node_aggregated: the node's GPUs first sum their gradients inside the node (a reduce to one
  GPU), one push and pull per node to P dedicated servers, a broadcast inside the node
  (TF's replicated variables with local aggregation; MXNet's 'device' kvstore).
- centralized: one root sums and sends back: the library's reduce then broadcast."""


def _flow_Bps(link, streams_on_nic: float, nics: int, oversubscription: float) -> float:
    """Max-min share of one TCP (or verbs) flow on a NIC carrying ``streams_on_nic`` equal flows,
    each also capped by what one stream can do over the link (window / RTT, per-flow caps)."""
    from sim.costs.transports import transport_of

    share = link.effective_Bps * nics / max(1.0, streams_on_nic) / oversubscription
    return min(share, transport_of(link).stream_Bps(link))


def ps_sync_cost(n_bytes: float, cluster: Cluster, servers: int, layout: str, backend: str, options):
    """Synchronous push-then-pull of a bucket of ``n_bytes`` in the given layout (one gRPC/TCP
    stream per worker-server pair). Each phase lasts alpha + shard / (the narrowest flow share:
    a worker node's NICs carry g P flows, a server's NIC n flows)."""
    from sim.costs.backends import CommCost, comm_cost
    from sim.costs.transports import cold_start_s

    n, g, nodes = cluster.world_size, cluster.gpus_per_node, cluster.nodes
    link, over, nics = cluster.inter_link, cluster.oversubscription, cluster.nics_per_node
    if n == 1 or n_bytes <= 0:
        return CommCost(0.0, "ps")
    if layout == "centralized":
        red = comm_cost(backend, "reduce", n_bytes, cluster, options)
        bc = comm_cost(backend, "broadcast", n_bytes, cluster, options)
        return CommCost(red.time_s + bc.time_s, "reduce+broadcast", red.protocol,
                        {k: red.bytes_by_link[k] + bc.bytes_by_link[k] for k in ("intra", "inter")})
    inside = 0.0
    pushers, pushers_per_node = n, g
    intra_bytes = 0.0
    if layout == "node_aggregated" and g > 1:
        node = type(cluster)(nodes=1, gpus_per_node=g, gpu=cluster.gpu, intra_link=cluster.intra_link,
                             inter_link=cluster.inter_link, nics_per_node=nics, oversubscription=1.0)
        red = comm_cost(backend, "reduce", n_bytes, node, options)
        bc = comm_cost(backend, "broadcast", n_bytes, node, options)
        inside = red.time_s + bc.time_s
        intra_bytes = (red.bytes_by_link["intra"] + bc.bytes_by_link["intra"]) * nodes
        pushers, pushers_per_node = nodes, 1
    if layout == "colocated":
        servers = nodes
        remote = (servers - 1) / servers  # the local shard stays in the node
        out_flows = pushers_per_node * (servers - 1)  # a node's workers to the other nodes' servers
        in_flows = n - g  # remote workers to this node's server
        flows = max(out_flows, in_flows, 1)
        rate = _flow_Bps(link, flows, nics, over)
        shard = n_bytes / servers
        phase = link.alpha_s + shard / rate if nodes > 1 else 0.0
        inter = 2 * n * n_bytes * remote
        cold = cold_start_s(link, shard, 1, options.idle_s) if nodes > 1 else 0.0
        return CommCost(2 * (phase + cold), "ps", "", {"intra": 2 * n * n_bytes * (1 - remote), "inter": inter})
    shard = n_bytes / servers
    worker_rate = _flow_Bps(link, pushers_per_node * servers, nics, over)
    server_rate = _flow_Bps(link, pushers, 1, over)
    rate = min(worker_rate, server_rate)
    phase = link.alpha_s + shard / rate + cold_start_s(link, shard, 1, options.idle_s)
    return CommCost(inside + 2 * phase, "ps", "", {"intra": intra_bytes, "inter": 2 * pushers * n_bytes})
