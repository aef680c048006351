"""NCCL's own tuning tables and topology constants, as the library holds them.

Copied from NCCL's sources at commit b6475625 (NVIDIA/nccl, 2.19-2.20 era):
- src/graph/tuning.cc: ``baseLat`` (lines 56-59), ``hwLat`` (lines 65-78), ``llMaxBws``
  (86-90), ``perChMaxRingLL128Bws`` (92-96), ``perChMaxTreeLL128Bws`` (97-101),
  ``perChMaxTreeBws`` (102-106), ``getNetOverhead`` (111-117), the model refinements in
  ``ncclTopoTuneModel`` and ``treeCorrectionFactor`` / ``ncclTopoGetAlgoTime`` at the end of the file.
- src/graph/topo.h (commit 069a3d4): per-link NVLink bandwidth by compute capability
  (SM60_NVLINK_BW 18.0 ... SM100_NVLINK_BW 40.1, lines 21-26), PCI_BW 12.0 (line 28).
- src/graph/search.cc: the bandwidths the channel search tries (``speedArrayIntra``,
  ``speedArrayInter``, ``sm90SpeedArrayIntra``, ``sm90SpeedArrayInter``) and
  ``ncclTopoDupChannels`` (a graph of bwIntra >= 25 GB/s is duplicated, its bandwidth halved).
- src/graph/connect.cc ``ncclTopoPostset``: the channels are duplicated once more at run time
  (``nChannels = min(MAXCHANNELS, nChannels*2)``).
- src/include/device.h / collectives.h: NCCL_STEPS 8, the Simple ring's chunk = 4 steps and
  slice = 2 steps (ALLREDUCE_CHUNKSTEPS = NCCL_STEPS/2, ALLREDUCE_SLICESTEPS = NCCL_STEPS/4);
  the default buffer of the Simple protocol is 4 MiB (NCCL_BUFFSIZE, NCCL docs 'Environment
  Variables'); MAXCHANNELS 32.
Latencies are in microseconds and bandwidths in GB/s, as NCCL writes them.
"""

from __future__ import annotations

ALGORITHMS = ("tree", "ring", "nvls", "nvls_tree")
"""The algorithms modelled here (NCCL_ALGO names, lower case). CollNet needs in-network
reduction (SHARP) and is not modelled."""
PROTOCOLS = ("LL", "LL128", "Simple")

BASE_LAT_US = {
    "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 0.0},
    "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
    "nvls": {"LL": 0.0, "LL128": 0.0, "Simple": 0.0},
    "nvls_tree": {"LL": 0.0, "LL128": 0.0, "Simple": 0.0},
}
HW_LAT_US = {  # [hardware][algorithm][protocol]
    "nvlink": {
        "tree": {"LL": 0.6, "LL128": 1.25, "Simple": 28.0},
        "ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
        "nvls": {"LL": 0.0, "LL128": 0.0, "Simple": 23.0},
        "nvls_tree": {"LL": 0.0, "LL128": 0.0, "Simple": 23.0},
    },
    "pci": {
        "tree": {"LL": 1.0, "LL128": 1.9, "Simple": 28.0},
        "ring": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7},
        "nvls": {"LL": 0.0, "LL128": 0.0, "Simple": 0.0},
        "nvls_tree": {"LL": 0.0, "LL128": 0.0, "Simple": 0.0},
    },
    "net": {
        "tree": {"LL": 5.0, "LL128": 8.5, "Simple": 28.0},
        "ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0},
        "nvls": {"LL": 0.0, "LL128": 0.0, "Simple": 18.0},
        "nvls_tree": {"LL": 0.0, "LL128": 0.0, "Simple": 14.0},
    },
}
# Indexed [architecture][nodes index]: architecture 0 Volta, 1 Ampere, 2 Hopper; nodes index
# 0 one node, 1 two nodes, 2 more.
LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (87.7, 22.5, 19.0))
"""llMaxBws: for one node indexed by GPU architecture, for several by CPU vendor (row 0 Intel)."""
PER_CH_MAX_RING_LL128_BW = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7))
PER_CH_MAX_TREE_LL128_BW = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0))
PER_CH_MAX_TREE_BW = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0))
NET_OVERHEAD_US_INTEL = 1.0
"""getNetOverhead: 1 us on Intel x86 (2 on AMD), tripled for Simple; the floor of a ring step
across nodes."""
TREE_CORRECTION = {  # powers of two from 64 B (index = log2(bytes >> 6)), 23 entries
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}
RING_PLATEAU_FACTOR = {"volta": 1.9, "ampere+": 1.4}
"""ncclTopoGetAlgoTime: a multi-node Simple ring allreduce's latency x 1.9 (compute capability
< 8.0) or 1.4 ('plateau effect of ring')."""

SPEED_ARRAY_INTRA = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
SPEED_ARRAY_INTER = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
                     2.4, 1.2, 0.24, 0.12)
SM90_SPEED_ARRAY_INTRA = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0)
SM90_SPEED_ARRAY_INTER = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4,
                          1.2, 0.24, 0.12)
DUP_CHANNELS_MIN_BW = 25.0
"""ncclTopoDupChannels: a graph whose bwIntra is at least this is duplicated (bandwidth halved)."""
MAX_CHANNELS = 32
SEARCH_MAX_CHANNELS = MAX_CHANNELS // 2

NVLINK_BW_BY_CC = ((10.0, 40.1), (9.0, 20.6), (8.6, 12.0), (8.0, 20.0), (7.0, 20.0), (6.0, 18.0))
"""ncclTopoNVLinkBw: GB/s per NVLink by the lowest compute capability it applies from (sm86 12.0)."""
PCI_BW_GEN3 = 12.0

NCCL_STEPS = 8
SIMPLE_BUFFSIZE_BYTES = 4 * 2**20
SIMPLE_STEP_BYTES = SIMPLE_BUFFSIZE_BYTES // NCCL_STEPS
RING_CHUNK_STEPS = NCCL_STEPS // 2
RING_SLICE_STEPS = NCCL_STEPS // 4

PROTOCOL_WIRE_EFFICIENCY = {"LL": 0.5, "LL128": 120.0 / 128.0, "Simple": 1.0}
"""Payload per byte a protocol puts on the link: LL sends 8-byte lines of 4 data bytes and a 4-byte
flag (src/include/device.h union ncclLLFifoLine), LL128 128-byte lines with 8 flag bytes
(NCCL_LL128_DATAELEMS 15 of 16), Simple the data alone."""


def nvlink_bw_GBps(compute_capability: float) -> float:
    for cc, bw in NVLINK_BW_BY_CC:
        if compute_capability >= cc:
            return bw
    return 20.0  # topo.h: SM80_NVLINK_BW for an unknown part
