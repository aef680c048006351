"""Parameter servers with whole layers placed on them (model parallelism across PS tasks).

In the seeds' first hands-on layout (TensorFlow between-graph replication with
``replica_device_setter``), each variable lives whole on one PS task, assigned round-robin;
workers compute and pull/push every variable each step. Servers then hold unequal bytes, and
the busiest server's NIC sets the pace.
"""

from __future__ import annotations

from dataclasses import dataclass

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


# -- placements: which server holds which bytes -------------------------------------------

MXNET_BIGARRAY_BOUND_ELEMS = 1000 * 1000
"""MXNET_KVSTORE_BIGARRAY_BOUND's default (src/kvstore/kvstore_dist.h, MXNet 0.9-1.x:
``dmlc::GetEnv("MXNET_KVSTORE_BIGARRAY_BOUND", 1000 * 1000)``)."""


def mxnet_key_placement(tensor_elems: list[float], servers: int, bytes_per_elem: float,
                        bound_elems: float = MXNET_BIGARRAY_BOUND_ELEMS) -> list[list[tuple[int, float]]]:
    """For each tensor (key k, in order), the (server, bytes) it puts on the servers, as MXNet's
    KVStoreDist::EncodeKey does: an array of fewer than ``bound_elems`` elements goes whole to
    server (k * 9973) % P ('send it to a single random picked server'), a larger one is split
    into P near-equal parts, one per server ('partition it to all servers')."""
    out = []
    for key, elems in enumerate(tensor_elems):
        if elems < bound_elems:
            out.append([((key * 9973) % servers, elems * bytes_per_elem)])
        else:
            out.append([(s, elems * bytes_per_elem / servers) for s in range(servers)])
    return out


def server_bytes(placed: list[list[tuple[int, float]]], positions, servers: int) -> list[float]:
    """Bytes each server holds of the tensors at ``positions``."""
    held = [0.0] * servers
    for i in positions:
        for s, b in placed[i]:
            held[s] += b
    return held


# -- RPC layers: what carries a push or a pull ---------------------------------------------

@dataclass(frozen=True)
class PsRpc:
    name: str
    stream_Bps: float | None
    """Most one worker-server connection moves (serialization copies on its threads); None: the
    transport's stream rate alone."""
    source: str


PS_RPCS: dict[str, PsRpc] = {
    "grpc_tf0": PsRpc("grpc_tf0", 569.27e6,
                      "TensorFlow 0.12's gRPC RecvTensor between two processes: 569 MB/s for a 128 MB tensor "
                      "(tensorflow/tensorflow#6256, Dec 2016, benchmark_grpc_recv.py of #6116; 'improved from "
                      "100-200 MB/s to 800 MB/s' by the gRPC upgrade of Aug 2017, #6116)"),
    "grpc_tf1_4": PsRpc("grpc_tf1_4", 800e6,
                        "TensorFlow >= 1.4 after the gRPC upgrade: ~800 MB/s for the same benchmark "
                        "(tensorflow/tensorflow#6116, comment of 2017-08-09)"),
    "ps_lite_zmq": PsRpc("ps_lite_zmq", None,
                         "MXNet's ps-lite over ZeroMQ TCP sockets (ps-lite src/zmq_van.h): one socket per "
                         "worker-server pair, no rate of its own beyond TCP's"),
}


# -- layouts, over the transport -----------------------------------------------------------

PS_LAYOUTS = ("dedicated", "colocated", "node_aggregated", "colocated_aggregated", "centralized")
"""Where the servers sit and what is pushed (TensorFlow's and MXNet's layouts, DESIGN.md):
- dedicated: P server hosts apart from the workers; every worker pushes its share to each and
  pulls it back (TF 2016 between-graph replication).
- colocated: P server processes on P of the worker nodes (TF's PS tasks on the worker machines;
  the ChainerMN 2017 comparison ran TF 0.12 with n-1 of them); a push to the node's own server
  crosses no NIC.
- node_aggregated: the node's GPUs first sum their gradients inside the node (a reduce to one
  GPU), one push and pull per node to P dedicated servers, a broadcast inside the node
  (TF's replicated variables with local aggregation).
- colocated_aggregated: one server process on each of P worker nodes and one worker per
  node that sums its GPUs' gradients in host memory before pushing and copies the pulled values
  back to them (MXNet's dist_sync kvstore as its launcher starts it: a worker and a server per
  machine; src/kvstore/kvstore_dist.h Push_, CommCPU in src/kvstore/comm.h:
  ``host_reduce_broadcast_s``).
- centralized: one root sums and sends back: the library's reduce then broadcast."""


def _flow_Bps(link, streams_on_nic: float, nics: int, oversubscription: float) -> float:
    """Max-min share of one TCP (or verbs) flow on a NIC carrying ``streams_on_nic`` equal flows,
    each also capped by what one stream can do over the link (window / RTT, per-flow caps)."""
    from sim.costs.transports import transport_of

    share = link.effective_Bps * nics / max(1.0, streams_on_nic) / oversubscription
    return min(share, transport_of(link).stream_Bps(link))


def _node_reduce_broadcast(n_bytes: float, cluster: Cluster, backend: str, options) -> tuple[float, float]:
    """(seconds, intra-node bytes) of a reduce to one GPU and a broadcast back inside one node."""
    from sim.costs.backends import comm_cost

    g = cluster.gpus_per_node
    node = type(cluster)(nodes=1, gpus_per_node=g, gpu=cluster.gpu, intra_link=cluster.intra_link,
                         inter_link=cluster.inter_link, nics_per_node=cluster.nics_per_node, oversubscription=1.0)
    red = comm_cost(backend, "reduce", n_bytes, node, options)
    bc = comm_cost(backend, "broadcast", n_bytes, node, options)
    return red.time_s + bc.time_s, red.bytes_by_link["intra"] + bc.bytes_by_link["intra"]


MXNET_REDUCTION_THREADS = 4
"""MXNET_KVSTORE_REDUCTION_NTHREADS' default (src/kvstore/comm.h, CommCPU: ``dmlc::GetEnv(
"MXNET_KVSTORE_REDUCTION_NTHREADS", 4)``)."""


def host_reduce_broadcast_s(n_bytes: float, cluster: Cluster) -> float:
    """MXNet's CommCPU (src/kvstore/comm.h) for one key: every GPU's gradient copied to pinned
    host memory over its own PCIe link (concurrently), summed there by MXNET_REDUCTION_THREADS
    threads (g arrays read, one written, each thread at one core's streaming-sum rate, the
    cluster's host's ``reduce_Bps``: sim/data/hosts.yaml), and after the pull copied back to every GPU:
        t = S / B_pcie + (g + 1) S / (threads x R_core) + S / B_pcie,
    B_pcie the GPU's link to the host (the catalog's PCIe Gen3 x16 payload rate)."""
    from sim.catalog import builtin_catalog, host_of

    g = cluster.gpus_per_node
    pcie = cluster.intra_link if cluster.intra_link.kind == "pcie" else builtin_catalog().links["pcie3"]
    copy = n_bytes / pcie.effective_Bps
    reduce = (g + 1) * n_bytes / (MXNET_REDUCTION_THREADS * host_of(cluster).reduce_Bps) if g > 1 else 0.0
    return 2 * copy + reduce


def ps_phase_s(held_bytes: list[float], cluster: Cluster, pushers_per_node: int, server_nodes: int | None,
               rpc_Bps: float | None) -> tuple[float, float]:
    """One push (or pull) phase: (seconds, bytes crossing NICs), every pusher sending server s
    its ``held_bytes[s]`` over one stream. ``server_nodes``: the servers sit on worker nodes
    0..P-1 (one each, colocated) or on hosts of their own (None).

    T = alpha + max(a worker node's NIC: its pushers' remote bytes / B_nic,
                    the busiest server node's NIC: remote bytes in / B_nic,
                    the largest shard / one stream's rate (transport, RPC layer)),
    B_nic = line x efficiency x NICs / oversubscription (a dedicated server host has one NIC):
    the bottleneck of max-min sharing when every flow of a phase starts at once (DESIGN.md, the
    parameter-server form)."""
    from sim.costs.transports import transport_of

    link, over, nics = cluster.inter_link, cluster.oversubscription, cluster.nics_per_node
    g, nodes = pushers_per_node, cluster.nodes
    pushers = g * nodes
    total = sum(held_bytes)
    if total <= 0:
        return 0.0, 0.0
    nic_Bps = link.effective_Bps * nics / over
    stream_Bps = transport_of(link).stream_Bps(link)
    if rpc_Bps is not None:
        stream_Bps = min(stream_Bps, rpc_Bps)
    server_nic_Bps = nic_Bps
    if server_nodes is None:  # dedicated hosts (one NIC each): every byte crosses both NICs
        node_out = g * total
        server_in = pushers * max(held_bytes)
        crossing = pushers * total
        server_nic_Bps = link.effective_Bps / over
    else:  # server s on worker node s: its own node's pushers reach it without a NIC
        node_out = g * (total if len(held_bytes) < nodes else total - min(held_bytes))  # a node without a server sends it all
        server_in = max((pushers - g) * b for b in held_bytes)
        crossing = sum((pushers - g) * b for b in held_bytes)
    one_node = nodes == 1 and server_nodes is not None  # everything on one node: loopback, no NIC
    wire_s = 0.0 if one_node else max(node_out / nic_Bps, server_in / server_nic_Bps)
    stream_s = max(held_bytes) / stream_Bps
    return link.alpha_s + max(wire_s, stream_s), crossing


def ps_sync_cost(n_bytes: float, cluster: Cluster, servers: int, layout: str, backend: str, options,
                 held_bytes: list[float] | None = None, rpc: str | None = None):
    """Synchronous push-then-pull of a bucket of ``n_bytes`` in the given layout, one stream per
    worker-server pair (``ps_phase_s`` per phase). ``held_bytes``: what each server holds of the
    bucket (a placement; default 1/P each); ``rpc``: the RPC layer (PS_RPCS) capping a stream."""
    from sim.costs.backends import CommCost, comm_cost
    from sim.costs.transports import cold_start_s

    n, g, nodes = cluster.world_size, cluster.gpus_per_node, cluster.nodes
    link = cluster.inter_link
    if n == 1 or n_bytes <= 0:
        return CommCost(0.0, "ps")
    if layout == "centralized":
        red = comm_cost(backend, "reduce", n_bytes, cluster, options)
        bc = comm_cost(backend, "broadcast", n_bytes, cluster, options)
        return CommCost(red.time_s + bc.time_s, "reduce+broadcast", red.protocol,
                        {k: red.bytes_by_link[k] + bc.bytes_by_link[k] for k in ("intra", "inter")})
    colocated = layout in ("colocated", "colocated_aggregated")
    aggregated = layout in ("node_aggregated", "colocated_aggregated")
    if colocated:
        servers = min(servers, nodes)
    if held_bytes is None or len(held_bytes) != servers:
        held_bytes = [n_bytes / servers] * servers
    inside, intra_bytes = 0.0, 0.0
    pushers_per_node = g
    if layout == "colocated_aggregated":  # the worker stages every key through host memory, even alone
        inside = host_reduce_broadcast_s(n_bytes, cluster)
        intra_bytes = 2 * g * n_bytes * nodes
        pushers_per_node = 1
    elif aggregated and g > 1:
        inside, per_node = _node_reduce_broadcast(n_bytes, cluster, backend, options)
        intra_bytes = per_node * nodes
        pushers_per_node = 1
    rpc_Bps = PS_RPCS[rpc].stream_Bps if rpc else None
    phase, crossing = ps_phase_s(held_bytes, cluster, pushers_per_node, servers if colocated else None, rpc_Bps)
    cold = cold_start_s(link, max(held_bytes), 1, options.idle_s) if not (colocated and nodes == 1) else 0.0
    local = 0.0 if not colocated else sum(pushers_per_node * b for b in held_bytes) * 2
    return CommCost(inside + 2 * (phase + cold), "ps", "",
                    {"intra": intra_bytes + local, "inter": 2 * crossing})
