"""How NCCL's kernels cut a collective into chunks and move them: what its tuning model leaves out.

NCCL's tuner (tuning.cc, reproduced in nccl.py) prices a collective as latency + bytes /
bandwidth. Its kernels then run it in chunks per channel (one CUDA block each), and two of their
mechanisms make the time depend on the size in ways that formula does not hold:

- Ring chunk sizing (src/device/all_reduce.h ``runRing``): each loop gives every (channel, rank)
  slot one chunk, sized ``min(chunkSize, divUp(rest, nChannels x nRanks x minChunk) x minChunk)``
  for LL and LL128 (minChunk = nthreads x bytes per grain, /2 for LL128) and
  ``roundUp(min(chunkSize, divUp(rest, nChannels x nRanks)), (nthreads - 32) x 8 B)`` for Simple.
  A rank hands a step on as a whole (its FIFO step flag; over a network the proxy's send of the
  step), so a full chunk's 2(n-1) hops in sequence set the pace even where the rounding leaves
  other slots short or empty: steps x the busiest slot's chunk, not the average. (LL128 flags
  every 128-byte line and could forward sooner on NVLink; A100 at 2 and 4 MB (LL128,
  the source's full table) follows the whole-chunk form within 4 %, the average 20-39 % fast.)
- NVLink SHARP (all_reduce.h ``RunWorkElement<..., NCCL_ALGO_NVLS, ...>``): each channel runs
  three warp groups one after the other on each loop of nHeads chunks (scatter into the NVLS
  buffer, multimem reduce and broadcast by the chunk's head rank, gather out), handing a loop on
  through NCCL's step FIFO only when all of it is done (prims_simple.h ``ScatterGatherOp``:
  one wait and one post for all peers). A pipeline of k stages fed loop by loop fills in
  (k - 1) loop times before it delivers at its rate; the chunk is chosen by the size
  (enqueue.cc, NVLS chunk adaptation), so that fill grows with the size up to 128 KiB chunks.

Not modelled: below nChannels x nThreads x threadThreshold bytes (enqueue.cc ``getAlgoInfo``;
tuning.cc thresholds 8 B a thread for LL and LL128, x nRanks for ring LL, 64 B for Simple: under
768 KiB on 24 channels) rings and trees run on fewer channels. NCCL's own tuner prices those sizes
with every channel (ncclTopoGetAlgoTime scales by nChannels only when a caller fixed it), they are
latency-bound, and a bandwidth cut in proportion to the channels would, through the ring's
per-hop chain, price some messages below smaller ones; so the prediction keeps all channels.

Sources: NVIDIA/nccl 2.18-2.21 (the releases of the tuning-model table sets) (src/device/all_reduce.h, all_gather.h, reduce_scatter.h,
prims_simple.h, primitives.h ``ProtoLL``/``ProtoLL128``; src/enqueue.cc; src/graph/search.cc;
src/transport/nvls.cc ``NVLS_NCHANNELS``; src/include/device.h).
"""

from __future__ import annotations

import math

from sim.costs.backends.nccl_tables import DEFAULT, NcclTables

MAX_THREADS = DEFAULT.max_threads
"""device.h: NCCL_LL_MAX_NTHREADS 512, NCCL_LL128_MAX_NTHREADS 640, NCCL_SIMPLE_MAX_NTHREADS 512
(per release: NcclTables.max_threads)."""


def ring_threads(proto: str, graph_busbw_GBps: float, t: NcclTables = DEFAULT) -> int:
    """tuning.cc ncclTopoTuneModel: a ring's Simple blocks get 256 threads where the ring graph's
    bwIntra x nChannels <= PCI_BW (12 GB/s), NCCL_SIMPLE_MAX_NTHREADS otherwise."""
    if proto == "Simple" and graph_busbw_GBps <= t.pci_bw:
        return min(256, t.max_threads[proto])
    return t.max_threads[proto]
BYTES_PER_GRAIN = {"LL": 8, "LL128": 8 * 15 * 8 // 16}
"""primitives.h: ProtoLL moves 8 data bytes per thread and 16-byte line; ProtoLL128
NCCL_LL128_SHMEM_ELEMS_PER_THREAD (8) x NCCL_LL128_DATAELEMS (15) x 8 B / NCCL_LL128_LINEELEMS (16)."""
CHUNK_BYTES = DEFAULT.chunk_bytes
"""Data per ring step and channel at most (runRing's chunkSize = calcBytePerStep x chunk steps):
Simple 4 steps of its 4 MiB / 8 buffer; LL one step of its 512 KiB / 8 buffer at half payload;
LL128 one step of its 4.7 MB / 8 buffer at 120/128 (device.h buffer sizes; per release:
NcclTables.chunk_bytes)."""

NVLS_CHANNELS = 16
"""src/transport/nvls.cc: NCCL_PARAM(NvlsChannels, "NVLS_NCHANNELS", 16); enqueue.cc getAlgoInfo
runs NVLS on comm->nvlsChannels blocks whatever the size ('NVLS should not need more than 16
channels to get peak BW')."""
NVLS_MAX_CHUNK_BYTES = 131072
NVLS_CHUNK_CUTS = ((64, 65536), (8, 32768), (2, 16384))
"""enqueue.cc computeColl (2.19-2.20), NVLS: chunkSize = min(stepSize, 128 KiB); then, with
concurrentOps = nChannels x nHeads, chunkSize drops to 64 KiB if nBytes < 64 x concurrentOps x
chunkSize, to 32 KiB if nBytes < 8 x concurrentOps x chunkSize, to 16 KiB if nBytes < 2 x ..."""
NVLS_STAGES = {"allreduce": 3, "reduce_scatter": 2, "allgather": 2}
"""Warp groups a single-node NVLS kernel chains per loop: allreduce scatter -> reduce (multimem
ld_reduce + st) -> gather (all_reduce.h); reduce_scatter scatter -> reduce (reduce_scatter.h);
allgather bcast -> gather (all_gather.h)."""


def ring_chunk_bytes(proto: str, rest_bytes: float, channels: int, nranks: int, nthreads: int,
                     t: NcclTables = DEFAULT) -> float:
    """The chunk runRing gives each (channel, rank) slot in a loop over ``rest_bytes``:
    Simple: roundUp(min(C, ceil(rest / (nc n))), nthreads x 8 B) (the kernel's (nThreads - 32) x
    8 B, its nThreads being ``nthreads`` plus one sync warp, enqueue.cc); LL/LL128:
    min(C, ceil(rest / (nc n m)) x m), m = nthreads x BYTES_PER_GRAIN, halved for LL128 ('makes
    performance much, much smoother', all_reduce.h)."""
    slots = channels * nranks
    if proto == "Simple":
        granule = nthreads * 8
        return float(math.ceil(min(t.chunk_bytes[proto], math.ceil(rest_bytes / slots)) / granule) * granule)
    grain = nthreads * BYTES_PER_GRAIN[proto] // (2 if proto == "LL128" else 1)
    return float(min(t.chunk_bytes[proto], math.ceil(rest_bytes / (slots * grain)) * grain))


def ring_critical_bytes(proto: str, n_bytes: float, channels: int, nranks: int, nthreads: int,
                        t: NcclTables = DEFAULT) -> float:
    """Bytes one ring step moves on the busiest slot, summed over runRing's loops: loops advance
    by nc x n x C (the full chunk), each sized by ring_chunk_bytes on what is left. The ring's
    throughput time is steps x this / per-channel rate; with no rounding it is n_bytes / (nc n)."""
    if n_bytes <= 0:
        return 0.0
    chunk = t.chunk_bytes[proto]
    full = math.floor(n_bytes / (channels * nranks * chunk))  # loops of whole chunks
    rest = n_bytes - full * channels * nranks * chunk
    return full * chunk + (ring_chunk_bytes(proto, rest, channels, nranks, nthreads, t) if rest > 0 else 0.0)


def tree_depth(nranks: int, nnodes: int) -> int:
    """graph/connect.cc connectTrees: 'not an exact value but a good approximation',
    depth = nRanks / nNodes - 1 + log2i(nNodes)."""
    return nranks // max(1, nnodes) - 1 + int(math.log2(max(1, nnodes)))


def tree_chunk_bytes(proto: str, n_bytes: float, channels: int, nranks: int, nnodes: int,
                     t: NcclTables = DEFAULT) -> float:
    """The chunk a tree allreduce moves per channel and hop (enqueue.cc computeColl, 2.8-2.19):
    trees take one step of the protocol's buffer, not the ring's ALLREDUCE_CHUNKSTEPS
    (chunkSteps = 1 unless ring Simple). Simple then halves it while nBytes / (nChannels x chunk)
    < depth x 8 (down to 128 KiB), < depth x 4 (64 KiB), < depth (32 KiB); LL128 while it is
    < nsteps x 64 / ppn (128 KiB), < nsteps x 16 / ppn (32 KiB), nsteps = 1 + log2i(nNodes) +
    0.1 ppn, ppn = nRanks / nNodes; LL keeps its step."""
    if proto == "LL":
        return float(t.chunk_bytes["LL"])
    per_channel = n_bytes / max(1, channels)
    if proto == "Simple":
        chunk = float(t.simple_buffsize_bytes / t.nccl_steps)
        depth = tree_depth(nranks, nnodes)
        cuts: tuple[tuple[float, float], ...] = ((depth * 8, 131072), (depth * 4, 65536), (depth, 32768))
    else:  # LL128: one step of its buffer, at 120/128 payload
        chunk = float(t.chunk_bytes["LL128"])
        ppn = nranks / max(1, nnodes)
        nsteps = 1 + int(math.log2(max(1, nnodes))) + 0.1 * ppn
        cuts = ((nsteps * 64 / ppn, 131072), (nsteps * 16 / ppn, 32768))
    for below, floor_bytes in cuts:
        while per_channel / chunk < below and chunk > floor_bytes:
            chunk /= 2
    return chunk


def nvls_chunk_bytes(n_bytes: float, channels: int, heads: int) -> int:
    """enqueue.cc's NVLS chunk: 128 KiB, cut to 64 / 32 / 16 KiB below 64 / 8 / 2 x
    concurrentOps x chunk bytes (concurrentOps = channels x heads)."""
    chunk = min(DEFAULT.simple_buffsize_bytes // DEFAULT.nccl_steps, NVLS_MAX_CHUNK_BYTES)
    ops = channels * heads
    for factor, smaller in NVLS_CHUNK_CUTS:
        if n_bytes < factor * ops * chunk and chunk > smaller:
            chunk = smaller
    return chunk


def nvls_fill_s(op: str, n_bytes: float, channels: int, heads: int, alg_Bps: float) -> float:
    """The pipeline fill of NCCL's NVLS kernel: (stages - 1) x unit / (alg_Bps / channels), where
    a channel's unit is one loop, heads x chunk bytes of the input (or all its n_bytes / channels
    when that is less). The stages run at the channel's rate, each loop waiting for the stage
    before it (a balanced k-stage pipeline: T = (N + k - 1) x unit time); the kernel's warp split
    (scatter 8, reduce 5, gather 7 of 20 warps on 8 ranks) is NCCL's own balance of the stages."""
    if n_bytes <= 0:
        return 0.0
    unit = min(heads * nvls_chunk_bytes(n_bytes, channels, heads), n_bytes / channels)
    return (NVLS_STAGES.get(op, 2) - 1) * unit / (alg_Bps / channels)
