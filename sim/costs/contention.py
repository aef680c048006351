"""Compute slowed by a collective that runs on the same GPU (pure functions; no SimPy).

A collective library that runs as GPU kernels (NCCL) takes two things from the layers that run
beside it, and each layer loses what its roofline says it needs:

1. **Streaming multiprocessors.** NCCL launches one thread block per channel and each block stays
   resident for the whole collective (src/enqueue.cc: the kernel's grid is the channel count; each
   block loops over its channel's chunks until the operation ends), so while a collective is in
   flight ``c`` of the GPU's ``S`` SMs are held. A GEMM or convolution whose ``B`` thread blocks
   fill ``ceil(B / (k S))`` waves (``k`` blocks resident per SM) needs ``ceil(B / (k (S - c)))``
   waves on what is left: the compute-bound part of a layer takes ``waves_held / waves_free``
   times longer (wave quantization). Many waves: ``S / (S - c)``; exactly one full wave: 2x, the
   tail effect NVIDIA's developer forum measured on an H100 (a 132-block GEMM beside a 24-block
   ncclAllGather 'nearly doubles', MFU 80 % -> 47 %: tests/test_contention.py).
2. **Memory bandwidth** (HBM, through L2). Every byte a collective moves is read and written in
   the GPU's memory several times (``hbm_bytes_per_byte_sent``, counted from NCCL's device code),
   so a collective moving R bytes/s takes ``h x R`` of the memory bandwidth ``W``; the memory-bound
   part of a layer then runs at ``W - min(h R, W / 2)`` (two streams sharing one resource max-min
   fairly: the compute stream keeps at least half).

A layer's time under contention is its roofline with both applied,
``t' = launch + max(C x wave_ratio, M x W / (W - min(h R, W/2)))`` (C, M: the roofline's compute and
memory times, sim.costs.compute.pass_loads), as a factor on its time (measured or calibrated times
scale by the same factor). Which part dominates is the roofline's own verdict: a convolution
loses SMs, a batch norm loses bandwidth. L2 capacity taken by the collective's streaming data is
not modelled beyond the HBM traffic it causes (the layer table has no cache reuse to lose).

Checks (tests/test_contention.py): the one-wave GEMM of the forum thread; "Characterizing
Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning" (Lee et al., arXiv
2507.03114: overlapped compute 18.9 % slower on average, at most 40 %, on 4 A100 / H100 / MI250 /
MI210 running GPT and LLaMA models) as the range the model's transformer layers must fall in.
Nothing here is fitted to either.

Applies only while a collective runs beside compute: the event layer asks for it layer by layer
(sim/engine/streams.py), in the fast path and the detailed mode alike, for every framework that
overlaps (``strategy.comm_slows_compute``, on by default; a framework that reduces after
backward has nothing in flight during compute).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# -- GEMM tiles: how many thread blocks a layer's GEMM launches ---------------------------------


@dataclass(frozen=True)
class GemmTile:
    """The output tile one thread block computes, and how many such blocks one SM holds."""

    name: str
    tile_m: int
    tile_n: int
    blocks_per_sm: int
    source: str

    @property
    def elems(self) -> int:
        return self.tile_m * self.tile_n


REGISTERS_PER_SM = 65536
"""32-bit registers per SM on compute capability 5.0-9.0 (CUDA C++ Programming Guide, 'Technical
Specifications per Compute Capability')."""

GEMM_TILES: dict[str, GemmTile] = {
    "simt": GemmTile(
        "simt", 128, 128, 2,
        "CUTLASS DefaultGemmConfiguration<OpClassSimt>: ThreadblockShape 128x128x8, WarpShape 32x64x8 (8 warps, 256 "
        "threads), 2 stages (include/cutlass/gemm/device/default_gemm_configuration.h @044405ce); 2 blocks per SM: "
        "65,536 registers / (256 threads x 128), assumed: at most 128 registers per thread for 64 accumulators"),
    "tensorop_sm70": GemmTile(
        "tensorop_sm70", 128, 256, 1,
        "CUTLASS DefaultGemmConfiguration<OpClassTensorOp, Sm70/Sm75>: ThreadblockShape 128x256x32, WarpShape 64x64 "
        "(8 warps), 2 stages (default_gemm_configuration.h @044405ce); 1 block per SM: a 64x64 warp tile keeps 128 fp32 "
        "accumulators per thread, so > 128 registers x 256 threads > 65,536 / 2"),
    "tensorop_sm80": GemmTile(
        "tensorop_sm80", 128, 256, 1,
        "CUTLASS DefaultGemmConfiguration<OpClassTensorOp, Sm80>: ThreadblockShape 128x256x64, 3 stages "
        "(default_gemm_configuration.h @044405ce): (128x64 + 64x256) x 2 B x 3 = 144 KiB of shared memory, 1 block per "
        "SM on A100 (164 KiB) and H100 (228 KiB); assumed for Hopper too, whose cuBLAS kernels use 128x256 tiles"),
}
"""Default tiles per operator class. cuBLAS and cuDNN pick among many tiles by problem size; the
library defaults stand for them (the wave count then follows from the layer's output size)."""

TENSOR_CORE_DTYPES = {"fp16": 7.0, "bf16": 8.0, "tf32": 8.0, "fp8": 8.9, "int8": 7.5}
"""Compute dtypes that run on tensor cores, from the compute capability that introduced them
(CUDA C++ Programming Guide, 'Warp Matrix Functions': half 7.0, int8 7.2/7.5, bf16 and tf32 8.0,
fp8 8.9)."""


def gemm_tile(compute_capability: float | None, dtype: str) -> GemmTile:
    """The tile a GEMM of ``dtype`` runs with on a GPU of that compute capability: tensor-core
    tiles where the dtype has tensor cores there, else the SIMT (CUDA-core) tile."""
    cc = compute_capability if compute_capability is not None else 0.0
    introduced = TENSOR_CORE_DTYPES.get(dtype)
    if introduced is None or cc < introduced:
        return GEMM_TILES["simt"]
    return GEMM_TILES["tensorop_sm80" if cc >= 8.0 else "tensorop_sm70"]


def gemm_blocks(out_elems: float, tile: GemmTile) -> int:
    """Thread blocks of a GEMM (or implicit-GEMM convolution) writing ``out_elems`` outputs:
    ceil(M / tile_m) x ceil(N / tile_n), taken as ceil(M N / (tile_m tile_n)) when only the
    output's size is known (a layer table's activation elements)."""
    return max(1, math.ceil(out_elems / tile.elems)) if out_elems > 0 else 0


def waves(blocks: int, blocks_per_sm: int, sms: int) -> int:
    """Waves of ``blocks`` thread blocks on ``sms`` SMs holding ``blocks_per_sm`` each."""
    return math.ceil(blocks / (blocks_per_sm * sms))


def wave_ratio(blocks: int | None, blocks_per_sm: int, sms: int, held: int) -> float:
    """Time of a compute-bound kernel with ``held`` of ``sms`` SMs taken, over its time with all:
    waves(held) / waves(free). ``blocks`` None: a kernel whose grid is sized to fill the GPU
    many times over (split-K weight gradients), the asymptote S / (S - held)."""
    held = min(max(held, 0), sms - 1)
    if held == 0:
        return 1.0
    if blocks is None:
        return sms / (sms - held)
    if blocks <= 0:
        return 1.0
    return waves(blocks, blocks_per_sm, sms - held) / waves(blocks, blocks_per_sm, sms)


# -- a layer's pass as the roofline sees it ---------------------------------------------------


@dataclass(frozen=True)
class PassLoad:
    """One layer's forward or backward on one GPU: the roofline's terms and its GEMMs' grids."""

    compute_s: float
    """FLOPs / (peak x efficiency)."""
    memory_s: float
    """Bytes / memory bandwidth."""
    launch_s: float = 0.0
    gemms: tuple[tuple[float, int | None], ...] = ()
    """(share of compute_s, thread blocks) of each GEMM of the pass; blocks None: fills many waves."""
    blocks_per_sm: int = 1

    @property
    def free_s(self) -> float:
        return self.launch_s + max(self.compute_s, self.memory_s)


MEMORY_ONLY = PassLoad(0.0, 1.0)
"""A pass that only streams memory (an optimizer step, an elementwise kernel)."""


@dataclass(frozen=True)
class Footprint:
    """What a collective in flight takes from the GPU it runs on."""

    sms_held: int
    """Thread blocks resident for the whole collective (NCCL: one per channel)."""
    hbm_Bps: float
    """Memory traffic its kernels (and copies on its stream) generate while it runs."""
    sms: int
    """The GPU's SMs."""
    memory_Bps: float
    """The GPU's memory bandwidth."""

    @property
    def memory_ratio(self) -> float:
        """A memory-bound kernel's time beside this collective over its time alone:
        W / (W - min(h R, W / 2))."""
        if self.memory_Bps <= 0 or self.hbm_Bps <= 0:
            return 1.0
        return self.memory_Bps / (self.memory_Bps - min(self.hbm_Bps, self.memory_Bps / 2))


NO_FOOTPRINT = Footprint(0, 0.0, 0, 0.0)


def contention_factor(load: PassLoad, footprint: Footprint) -> float:
    """t' / t for a pass beside a collective: (launch + max(C x waves ratio, M x memory ratio))
    / (launch + max(C, M)); >= 1, and 1 with nothing held and no traffic."""
    free = load.free_s
    if free <= 0 or (footprint.sms_held <= 0 and footprint.hbm_Bps <= 0):
        return 1.0
    if load.gemms and footprint.sms_held > 0 and footprint.sms > 1:
        ratio = sum(share * wave_ratio(blocks, load.blocks_per_sm, footprint.sms, footprint.sms_held)
                    for share, blocks in load.gemms)
    elif footprint.sms_held > 0 and footprint.sms > 1:
        ratio = wave_ratio(None, 1, footprint.sms, footprint.sms_held)
    else:
        ratio = 1.0
    held = load.launch_s + max(load.compute_s * ratio, load.memory_s * footprint.memory_ratio)
    return max(1.0, held / free)


def contended_time_s(t_s: float, load: PassLoad, footprint: Footprint | None) -> float:
    """A pass that takes ``t_s`` alone, run beside a collective with ``footprint``."""
    if footprint is None or t_s <= 0:
        return t_s
    return t_s * contention_factor(load, footprint)


def beside_comm_s(compute_s: float, comm_s: float, factor: float) -> float:
    """Compute of ``compute_s`` (alone) that starts with a collective of ``comm_s`` beside it and is
    slowed by ``factor`` (``contention_factor``) while that runs, at full speed after: the event
    layer's rule (sim/engine/streams.py ``_work``) in closed form. The collective outlasts the
    compute (comm_s >= factor x compute_s): compute_s x factor; else it progresses comm_s / factor
    during the collective and finishes the rest alone: compute_s + comm_s (1 - 1 / factor)."""
    if compute_s <= 0 or comm_s <= 0 or factor <= 1.0:
        return compute_s
    if comm_s >= factor * compute_s:
        return compute_s * factor
    return compute_s + comm_s * (1.0 - 1.0 / factor)


def split_load(load: PassLoad, split: int) -> PassLoad:
    """One rank's share of a pass split ``split`` ways (tensor or context parallelism): its
    compute and memory seconds / split, each GEMM's thread blocks / split (rounded up: the output
    is cut along one dimension), the launch as it is."""
    if split <= 1:
        return load
    gemms = tuple((share, None if blocks is None else max(1, math.ceil(blocks / split)))
                  for share, blocks in load.gemms)
    return PassLoad(load.compute_s / split, load.memory_s / split, load.launch_s, gemms, load.blocks_per_sm)


# -- what a collective takes --------------------------------------------------------------------


def hbm_bytes_per_byte_sent(algorithm: str, ranks: int, network_exit: bool = False) -> float:
    """Bytes read or written in one GPU's memory per byte it sends, for NCCL's kernels.

    Ring allreduce (src/device/all_reduce.h runRing, each step a primitive of prims_simple.h):
    per loop of n chunks a rank runs directSend (reads its input), n-2 directRecvReduceDirectSend
    and one directRecvReduceCopyDirectSend (read the receive FIFO and the input), n-2
    directRecvCopyDirectSend and a final directRecv (read the FIFO, write the output), and its
    predecessor writes each of the 2(n-1) received chunks into its FIFO: n input reads + 2(n-1)
    FIFO reads + n output writes + 2(n-1) incoming writes = 6n - 4 chunk-sizes for 2(n-1) chunks
    sent: (3n - 2) / (n - 1) per byte (4 at n = 2, -> 3). Trees (runTreeUpDown: a chain inside a
    node, arity 1-2) and NVLS (scatter to the switch buffer, multimem reduce, gather) count 3 per
    byte of bus traffic the same way. A ring's exit GPU with GPUDirect RDMA writes its send FIFO in
    its own memory and the NIC reads it back: 2 more per byte sent (``network_exit``)."""
    if algorithm == "ring" or algorithm.startswith("ring"):
        n = max(ranks, 2)
        per = (3 * n - 2) / (n - 1)
    else:
        per = 3.0
    return per + (2.0 if network_exit else 0.0)


def bus_bytes_sent(op: str, n_bytes: float, ranks: int) -> float:
    """Bytes one rank sends for ``op`` of ``n_bytes`` over ``ranks`` (nccl-tests' bus bytes:
    allreduce 2(n-1)/n S, allgather and reduce-scatter (n-1)/n S; doc/PERFORMANCE.md)."""
    if ranks <= 1:
        return 0.0
    factor = 2.0 * (ranks - 1) / ranks if op == "allreduce" else (ranks - 1) / ranks
    return factor * n_bytes


def collective_footprint(sms_held: int, hbm_bytes: float, duration_s: float, sms: int,
                         memory_Bps: float) -> Footprint:
    """A collective that holds ``sms_held`` SMs and moves ``hbm_bytes`` through memory over ``duration_s``."""
    rate = hbm_bytes / duration_s if duration_s > 0 else 0.0
    return Footprint(min(max(sms_held, 0), max(sms - 1, 0)), rate, sms, memory_Bps)


def comm_footprint(n_bytes: float, sent_bytes_per_rank: float, comm_s: float, algorithm: str, cluster, strategy,
                   extra_hbm_bytes: float = 0.0) -> Footprint | None:
    """What one gradient bucket's reduction of ``n_bytes`` taking ``comm_s`` takes from each GPU
    while it runs; None where nothing does (overlap slowdown off, a library that runs no GPU
    kernels, one rank). ``sent_bytes_per_rank``: what each rank puts on links (2(n-1)/n S for a
    ring allreduce); ``algorithm``: what the library runs; ``extra_hbm_bytes``: copies on the same
    stream (Horovod's fusion buffer).

    NCCL: its run-time channels as blocks (sim.costs.backends.nccl.ring_graph; NVLS runs
    NVLS_NCHANNELS = 16, src/transport/nvls.cc), and ``hbm_bytes_per_byte_sent`` x the bytes each
    rank sends; the slowest GPU sets the pace of synchronous training, so a multi-node ring over
    RDMA counts its exit GPU's send FIFO (GPUDirect RDMA, which NCCL uses where the NIC and GPU
    share a PCIe switch: assumed). Libraries that reduce on the host (parameter servers over
    gRPC, gloo, MPI) hold no SMs: the gradient is copied out to the host and the result back in by
    the copy engines, 2 S through the GPU's memory."""
    if not strategy.comm_slows_compute or cluster.world_size <= 1 or comm_s <= 0 or n_bytes <= 0:
        return None
    gpu = cluster.gpu
    if gpu.kind != "gpu" or gpu.sm_count <= 1:
        return None
    if strategy.collective == "ps" or strategy.backend != "nccl":
        return collective_footprint(0, 2.0 * n_bytes + extra_hbm_bytes, comm_s, gpu.sm_count, gpu.memory_bandwidth_Bps)
    from sim.costs.backends.nccl import ring_graph
    from sim.costs.backends.nccl_pipeline import NVLS_CHANNELS

    algo = algorithm or "ring"
    channels = NVLS_CHANNELS if algo.startswith("nvls") else ring_graph(cluster).runtime_channels
    rdma_exit = cluster.nodes > 1 and cluster.inter_link.kind in ("roce", "infiniband")
    hbm = hbm_bytes_per_byte_sent(algo, cluster.world_size, network_exit=rdma_exit) * sent_bytes_per_rank
    return collective_footprint(channels, hbm + extra_hbm_bytes, comm_s, gpu.sm_count, gpu.memory_bandwidth_Bps)
