"""A strategy's gradient synchronisation and other collectives, costed through its library.

The one place that turns a strategy's communication settings (backend, collective, protocol,
parameter-server layout) into calls of the collective libraries' models
(``sim.costs.backends.comm_cost``). Everything that costs communication (the iteration plan,
codecs, tensor parallelism, ``scalebench collective``) comes through here.

Reductions a strategy can ask for (``strategy.collective``):
- auto: the library's own choice (NCCL's tuner; gloo's ring; MPICH's defaults).
- ring, tree, nvls, recursive_doubling, rabenseifner: that algorithm of the library (NCCL_ALGO).
- hierarchical: Horovod's hierarchical allreduce: reduce-scatter inside each node, allreduce of
  the 1/g shard across nodes by the g local ranks at once (sharing the node's NICs), allgather
  inside the node (horovod/common/ops/nccl_operations.cc, NCCLHierarchicalAllreduce).
- hierarchical_root: a reduce to one GPU in each node, an allreduce among those node roots
  (``root_collective``: the library's algorithm for it, or ``alltoall_sum``: ChainerMN's allreduce
  out of two MPI_Alltoall calls and a sum on the GPU), a broadcast inside each node; NCCL inside
  a node of GPUs, the strategy's library between nodes (ChainerMN 2017's HierarchicalCommunicator:
  chainermn/communicators/hierarchical_communicator.py, NCCL reduce, MPI allreduce among
  intra_rank 0, NCCL bcast; Caffe2 + Gloo in Goyal et al. 2017, section 4: 'buffers from the 8
  GPUs within a server are summed into a single buffer for each server, ... summed across all
  servers, and finally ... broadcast onto each GPU').
- ps: parameter servers, laid out as ``strategy.ps_layout`` says (sim.costs.ps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from sim.cluster import Cluster
from sim.costs.backends import BACKENDS, CommCost, CommOptions, comm_cost
from sim.costs.ps import ps_sync_cost


@dataclass(frozen=True)
class CommSpec:
    backend: str
    collective: str = "auto"
    protocol: str | None = None
    ps_servers: int = 1
    ps_layout: str = "dedicated"
    ps_rpc: str | None = None
    root_collective: str | None = None
    concurrent: int = 1
    idle_s: float = 0.0
    socket_nthreads: int | None = None
    nsocks_perthread: int | None = None
    nccl_version: str | None = None
    mpi_library: str | None = None
    mpi_gpu_buffers: str | None = None

    def options(self, algorithm: str | None = None) -> CommOptions:
        return CommOptions(algorithm=algorithm, protocol=self.protocol, idle_s=self.idle_s,
                           socket_nthreads=self.socket_nthreads, nsocks_perthread=self.nsocks_perthread,
                           concurrent=self.concurrent, nccl_version=self.nccl_version,
                           mpi_library=self.mpi_library, mpi_gpu_buffers=self.mpi_gpu_buffers)


def spec_of(strategy) -> CommSpec:
    """The communication part of a resolved ``sim.strategy.Strategy``."""
    return CommSpec(backend=strategy.backend or "nccl", collective=strategy.collective, protocol=strategy.protocol,
                    ps_servers=strategy.ps_servers, ps_layout=strategy.ps_layout, ps_rpc=strategy.ps_rpc,
                    root_collective=strategy.root_collective, concurrent=strategy.concurrent_collectives,
                    socket_nthreads=strategy.nccl_socket_nthreads, nsocks_perthread=strategy.nccl_nsocks_perthread,
                    nccl_version=strategy.nccl_version, mpi_library=strategy.mpi_library,
                    mpi_gpu_buffers=strategy.mpi_gpu_buffers)


def _add(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: a.get(k, 0.0) + b.get(k, 0.0) for k in ("intra", "inter")}


def op_cost(op: str, n_bytes: float, group: Cluster, spec: CommSpec) -> CommCost:
    """``op`` over ``group`` through the spec's library, the spec's algorithm where the library
    has it for this op (else the library's choice)."""
    algorithm = None
    if spec.collective not in ("auto", "hierarchical", "hierarchical_root", "ps") and spec.collective in BACKENDS[spec.backend].algorithms:
        algorithm = spec.collective
    return comm_cost(spec.backend, op, n_bytes, group, spec.options(algorithm if op == "allreduce" else None))


def hierarchical_allreduce(n_bytes: float, group: Cluster, spec: CommSpec) -> CommCost:
    """Intra-node reduce-scatter, inter-node allreduce of S/g by g concurrent rings sharing each
    node's NICs (one node-wide communicator per local rank: nodes x 1 GPU with 1/g of the NICs),
    intra-node allgather."""
    g, nodes = group.gpus_per_node, group.nodes
    if g == 1 or nodes == 1:
        return op_cost("allreduce", n_bytes, group, replace(spec, collective="auto"))
    flat = replace(spec, collective="auto")
    node = replace(group, nodes=1)
    across = replace(group, gpus_per_node=1, oversubscription=group.oversubscription * g)
    rs = op_cost("reduce_scatter", n_bytes, node, flat)
    ar = op_cost("allreduce", n_bytes / g, across, flat)
    ag = op_cost("allgather", n_bytes, node, flat)
    by_link = _add(_add({k: v * nodes for k, v in rs.bytes_by_link.items()},
                        {k: v * g for k, v in ar.bytes_by_link.items()}),
                   {k: v * nodes for k, v in ag.bytes_by_link.items()})
    return CommCost(rs.time_s + ar.time_s + ag.time_s, "hierarchical", ar.protocol, by_link)


COMPOSED_ROOT_COLLECTIVES = ("alltoall_sum",)
"""Allreduces among the node roots built by a framework out of its library's other operations
(any backend with an alltoall): not one of the library's own algorithms."""


def alltoall_sum_allreduce(n_bytes: float, group: Cluster, spec: CommSpec) -> CommCost:
    """ChainerMN's allreduce among the node roots (chainermn/communicators/_communication_utility.py
    inter_allreduce_gpu at v1.0.0; the HierarchicalCommunicator of its first public commit 0afd4f5,
    13 Feb 2017, did the same): an MPI_Alltoall of the whole GPU buffer, so each of the N roots
    holds every root's 1/N chunk; their sum on the GPU, scaled by 1/size (cupy); the reduced chunk
    copied into each of the N slots; a second MPI_Alltoall. On device buffers of a CUDA-aware MPI
    an alltoall is no reduction, so Open MPI pipelines it (sim.costs.backends.mpi), where its own
    allreduce would have copied the buffer whole through host memory (coll/cuda). The GPU's part
    is memory traffic at its bandwidth: the sum reads S and writes S/N, the scaling reads and
    writes S/N, the N copies read and write S/N each: (3 + 3/N) S."""
    a2a = comm_cost(spec.backend, "alltoall", n_bytes, group, spec.options())
    p = group.world_size
    gpu_s = (3 + 3 / p) * n_bytes / group.gpu.memory_bandwidth_Bps
    return CommCost(2 * a2a.time_s + gpu_s, "alltoall_sum", a2a.protocol,
                    {k: 2 * v for k, v in a2a.bytes_by_link.items()})


def hierarchical_root_allreduce(n_bytes: float, group: Cluster, spec: CommSpec) -> CommCost:
    """Reduce to one GPU per node + allreduce of the whole buffer among the node roots (one rank
    per node: the node's NICs to itself) + broadcast inside the node (module docstring)."""
    g, nodes = group.gpus_per_node, group.nodes
    intra_backend = "nccl" if group.gpu.kind != "cpu" else spec.backend
    zero = CommCost(0.0, "none", "", {"intra": 0.0, "inter": 0.0})
    red = bc = zero
    if g > 1:
        node = replace(group, nodes=1)
        red = comm_cost(intra_backend, "reduce", n_bytes, node, spec.options())
        bc = comm_cost(intra_backend, "broadcast", n_bytes, node, spec.options())
    ar = zero
    if nodes > 1:
        across = replace(group, gpus_per_node=1)
        if spec.root_collective in COMPOSED_ROOT_COLLECTIVES:
            ar = alltoall_sum_allreduce(n_bytes, across, spec)
        else:
            ar = comm_cost(spec.backend, "allreduce", n_bytes, across, spec.options(spec.root_collective))
    by_link = _add(_add({k: v * nodes for k, v in red.bytes_by_link.items()}, ar.bytes_by_link),
                   {k: v * nodes for k, v in bc.bytes_by_link.items()})
    return CommCost(red.time_s + ar.time_s + bc.time_s, "hierarchical_root", ar.protocol, by_link)


def allreduce_cost(n_bytes: float, group: Cluster, spec: CommSpec, held_bytes: list[float] | None = None) -> CommCost:
    """One gradient bucket's reduction as the strategy asks for it (``held_bytes``: with
    parameter servers, what each server holds of the bucket; default 1/P each)."""
    if group.world_size == 1 or n_bytes <= 0:
        return CommCost(0.0, spec.collective)
    if spec.collective == "ps":
        return ps_sync_cost(n_bytes, group, spec.ps_servers, spec.ps_layout, spec.backend, spec.options(),
                            held_bytes=held_bytes, rpc=spec.ps_rpc)
    if spec.collective == "hierarchical":
        return hierarchical_allreduce(n_bytes, group, spec)
    if spec.collective == "hierarchical_root":
        return hierarchical_root_allreduce(n_bytes, group, spec)
    return op_cost("allreduce", n_bytes, group, spec)


@dataclass(frozen=True)
class RingLatency:
    """What a collective library adds to one ring it runs, as the detailed mode schedules it:
    ``base_s`` once per collective, ``intra_hop_s`` / ``inter_hop_s`` on every step over an
    intra- / inter-node edge (after the link's own alpha), and whether the sender's next step
    waits only for its bytes to have left (``pipelined``) rather than for their delivery."""

    base_s: float = 0.0
    intra_hop_s: float = 0.0
    inter_hop_s: float = 0.0
    pipelined: bool = False
    protocol: str = ""
    pace: float = 1.0
    """A step's chunk takes ``pace`` x its payload's time at the links' rate (the protocol's
    ceiling and chunk rounding) over an inter-node edge (on one node: over every edge); the bytes
    counted stay the payload."""
    intra_pace: float = 1.0
    """The same over an intra-node edge of a ring that spans nodes (``nccl.ring_paces``)."""


PLAIN_RING = RingLatency()
"""A ring of plain messages: nothing added, a send is complete on delivery (gloo, whose ring waits
on each step's send, MPI, and every library on measured or alpha-beta links)."""


def ring_latency(op: str, n_bytes: float, group: Cluster, spec: CommSpec) -> RingLatency:
    """The library's latency of one ring ``op`` of ``n_bytes`` over ``group`` (nccl-tests sizes).

    NCCL: T_lat = f x (baseLat[ring][p] + sum over the ring's steps of hwLat[hw][ring][p]), p the
    protocol its tuner picks for this size among those the strategy allows (NCCL_PROTO), hw the
    edge's class (intra steps floored at getNetOverhead across nodes), f the 1.9 / 1.4 'plateau'
    of a multi-node Simple allreduce (src/graph/tuning.cc ncclTopoTuneModel, ncclTopoGetAlgoTime;
    sim.costs.backends.nccl._latency_us sums the same terms along the ring). Each connection has
    NCCL_STEPS = 8 slots (src/include/device.h), so a hop's latency delays the data, not the
    sender's next step: pipelined. Its steps are paced as the fast path's throughput bound paces
    them (``nccl.ring_paces``: chunk rounding, the protocol's bandwidth, per edge class). Others, and
    measured or alpha-beta links: PLAIN_RING."""
    from sim.costs.backends.common import end_to_end

    if spec.backend != "nccl" or group.world_size == 1 or end_to_end(group):
        return PLAIN_RING
    from sim.costs.backends import nccl

    _, proto = nccl.choose(op, n_bytes, group, spec.options("ring"))
    t = nccl.tables(spec.options())
    graph = nccl.ring_graph(group, t)
    base_us, intra_us, inter_us = nccl.ring_hop_latencies_us(proto, group, graph, t)
    # tuning.cc's plateau factor, and a latency factor measured for this protocol on these links
    # (scalebench calibrate --from-nccl-tests), as the fast path's ring applies them
    f = nccl.latency_factor("ring", proto, op, n_bytes, group, graph, t) * nccl.fitted_factors(group, proto)[1] * 1e-6
    intra_pace, inter_pace = nccl.ring_paces(op, proto, n_bytes, group, spec.options())
    return RingLatency(base_us * f, intra_us * f, inter_us * f, True, proto, inter_pace, intra_pace)


def ring_latency_for(cluster: Cluster, spec: CommSpec):
    """``latency(op, n_bytes, nodes, gpus_per_node)``: ``ring_latency`` for a ring over that many
    nodes of ``cluster`` with that many members on each (memoised: buckets repeat)."""
    import functools

    @functools.lru_cache(maxsize=4096)
    def latency(op: str, n_bytes: float, nodes: int, gpus_per_node: int) -> RingLatency:
        return ring_latency(op, n_bytes, replace(cluster, nodes=nodes, gpus_per_node=gpus_per_node), spec)

    return latency


def per_flow_cluster(group: Cluster, spec: CommSpec) -> Cluster:
    """The cluster as the detailed mode's per-flow network should see it under the library:
    each link an alpha-beta twin (kind custom) whose rate is what the transport gives a
    connection with the library's streams, its alpha the link's own (the library's latency is
    scheduled per collective: ``ring_latency``). Measured and alpha-beta links are already that."""
    from sim.catalog import Link
    from sim.costs.backends.common import end_to_end
    from sim.costs.transports import connection_Bps

    if end_to_end(group):
        return group

    def twin(link: Link, streams: int, threads: int | None = None) -> Link:
        rate = connection_Bps(link, streams, threads)
        return Link(name=f"{link.name}@{spec.backend}", kind="custom", bandwidth_Bps=rate, latency_s=link.latency_s,
                    software_latency_s=link.software_latency_s, efficiency=1.0,
                    source=f"{link.name} as {spec.backend} sees it per flow (sim.costs.comm.per_flow_cluster)")

    streams, threads = 1, None
    if spec.backend == "nccl" and group.nodes > 1:
        from sim.costs.backends.nccl import ring_graph, ring_streams, tables

        streams, per_node = ring_streams(group, ring_graph(group, tables(spec.options())), spec.options())
        threads = None if per_node is None else max(1, math.ceil(per_node / group.nics_per_node))
    return replace(group, intra_link=twin(group.intra_link, 1),
                   inter_link=twin(group.inter_link, max(1, streams // group.nics_per_node), threads))
