"""What every collective library's model shares: operations, options, the cost record, and the
ring that most of them run (its rate over a cluster's links and its pipelined time).

Sizes follow nccl-tests (doc/PERFORMANCE.md): ``n_bytes`` is the buffer of allreduce, broadcast
and reduce, the gathered output of allgather, the input of reduce_scatter, a rank's whole send
buffer of alltoall and the message of sendrecv.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from sim.catalog import Link
from sim.cluster import Cluster
from sim.costs.transports import connection_Bps, transport_of

OPERATIONS = ("allreduce", "reduce", "broadcast", "allgather", "reduce_scatter", "alltoall", "sendrecv")

BUSBW_FACTOR: dict[str, Callable[[int], float]] = {
    # nccl-tests doc/PERFORMANCE.md: busbw = algbw x factor(n)
    "allreduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}


@dataclass(frozen=True)
class CommOptions:
    algorithm: str | None = None
    """Force an algorithm (as NCCL_ALGO does); None: the library's own choice."""
    protocol: str | None = None
    """Force a protocol (as NCCL_PROTO does); None: the library's own choice."""
    idle_s: float = 0.0
    """Seconds the connections sat idle before this call (a TCP stream idle for longer than its
    retransmission timeout starts again in slow start). 0: back to back, as nccl-tests runs."""
    socket_nthreads: int | None = None
    """NCCL_SOCKET_NTHREADS (helper threads per socket connection); None: NCCL's choice by NIC."""
    nsocks_perthread: int | None = None
    """NCCL_NSOCKS_PERTHREAD (sockets per helper thread); None: NCCL's choice by NIC."""
    concurrent: int = 1
    """Collectives of this kind in flight at once, each on its own communicator and connections
    (Caffe2's max_concurrent_distributed_ops): a library that honours it (gloo's halving/doubling)
    moves their bytes over that many streams per rank, sharing the node's NICs."""
    nccl_version: str | None = None
    """The NCCL release whose tables and mechanisms run (a key of
    sim.costs.backends.nccl_tables.NCCL_VERSIONS, e.g. '2.3'); None: the newest modelled."""
    mpi_library: str | None = None
    """The MPI implementation and release (a key of sim.costs.backends.mpi.MPI_LIBRARIES, e.g.
    'openmpi-1.10'); None: the default there."""
    mpi_gpu_buffers: str | None = None
    """How an MPI collective reaches GPU memory (sim.costs.backends.mpi.GPU_BUFFERS): host_copy,
    host_copy_pinned, cuda_aware; None: host_copy (see there). Ignored for CPU tensors."""


@dataclass(frozen=True)
class CommCost:
    time_s: float
    algorithm: str
    protocol: str = ""
    bytes_by_link: dict[str, float] = field(default_factory=lambda: {"intra": 0.0, "inter": 0.0})
    """Bytes the whole group puts on each link class (each byte counted once, as sent)."""


OpFunction = Callable[[float, Cluster, CommOptions], CommCost]

RING_FAMILY = ("allreduce", "reduce", "broadcast", "allgather", "reduce_scatter")
"""The operations a library runs as rings or chains (and, for NCCL, trees and NVLS)."""


def library_ops(collective: Callable[[str, float, Cluster, CommOptions], CommCost], alltoall: OpFunction,
                sendrecv: OpFunction) -> dict[str, OpFunction]:
    """A library's ``ops``: ``collective(op, ...)`` for the ring family, its own alltoall and
    sendrecv."""
    import functools

    ops: dict[str, OpFunction] = {op: functools.partial(collective, op) for op in RING_FAMILY}
    return {**ops, "alltoall": alltoall, "sendrecv": sendrecv}


@dataclass(frozen=True)
class Backend:
    name: str
    ops: dict[str, OpFunction]
    algorithms: tuple[str, ...]
    """What ``CommOptions.algorithm`` may name for this library."""
    protocols: tuple[str, ...]
    description: str
    versions: tuple[str, ...] = ()
    """The releases (NCCL) or implementations (MPI) this library's model knows; () : one only."""
    default_version: str | None = None


def zero_cost(algorithm: str = "none") -> CommCost:
    return CommCost(0.0, algorithm)


# -- the ring over a cluster ---------------------------------------------------------------

def inter_node_Bps(group: Cluster, streams_per_node: int, threads_per_node: int | None = None) -> float:
    """What one node can send to other nodes: its NICs, each carrying ``streams_per_node /
    nics`` streams (copied by ``threads_per_node / nics`` threads where fewer threads than
    streams do the copying), shared by the core's oversubscription."""
    nics = group.nics_per_node
    threads = None if threads_per_node is None else max(1, math.ceil(threads_per_node / nics))
    per_nic = connection_Bps(group.inter_link, max(1, math.ceil(streams_per_node / nics)), threads)
    return nics * per_nic / group.oversubscription


def ring_rate_Bps(group: Cluster, inter_streams_per_node: int, inter_threads_per_node: int | None = None) -> float:
    """Rate at which every rank of a node-major ring sends: the slowest edge. Inside a node a
    rank sends to its neighbour over its own intra-node port; one edge leaves each node, over
    the node's NICs (the ring's flows, channels included, spread over them)."""
    rates = []
    if group.gpus_per_node > 1:
        rates.append(connection_Bps(group.intra_link, 1))
    if group.nodes > 1:
        rates.append(inter_node_Bps(group, inter_streams_per_node, inter_threads_per_node))
    return min(rates) if rates else float("inf")


def ring_edge_latency_s(group: Cluster) -> float:
    """The inter-node link's latency as a pipelined ring's edges pay it, on average: the cluster's
    inter_link holds the fabric's extra switch hops on the ring's longest path (sim.costs.tiers,
    what a plain ring waits for at every step); a pipelined ring pays each edge's own as its data
    passes, so their mean (``Topology.ring_mean_extra_latency_s``) stands in for the longest."""
    topology, latency = group.topology, group.inter_link.latency_s
    if topology is None or latency < topology.ring_extra_latency_s:
        return latency
    return latency - topology.ring_extra_latency_s + topology.ring_mean_extra_latency_s


def ring_hop_link(group: Cluster) -> Link:
    """The link class of a ring's slowest hop for latency: the network when it spans nodes."""
    return group.inter_link if group.nodes > 1 else group.intra_link


def pipelined_s(volume_bytes: float, rate_Bps: float, chain_hops: float, hop_delay_s: float, unit_bytes: float,
                hop_rate_Bps: float | None = None) -> float:
    """A pipelined collective whose every rank sends ``volume_bytes`` at up to ``rate_Bps``
    while each pipelining unit (``unit_bytes``) must cross ``chain_hops`` hops in sequence, each
    ``hop_delay_s`` of propagation: T = max(V / R, hops x (d + unit / R_hop)) + d, R_hop the rate
    a unit crosses one hop at (``hop_rate_Bps``; R where None).
    The first bound is the link kept busy (other units, other channels, fill the wait for a
    hop's data); the second is one unit's dependency chain, which no amount of parallelism
    shortens; the last hop's propagation is paid once at the end. With d = 0 and one unit per
    step this is the alpha-free ring, V / R (throughput bound vs latency bound: Hockney 1994;
    the pipelined-ring analysis of Patarasuk and Yuan 2009)."""
    if volume_bytes <= 0:
        return 0.0
    throughput = volume_bytes / rate_Bps
    chain = chain_hops * (hop_delay_s + unit_bytes / (hop_rate_Bps or rate_Bps))
    return max(throughput, chain) + hop_delay_s


def end_to_end(group: Cluster) -> bool:
    """Every link the group uses is a measured (or plain alpha-beta) one."""
    links = ([group.intra_link] if group.gpus_per_node > 1 else []) + ([group.inter_link] if group.nodes > 1 else [])
    return all(transport_of(link).end_to_end for link in links)


def ring_steps(op: str, n: int) -> int:
    """Sequential steps of the ring form of ``op`` on n ranks (a chain of n-1 for the rooted ones)."""
    if op == "allreduce":
        return 2 * (n - 1)
    return n - 1


def ring_volume_bytes(op: str, n_bytes: float, n: int) -> float:
    """Bytes each rank sends in the ring form of ``op``: allreduce 2(n-1)/n S; reduce_scatter,
    allgather (n-1)/n S; broadcast and reduce as a pipelined chain, S."""
    if op == "allreduce":
        return 2 * (n - 1) / n * n_bytes
    if op in ("reduce_scatter", "allgather"):
        return (n - 1) / n * n_bytes
    return float(n_bytes)


def ring_bytes_by_link(volume_bytes: float, group: Cluster) -> dict[str, float]:
    """Cluster totals of a node-major ring where every rank sends ``volume_bytes``: the last
    rank of each node sends over the network, the others inside the node."""
    n, nodes = group.world_size, group.nodes
    if nodes == 1:
        return {"intra": volume_bytes * n, "inter": 0.0}
    return {"intra": volume_bytes * (n - nodes), "inter": volume_bytes * nodes}


def alltoall_bytes_by_link(n_bytes: float, group: Cluster) -> dict[str, float]:
    """Each rank sends n_bytes / n to every other rank: (g-1)/n of it inside its node."""
    n, g = group.world_size, group.gpus_per_node
    return {"intra": n * n_bytes * (g - 1) / n, "inter": n * n_bytes * (n - g) / n}


def alltoall_s(n_bytes: float, group: Cluster, inter_streams_per_node: int, alpha_s: float,
               inter_threads_per_node: int | None = None) -> float:
    """Every rank sends n_bytes / n to each peer at once: the slower of its intra-node port
    (g-1 chunks) and its share of the node's NICs (g ranks x (n-g) chunks each), plus one alpha
    per round of posted messages (the library posts them all together)."""
    n, g = group.world_size, group.gpus_per_node
    if n == 1:
        return 0.0
    chunk = n_bytes / n
    times = []
    if g > 1:
        times.append((g - 1) * chunk / connection_Bps(group.intra_link, 1))
    if group.nodes > 1:
        times.append(g * (n - g) * chunk / inter_node_Bps(group, inter_streams_per_node, inter_threads_per_node)
                     + group.inter_link.latency_s)
    return alpha_s + max(times)
