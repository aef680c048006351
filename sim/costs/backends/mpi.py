"""MPI: an implementation's own choice of collective algorithm, over point-to-point messages, on
host memory, with GPU buffers staged through the host as the build and the framework do.

Implementations (``CommOptions.mpi_library``, a key of ``MPI_LIBRARIES``; one registry entry each):
- mpich-3: MPICH 3.x's defaults (Thakur, Rabenseifner and Gropp 2005, 'Optimization of Collective
  Communication Operations in MPICH', IJHPCA 19(1); the MPIR_CVAR_* thresholds named below):
  allreduce by recursive doubling up to MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE = 2048 bytes, else
  Rabenseifner's reduce-scatter by recursive halving + allgather by recursive doubling; broadcast
  binomial below MPIR_CVAR_BCAST_SHORT_MSG_SIZE = 12288 bytes, else scatter + ring allgather (van
  de Geijn); reduce binomial up to 2048 bytes, else Rabenseifner's reduce-scatter + binomial
  gather; allgather by recursive doubling for a power-of-two p below
  MPIR_CVAR_ALLGATHER_LONG_MSG_SIZE = 524288 bytes, else a ring; reduce_scatter by recursive
  halving; alltoall pairwise. Not CUDA-aware here (MPICH's GPU support is not modelled).
- openmpi-1.10: Open MPI 1.10's tuned component, its fixed decision rules
  (ompi/mca/coll/tuned/coll_tuned_decision_fixed.c at v1.10.3, commit 9acf4926): allreduce by
  recursive doubling below 10000 bytes ('intermediate_message'), else a ring when p x 1 MiB >= S,
  else the ring in 1 MiB segments ('segment_size = 1 << 20'); broadcast binomial below 2048 bytes,
  split binary tree (1 KiB segments) below 370728, else a pipeline (chain) or split binary tree
  with segments of 128, 8, 64, 16 or 8 KiB chosen by the fitted lines a_p128 ... b_p16 of that file;
  reduce likewise (binomial, pipeline, binary by its a1 ... b4 lines); reduce_scatter by recursive
  halving up to 12 KiB, up to 256 KiB for a power-of-two p, or where p >= 0.0012 S + 8, else a
  ring; allgather by recursive doubling (power-of-two p) or Bruck below 50000 bytes, else a ring
  (odd p) or neighbour exchange (even p); alltoall pairwise. CUDA-aware when built with CUDA: a
  reduction on device buffers copies them whole into malloc'ed host memory, reduces on the host
  and copies back (ompi/mca/coll/cuda/coll_cuda_allreduce.c: opal_cuda_memcpy_sync into
  malloc(bufsize)); other operations move device data through the PML's pipelined staging in
  fragments of btl_max_send_size (128 KiB, opal/mca/btl/openib/btl_openib_mca.c), GPUDirect RDMA
  off by default ('want_cuda_gdr' false).

Every step is a message of alpha + m / R over the transport (R: the rate one rank gets, its NIC
shared where all ranks send at once; a node-major ring sends one flow per node). The reduction
runs on the host: each reduced byte costs two reads and a write at the host's rate
(``Host.reduce_Bps``, sim/data/hosts.yaml), after its message, as these algorithms do.

GPU buffers (``CommOptions.mpi_gpu_buffers``, GPU_BUFFERS; tensors of a CPU 'gpu' need none):
- host_copy (default): the MPI is not CUDA-aware, so the framework copies the input from device
  to host before the call and the output back after it, with cudaMemcpy on ordinary (pageable)
  host memory: the driver stages pageable copies through a pinned buffer with a CPU memcpy, so a
  copy moves at min(the PCIe DMA rate, the host's one-core memcpy rate) (assumed: the staging
  memcpy and the DMA overlap);
- host_copy_pinned: the same with pinned buffers: the PCIe DMA rate (``Host.pcie_link``);
- cuda_aware: the library takes device pointers (openmpi-1.10 only): reductions as host_copy
  (coll/cuda above), the other operations pipelined through pinned fragments: a message moves at
  min(network, PCIe) and pays one fragment's copy down and up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.catalog import host_of
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
ALGORITHMS = ("ring", "recursive_doubling", "rabenseifner", "binomial", "pairwise", "ring_segmented", "pipeline",
              "split_bintree", "binary", "bruck", "neighbor_exchange", "linear")
GPU_BUFFERS = ("host_copy", "host_copy_pinned", "cuda_aware")


@dataclass(frozen=True)
class MpiLibrary:
    name: str
    rules: str
    """Whose decision rules choose the algorithm: mpich or openmpi_1_10."""
    cuda_aware: bool
    """The library can be built to take device pointers (modelled as such)."""
    pipeline_fragment_bytes: int
    source: str


MPI_LIBRARIES: dict[str, MpiLibrary] = {
    "mpich-3": MpiLibrary("mpich-3", "mpich", False, 0,
                          "MPICH 3.x defaults (Thakur, Rabenseifner and Gropp 2005; MPIR_CVAR_* thresholds)"),
    "openmpi-1.10": MpiLibrary("openmpi-1.10", "openmpi_1_10", True, 128 * 1024,
                               "Open MPI 1.10.3 (open-mpi/ompi v1.10.3, 9acf4926): coll/tuned fixed decisions, "
                               "coll/cuda host copies, openib btl_max_send_size 128 KiB"),
}
DEFAULT_MPI_LIBRARY = "mpich-3"


def library_for(options: CommOptions | None) -> MpiLibrary:
    name = DEFAULT_MPI_LIBRARY if options is None or options.mpi_library is None else options.mpi_library
    if name not in MPI_LIBRARIES:
        raise ConfigError("strategy.mpi_library", name, MPI_LIBRARIES)
    return MPI_LIBRARIES[name]


def gpu_buffers_for(options: CommOptions | None, library: MpiLibrary) -> str:
    mode = "host_copy" if options is None or options.mpi_gpu_buffers is None else options.mpi_gpu_buffers
    if mode not in GPU_BUFFERS:
        raise ConfigError("strategy.mpi_gpu_buffers", mode, GPU_BUFFERS)
    if mode == "cuda_aware" and not library.cuda_aware:
        raise ConfigError("strategy.mpi_gpu_buffers", mode,
                          f"host_copy or host_copy_pinned with {library.name} (CUDA-aware paths modelled: "
                          + ", ".join(n for n, lib in MPI_LIBRARIES.items() if lib.cuda_aware) + ")")
    return mode


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


# -- staging through the host --------------------------------------------------------------

def pinned_copy_Bps(group: Cluster) -> float:
    """cudaMemcpy between device and pinned host memory: the host's PCIe link as DMA moves it."""
    return host_of(group).pcie_Bps


def pageable_copy_Bps(group: Cluster) -> float:
    """cudaMemcpy with pageable host memory: the driver's staging memcpy and the DMA overlapped
    (assumed), so the slower of the host's one-core memcpy and the PCIe DMA."""
    return min(pinned_copy_Bps(group), host_of(group).memcpy_Bps)


STAGED_BYTES = {  # (bytes copied to the host before, back to the device after) per rank, as n_bytes fractions
    "allreduce": lambda p: (1.0, 1.0), "reduce": lambda p: (1.0, 1.0), "broadcast": lambda p: (1.0, 1.0),
    "allgather": lambda p: (1.0 / p, 1.0), "reduce_scatter": lambda p: (1.0, 1.0 / p),
    "alltoall": lambda p: (1.0, 1.0), "sendrecv": lambda p: (1.0, 1.0),
}
"""nccl-tests sizes (sim/costs/backends/common.py): a rank's input down, its output up."""
REDUCING = ("allreduce", "reduce", "reduce_scatter")


def staging_s(op: str, n_bytes: float, group: Cluster, mode: str, library: MpiLibrary) -> float:
    """The host copies around one call: host_copy at the pageable rate, host_copy_pinned at the
    PCIe rate, both for the whole input and output; cuda_aware: reductions as host_copy (Open MPI's
    coll/cuda), other operations one pipeline fragment down and up (the rest overlaps the
    network). 0 where the tensors live in host memory (a CPU device)."""
    if group.gpu.kind == "cpu" or n_bytes <= 0:
        return 0.0
    down, up = STAGED_BYTES[op](group.world_size)
    if mode == "cuda_aware" and op not in REDUCING:
        fragment = min(float(library.pipeline_fragment_bytes), n_bytes)
        return 2 * fragment / pinned_copy_Bps(group)
    rate = pinned_copy_Bps(group) if mode == "host_copy_pinned" else pageable_copy_Bps(group)
    return (down + up) * n_bytes / rate


def host_reduce_s(reduced_bytes: float, group: Cluster) -> float:
    """Summing ``reduced_bytes`` into a buffer on the host: two reads and a write per byte at the
    host's one-core rate (Host.reduce_Bps)."""
    return 3.0 * reduced_bytes / host_of(group).reduce_Bps


# -- the algorithms ------------------------------------------------------------------------

def _pipelined(hops: float, segments: int, alpha: float, segment_bytes: float, rate: float) -> float:
    """A chain or tree ``hops`` deep fed ``segments`` segments: (hops + segments - 1)(alpha + seg / R)."""
    return (hops + segments - 1) * (alpha + segment_bytes / rate)


def _segments(n_bytes: float, segment_bytes: float) -> tuple[int, float]:
    if segment_bytes <= 0 or n_bytes <= segment_bytes:
        return 1, n_bytes
    count = math.ceil(n_bytes / segment_bytes)
    return count, n_bytes / count


def _mpich_choice(op: str, n_bytes: float, p: int) -> str:
    lg, _ = _log2(p)
    if op == "allreduce":
        return "recursive_doubling" if n_bytes <= ALLREDUCE_SHORT_BYTES else "rabenseifner"
    if op == "broadcast":
        return "binomial" if n_bytes < BCAST_SHORT_BYTES else "ring"
    if op == "reduce":
        return "binomial" if n_bytes <= REDUCE_SHORT_BYTES else "rabenseifner"
    if op == "allgather":
        return "recursive_doubling" if 2**lg == p and n_bytes < ALLGATHER_LONG_BYTES else "ring"
    if op == "reduce_scatter":
        return "recursive_doubling"
    return "pairwise"


OMPI_BCAST_LINES = ((1.6134e-6, 2.1102), (2.3679e-6, 1.1787), (3.2118e-6, 8.7936))
"""coll_tuned_decision_fixed.c bcast: (a_p128, b_p128), (a_p64, b_p64), (a_p16, b_p16), [1/B] and 1."""
OMPI_REDUCE_LINES = ((0.6016 / 1024, 1.3496), (0.0410 / 1024, 9.7128), (0.0422 / 1024, 1.1614), (0.0033 / 1024, 1.6761))
"""coll_tuned_decision_fixed.c reduce: (a1, b1) ... (a4, b4)."""


def _ompi_choice(op: str, n_bytes: float, p: int) -> tuple[str, float]:
    """(algorithm, segment bytes) of Open MPI 1.10's fixed decision rules for a commutative op."""
    pow2 = 2 ** math.ceil(math.log2(p)) == p
    if op == "allreduce":
        if n_bytes < 10000:
            return "recursive_doubling", 0.0
        return ("ring", 0.0) if p * 2**20 >= n_bytes else ("ring_segmented", float(2**20))
    if op == "broadcast":
        (a128, b128), (a64, b64), (a16, b16) = OMPI_BCAST_LINES
        if n_bytes < 2048:
            return "binomial", 0.0
        if n_bytes < 370728:
            return "split_bintree", 1024.0
        if p < a128 * n_bytes + b128:
            return "pipeline", float(1024 << 7)
        if p < 13:
            return "split_bintree", float(1024 << 3)
        if p < a64 * n_bytes + b64:
            return "pipeline", float(1024 << 6)
        if p < a16 * n_bytes + b16:
            return "pipeline", float(1024 << 4)
        return "pipeline", float(1024 << 3)
    if op == "reduce":
        (a1, b1), (a2, b2), (a3, b3), (a4, b4) = OMPI_REDUCE_LINES
        if p < 8 and n_bytes < 512:
            return "linear", 0.0
        if (p < 8 and n_bytes < 20480) or n_bytes < 2048:
            return "binomial", 0.0
        if p > a1 * n_bytes + b1:
            return "binomial", 1024.0
        if p > a2 * n_bytes + b2:
            return "pipeline", 1024.0
        if p > a3 * n_bytes + b3:
            return "binary", float(32 * 1024)
        return "pipeline", float(32 * 1024 if p > a4 * n_bytes + b4 else 64 * 1024)
    if op == "reduce_scatter":
        if n_bytes <= 12 * 1024 or (n_bytes <= 256 * 1024 and pow2) or p >= 0.0012 * n_bytes + 8:
            return "recursive_doubling", 0.0  # recursive halving
        return "ring", 0.0
    if op == "allgather":
        if n_bytes < 50000:
            return ("recursive_doubling" if pow2 else "bruck"), 0.0
        return ("ring" if p % 2 else "neighbor_exchange"), 0.0
    return "pairwise", 0.0


def _times(op: str, n_bytes: float, p: int, alpha: float, ring_r: float, all_r: float,
           segment: float) -> dict[str, tuple[float, float]]:
    """{algorithm: (network seconds, bytes each rank reduces on the host)} for ``op``."""
    lg, extra = _log2(p)
    frac = (p - 1) / p
    log_hops = math.ceil(math.log2(p))
    nseg, seg = _segments(n_bytes, segment)
    if op == "allreduce":
        ring_messages = 2 * (p - 1) * max(1, math.ceil(n_bytes / p / segment)) if segment else 2 * (p - 1)
        return {"recursive_doubling": ((lg + extra) * (alpha + n_bytes / all_r), (lg + extra / 2) * n_bytes),
                "rabenseifner": ((2 * lg + extra) * alpha + 2 * frac * n_bytes / all_r + extra * n_bytes / all_r,
                                 frac * n_bytes + extra / 2 * n_bytes),
                "ring": (2 * (p - 1) * alpha + 2 * frac * n_bytes / ring_r, frac * n_bytes),
                "ring_segmented": (ring_messages * alpha + 2 * frac * n_bytes / ring_r, frac * n_bytes)}
    if op == "broadcast":
        return {"binomial": (log_hops * (alpha + n_bytes / all_r), 0.0),
                "ring": ((lg + p - 1) * alpha + n_bytes / all_r + frac * n_bytes / ring_r, 0.0),
                "pipeline": (_pipelined(p - 1, nseg, alpha, seg, ring_r), 0.0),
                "split_bintree": (_pipelined(log_hops, nseg, alpha, seg, all_r), 0.0)}
    if op == "reduce":
        return {"binomial": (_pipelined(log_hops, nseg, alpha, seg, all_r), log_hops * n_bytes),
                "linear": ((p - 1) * (alpha + n_bytes / all_r), (p - 1) * n_bytes),
                "rabenseifner": ((2 * lg + extra) * alpha + 2 * frac * n_bytes / all_r, frac * n_bytes),
                "pipeline": (_pipelined(p - 1, nseg, alpha, seg, ring_r), n_bytes),
                "binary": (_pipelined(log_hops, nseg, alpha, seg, all_r), 2 * n_bytes)}
    if op == "allgather":
        return {"recursive_doubling": (lg * alpha + frac * n_bytes / all_r, 0.0),
                "bruck": (log_hops * alpha + frac * n_bytes / all_r, 0.0),
                "ring": ((p - 1) * alpha + frac * n_bytes / ring_r, 0.0),
                "neighbor_exchange": (p / 2 * alpha + frac * n_bytes / all_r, 0.0)}
    if op == "reduce_scatter":
        return {"recursive_doubling": ((lg + extra) * alpha + frac * n_bytes / all_r, frac * n_bytes),
                "ring": ((p - 1) * alpha + frac * n_bytes / ring_r, frac * n_bytes)}
    return {"pairwise": ((p - 1) * (alpha + n_bytes / p / all_r), 0.0)}


def _cost(op: str, n_bytes: float, group: Cluster, options: CommOptions) -> CommCost:
    p = group.world_size
    if p == 1 or n_bytes <= 0:
        return zero_cost("none")
    library = library_for(options)
    mode = gpu_buffers_for(options, library)
    staging = staging_s(op, n_bytes, group, mode, library)
    pipelined_gpu = mode == "cuda_aware" and op not in REDUCING and group.gpu.kind != "cpu"
    if op == "sendrecv":
        link = group.inter_link if group.nodes > 1 else group.intra_link
        rate = connection_Bps(link, 1)
        if pipelined_gpu:
            rate = min(rate, pinned_copy_Bps(group))
        t = link.alpha_s + n_bytes / rate + staging
        if group.nodes > 1:
            t += cold_start_s(link, n_bytes, 1, options.idle_s)
        return CommCost(t, "p2p", "", {"intra": 0.0 if group.nodes > 1 else n_bytes,
                                       "inter": n_bytes if group.nodes > 1 else 0.0})
    hop = ring_hop_link(group)
    ring_r, all_r = ring_rate_Bps(group, 1), _all_ranks_rate(group)
    if pipelined_gpu:
        ring_r, all_r = min(ring_r, pinned_copy_Bps(group)), min(all_r, pinned_copy_Bps(group))
    if library.rules == "openmpi_1_10":
        default, segment = _ompi_choice(op, n_bytes, p)
    else:
        default, segment = _mpich_choice(op, n_bytes, p), 0.0
    table = _times(op, n_bytes, p, hop.alpha_s, ring_r, all_r, segment)
    choice = options.algorithm or default
    if choice not in table:
        raise ConfigError("strategy.collective", choice, f"an MPI algorithm for {op}: " + ", ".join(sorted(table)))
    network_s, reduced_bytes = table[choice]
    t = network_s + host_reduce_s(reduced_bytes, group) + staging
    volume = ring_volume_bytes(op, n_bytes, p) if op != "alltoall" else n_bytes
    if group.nodes > 1:
        streams = 1 if choice.startswith("ring") or choice == "pipeline" else group.gpus_per_node
        t += cold_start_s(group.inter_link, volume, streams, options.idle_s)
    by_link = alltoall_bytes_by_link(n_bytes, group) if op == "alltoall" else ring_bytes_by_link(volume, group)
    return CommCost(t, choice, "", by_link)


BACKEND = Backend(
    name="mpi",
    ops=library_ops(_cost, lambda b, g, o: _cost("alltoall", b, g, o), lambda b, g, o: _cost("sendrecv", b, g, o)),
    algorithms=ALGORITHMS,
    protocols=(),
    description="MPI (MPICH 3 or Open MPI 1.10 decision rules) on host memory, GPU buffers staged through the host",
    versions=tuple(MPI_LIBRARIES),
    default_version=DEFAULT_MPI_LIBRARY,
)
