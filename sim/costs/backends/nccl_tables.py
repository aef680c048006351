"""NCCL's own tables and mechanisms, one table set per release, each with its source commit.

A scenario names the NCCL it runs (``strategy.library_version``, e.g. ``"2.3"``; default
``DEFAULT_NCCL_VERSION``, the newest modelled); ``NCCL_VERSIONS`` maps each minor version the
model knows to the table set that stands for it. A version not listed is refused with the list.

Every number below is NVIDIA/nccl's, at the commit its set names; tests/test_nccl_tables_source.py
compares each with the numbers read mechanically out of the source at that commit
(tests/data/nccl/tables.json, written by scripts/extract_nccl_tables.py with the file, line range
and SHA-256 of the source lines). Latencies are in microseconds and bandwidths in GB/s, as NCCL
writes them. What each release has and lacks, read at its tag:

- 1.3 (v1.3.4-1, NCCL 1's last release; NCCL 1.x was single-node and single-process): one ring
  inside one node, one protocol, a 2 MiB buffer (src/core.h DEFAULT_BUFFER_SIZE_BYTES 1 << 21).
- 2.0-2.3 (v2.3.7-1, the first 2.x source NVIDIA published: 2.3.5 was 'open-sourced with no new
  features or fixes', its release notes; 2.0-2.2 were binary releases): rings only (no trees:
  'Implemented tree-based algorithms', 2.4.2 release notes), protocols LL and Simple (no LL128:
  src/collectives/device/prims_ll128.h first appears in v2.5.6), no tuning model (src/graph/
  tuning.cc first appears in v2.5.6): LL up to a size threshold (src/include/common_coll.h
  ncclGetCollResource), Simple above; rings: one per NIC across nodes (src/transport/net.cu
  netGetRings marks each NIC used once), one over PCIe (src/transport/p2p.cu p2pComputeRingsPci),
  one per NVLink of a GPU (assumed: the NVLink ring search, p2pComputeRingsNvLink, finds as many
  rings as a GPU has links out), at most MAXRINGS 16, not duplicated; sockets: one per connection,
  progressed by that connection's own proxy thread (src/transport/net_socket.cu has one fd per
  comm; src/transport.cu starts a proxy thread per connector); no ncclSend/ncclRecv (first in
  v2.7.3, src/collectives/sendrecv.cc). The 2.0-2.2 binaries are run as 2.3.7's source (assumed:
  their release notes, 2.0.5 to 2.2.13, name no change of algorithm, protocol or transport
  beyond RoCE v2 GID selection and collective aggregation; the 2.3.5 commit f93fe9bf lists 'Improve
  LL/regular tuning', so LL predates the first public source). Having no model of its own, this
  era's latency per ring step is NCCL's first published one (v2.5.6 tuning.cc baseLat/hwLat for
  ring LL and Simple; assumed: the same protocols on the same kernels' proxy path).
- 2.18 (v2.18.5-1; 2.18.3-2.18.6 share its tables, 2.18.1 does not): tuning model; NVLS for
  allreduce only; tree Simple hwLat 4/6/14 us; SM90_NVLINK_BW 20.0.
- 2.19, 2.20 (v2.20.5-1; 2.19.3-2.20.5 share its tables, 2.19.1 does not): NVLS also for
  reduce_scatter and allgather; tree Simple hwLat 28 us; SM90_NVLINK_BW 20.6.
- 2.21 (v2.21.5-1): sm90SpeedArrayIntra gains 11.0; llMaxBws for Hopper 141/45/35; ring LL
  busBw x 0.5 (was 1/4, 1/3 for some operations); NVLS hwLat over NVLink 25 us (was 23).
Between 2.5 and 2.17 the tables changed nearly every release (baseLat and hwLat grew from 6 to
18 entries, the speed arrays appeared in 2.10); no table set stands for those releases yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.errors import ConfigError

ALGORITHMS = ("tree", "ring", "nvls", "nvls_tree")
"""The algorithms modelled (NCCL_ALGO names, lower case). CollNet needs in-network reduction
(SHARP) and is not modelled."""
PROTOCOLS = ("LL", "LL128", "Simple")

Lat = dict[str, dict[str, float]]
Row3 = tuple[tuple[float, float, float], tuple[float, float, float], tuple[float, float, float]]


def _lat(tree: tuple[float, float, float], ring: tuple[float, float, float],
         nvls: tuple[float, float, float] = (0.0, 0.0, 0.0), nvls_tree: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> Lat:
    """One row of baseLat/hwLat: {algorithm: {protocol: us}} from NCCL's (LL, LL128, Simple) triples."""
    return {a: dict(zip(PROTOCOLS, v, strict=True)) for a, v in (("tree", tree), ("ring", ring), ("nvls", nvls),
                                                      ("nvls_tree", nvls_tree))}


@dataclass(frozen=True)
class SocketDefaults:
    """NCCL's socket transport (src/transport/net_socket.cc ncclNetSocketGetNsockNthread)."""

    settable: bool
    """NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD exist (from 2.4.8)."""
    default: tuple[int, int] = (0, 1)
    """(helper threads, sockets per thread) on a NIC of no vendor NCCL knows; 0 helper threads:
    the connection's one socket is progressed by the GPU's proxy thread."""
    by_vendor: dict[str, tuple[int, int]] = field(default_factory=dict)
    max_sockets: int = 64
    max_threads: int = 16


@dataclass(frozen=True)
class NcclTables:
    """One NCCL release's tables and mechanisms (see the module docstring for each field's source)."""

    release: str
    commit: str
    versions: tuple[str, ...]
    """The minor versions this set stands for (keys of NCCL_VERSIONS)."""
    note: str
    tuner: str
    """model: ncclTopoTuneModel/ncclTopoGetAlgoTime (2.5+); thresholds: LL below a size
    (2.0-2.4); single_ring: NCCL 1.x."""
    multi_node: bool
    p2p: bool
    """ncclSend/ncclRecv (and so all-to-all) exist."""
    algorithms: tuple[str, ...]
    protocols: tuple[str, ...]
    nvls_ops: tuple[str, ...]
    base_lat_us: Lat
    hw_lat_us: dict[str, Lat]
    """[nvlink|pci|net][algorithm][protocol]."""
    max_channels: int
    """MAXCHANNELS (MAXRINGS before 2.4)."""
    runtime_dup: bool
    """ncclTopoPostset doubles the channels at run time (connect.cc)."""
    simple_buffsize_bytes: int
    nccl_steps: int
    """Slots of a connection's buffer that may be in flight (NCCL_STEPS; before 2.4 the Simple
    buffer's ALLREDUCE_BUFCHUNKS x ALLREDUCE_SUBSTEPS)."""
    chunk_bytes: dict[str, float]
    """Payload a ring step moves per channel at most, per protocol."""
    window_bytes: dict[str, float]
    """Payload a connection's buffer holds per protocol: what it may have in flight (its slots)."""
    max_threads: dict[str, int]
    socket: SocketDefaults
    pci_bw: float = 12.0
    nvlink_bw_by_cc: tuple[tuple[float, float], ...] = ()
    """(lowest compute capability, GB/s per NVLink): ncclTopoNVLinkBw's cases in order."""
    ll_max_bw: Row3 | None = None
    per_ch_max_ring_ll128_bw: Row3 | None = None
    per_ch_max_tree_ll128_bw: Row3 | None = None
    per_ch_max_tree_bw: Row3 | None = None
    ring_ll_factor: tuple[float, float] = (1 / 4, 1 / 3)
    """tuning.cc's ring LL busBw factor: (across nodes or allreduce/reduce, otherwise)."""
    net_overhead_us: float = 0.0
    """getNetOverhead on Intel x86 (tripled for Simple); 0: not in this release."""
    tree_correction: dict[str, tuple[float, ...]] | None = None
    ring_plateau: dict[str, float] | None = None
    """ncclTopoGetAlgoTime's 'plateau effect of ring' (volta / ampere+); None: not in this release."""
    speed_intra: tuple[float, ...] = ()
    speed_inter: tuple[float, ...] = ()
    sm90_speed_intra: tuple[float, ...] = ()
    sm90_speed_inter: tuple[float, ...] = ()
    dup_min_bw: float | None = None
    """ncclTopoDupChannels: a graph of bwIntra >= this is duplicated; None: no duplication."""
    dup_hopper_exception: tuple[float, float, int] | None = None
    """(ccMin above, bwIntra below, nChannels above): such a graph is not duplicated."""
    p2p_net_chunk_bytes: int = 0
    p2p_channels_per_net_peer: int = 2
    ll_thread_threshold: tuple[int, int] = (0, 0)
    """thresholds era: NCCL_THREAD_THRESHOLD_PREVOLTA, NCCL_THREAD_THRESHOLD (bytes per thread)."""
    ll_multi_node_factor: int = 1
    ll_max_nthreads: int = 0

    @property
    def search_max_channels(self) -> int:
        return self.max_channels // 2 if self.runtime_dup else self.max_channels

    def nvlink_bw_GBps(self, compute_capability: float) -> float:
        """ncclTopoNVLinkBw (src/graph/topo.h): GB/s per NVLink by compute capability (SM86 12)."""
        if compute_capability == 8.6:
            return next(bw for cc, bw in self.nvlink_bw_by_cc if cc == 8.6)
        for cc, bw in self.nvlink_bw_by_cc:
            if cc != 8.6 and compute_capability >= cc:
                return bw
        return next(bw for cc, bw in self.nvlink_bw_by_cc if cc == 8.0)  # topo.h: SM80 for an unknown part


_SOCKETS_2_5_ON = SocketDefaults(settable=True, default=(0, 1), by_vendor={"aws": (2, 8), "gcp": (4, 1)})
"""net_socket.cc from v2.5.6 on: 'autoNt=0, autoNs=1; // By default, we only use the main thread',
AWS (vendor 0x1d0f) 2 x 8, Google gVNIC (0x1ae0) 4 x 1; MAX_SOCKETS 64, MAX_THREADS 16."""
_TREE_CORRECTION: dict[str, tuple[float, ...]] = {  # treeCorrectionFactor: powers of two from 64 B (index = log2(bytes >> 6)), 23 entries
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}
_SPEED_INTRA = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
_SPEED_INTER = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12)
_SM90_SPEED_INTER = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12)
_PER_CH_RING_LL128: Row3 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7))
_PER_CH_TREE_LL128: Row3 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0))
_PER_CH_TREE: Row3 = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0))
_LL_MAX_2_20: Row3 = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (87.7, 22.5, 19.0))
_STEPS = 8  # device.h (devcomm.h in 2.18) NCCL_STEPS
_BUFFSIZE = 1 << 22  # init.cc DEFAULT_BUFFSIZE (1 << 22) /* 4MiB */
_CHUNKS_TUNING_ERA = {
    "Simple": _BUFFSIZE / _STEPS * (_STEPS // 2),  # ALLREDUCE_CHUNKSTEPS = NCCL_STEPS/2 steps of 4 MiB / 8
    "LL": 8 * 512 * _STEPS * 16 / _STEPS / 2,  # DEFAULT_LL_BUFFSIZE / NCCL_STEPS, 8-byte lines of 4 data bytes
    "LL128": 4915200 / _STEPS * 120 / 128,  # DEFAULT_LL128_BUFFSIZE (4.7 MB) / NCCL_STEPS at 120/128 payload
}
_WINDOW_TUNING_ERA = {"Simple": float(_BUFFSIZE), "LL": _CHUNKS_TUNING_ERA["LL"] * _STEPS,
                      "LL128": _CHUNKS_TUNING_ERA["LL128"] * _STEPS}
"""The whole buffer of each protocol at its payload: NCCL_STEPS slots (init.cc DEFAULT_BUFFSIZE,
DEFAULT_LL_BUFFSIZE, DEFAULT_LL128_BUFFSIZE)."""
_THREADS_TUNING_ERA = {"LL": 512, "LL128": 640, "Simple": 512}  # NCCL_{LL,LL128,SIMPLE}_MAX_NTHREADS
_NVLINK_2_20 = ((9.0, 20.6), (8.6, 12.0), (8.0, 20.0), (7.0, 20.0), (6.0, 18.0))
"""topo.h ncclTopoNVLinkBw: SM90_NVLINK_BW 20.6, SM86 12.0, SM80 20.0, SM70 20.0, SM60 18.0."""

V2_21_5 = NcclTables(
    release="2.21.5", commit="ab2b89c4c339bd7f816fbc114a4b05d386b66290", versions=("2.21",),
    note="NCCL 2.21.5 (v2.21.5-1)", tuner="model", multi_node=True, p2p=True,
    algorithms=ALGORITHMS, protocols=PROTOCOLS, nvls_ops=("allreduce", "reduce_scatter", "allgather"),
    base_lat_us=_lat((6.8, 14.0, 0.0), (6.6, 14.0, 8.4)),
    hw_lat_us={
        "nvlink": _lat((.6, 1.25, 28.0), (.6, 1.9, 3.4), (0.0, 0.0, 25.0), (0.0, 0.0, 25.0)),
        "pci": _lat((1.0, 1.9, 28.0), (1.0, 2.5, 5.7)),
        "net": _lat((5.0, 8.5, 28.0), (2.7, 4.0, 14.0), (0.0, 0.0, 18.0), (0.0, 0.0, 14.0)),
    },
    max_channels=32, runtime_dup=True, simple_buffsize_bytes=_BUFFSIZE, nccl_steps=_STEPS,
    chunk_bytes=_CHUNKS_TUNING_ERA, window_bytes=_WINDOW_TUNING_ERA, max_threads=_THREADS_TUNING_ERA, socket=_SOCKETS_2_5_ON,
    pci_bw=12.0, nvlink_bw_by_cc=_NVLINK_2_20,
    ll_max_bw=((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0)),
    per_ch_max_ring_ll128_bw=_PER_CH_RING_LL128, per_ch_max_tree_ll128_bw=_PER_CH_TREE_LL128,
    per_ch_max_tree_bw=_PER_CH_TREE, ring_ll_factor=(0.5, 0.5), net_overhead_us=1.0,
    tree_correction=_TREE_CORRECTION, ring_plateau={"volta": 1.9, "ampere+": 1.4},
    speed_intra=_SPEED_INTRA, speed_inter=_SPEED_INTER,
    sm90_speed_intra=(60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    sm90_speed_inter=_SM90_SPEED_INTER, dup_min_bw=25.0, dup_hopper_exception=(80, 50.0, 4),
    p2p_net_chunk_bytes=1 << 17, p2p_channels_per_net_peer=2,
)
V2_20_5 = NcclTables(
    release="2.20.5", commit="48bb7fec7953112ff37499a272317f6663f8f600", versions=("2.19", "2.20"),
    note="NCCL 2.20.5 (v2.20.5-1); 2.19.3 and 2.19.4 have the same tables",
    tuner="model", multi_node=True, p2p=True, algorithms=ALGORITHMS, protocols=PROTOCOLS,
    nvls_ops=("allreduce", "reduce_scatter", "allgather"),
    base_lat_us=_lat((6.8, 14.0, 0.0), (6.6, 14.0, 8.4)),
    hw_lat_us={
        "nvlink": _lat((.6, 1.25, 28.0), (.6, 1.9, 3.4), (0.0, 0.0, 23.0), (0.0, 0.0, 23.0)),
        "pci": _lat((1.0, 1.9, 28.0), (1.0, 2.5, 5.7)),
        "net": _lat((5.0, 8.5, 28.0), (2.7, 4.0, 14.0), (0.0, 0.0, 18.0), (0.0, 0.0, 14.0)),
    },
    max_channels=32, runtime_dup=True, simple_buffsize_bytes=_BUFFSIZE, nccl_steps=_STEPS,
    chunk_bytes=_CHUNKS_TUNING_ERA, window_bytes=_WINDOW_TUNING_ERA, max_threads=_THREADS_TUNING_ERA, socket=_SOCKETS_2_5_ON,
    pci_bw=12.0, nvlink_bw_by_cc=_NVLINK_2_20, ll_max_bw=_LL_MAX_2_20,
    per_ch_max_ring_ll128_bw=_PER_CH_RING_LL128, per_ch_max_tree_ll128_bw=_PER_CH_TREE_LL128,
    per_ch_max_tree_bw=_PER_CH_TREE, ring_ll_factor=(1 / 4, 1 / 3), net_overhead_us=1.0,
    tree_correction=_TREE_CORRECTION, ring_plateau={"volta": 1.9, "ampere+": 1.4},
    speed_intra=_SPEED_INTRA, speed_inter=_SPEED_INTER,
    sm90_speed_intra=(60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0),
    sm90_speed_inter=_SM90_SPEED_INTER, dup_min_bw=25.0, dup_hopper_exception=(80, 50.0, 4),
    p2p_net_chunk_bytes=1 << 17, p2p_channels_per_net_peer=2,
)
V2_18_5 = NcclTables(
    release="2.18.5", commit="559b70f86c190a0d8f67f0d7a0f2c9810dd1e8c7", versions=("2.18",),
    note="NCCL 2.18.5 (v2.18.5-1); 2.18.3 and 2.18.6 have the same tables",
    tuner="model", multi_node=True, p2p=True, algorithms=ALGORITHMS, protocols=PROTOCOLS,
    nvls_ops=("allreduce",),
    base_lat_us=_lat((6.8, 14.0, 0.0), (6.6, 14.0, 8.4), (0.0, 0.0, 23.0), (0.0, 0.0, 23.0)),
    hw_lat_us={
        "nvlink": _lat((.6, 1.25, 4.0), (.6, 1.9, 3.4)),
        "pci": _lat((1.0, 1.9, 6.0), (1.0, 2.5, 5.7)),
        "net": _lat((5.0, 8.5, 14.0), (2.7, 4.0, 14.0), (0.0, 0.0, 18.0), (0.0, 0.0, 19.0)),
    },
    max_channels=32, runtime_dup=True, simple_buffsize_bytes=_BUFFSIZE, nccl_steps=_STEPS,
    chunk_bytes=_CHUNKS_TUNING_ERA, window_bytes=_WINDOW_TUNING_ERA, max_threads=_THREADS_TUNING_ERA, socket=_SOCKETS_2_5_ON,
    pci_bw=12.0, nvlink_bw_by_cc=((9.0, 20.0), (8.6, 12.0), (8.0, 20.0), (7.0, 20.0), (6.0, 18.0)),
    ll_max_bw=_LL_MAX_2_20, per_ch_max_ring_ll128_bw=_PER_CH_RING_LL128,
    per_ch_max_tree_ll128_bw=_PER_CH_TREE_LL128, per_ch_max_tree_bw=_PER_CH_TREE,
    ring_ll_factor=(1 / 4, 1 / 3), net_overhead_us=1.0, tree_correction=_TREE_CORRECTION,
    ring_plateau={"volta": 1.9, "ampere+": 1.4}, speed_intra=_SPEED_INTRA, speed_inter=_SPEED_INTER,
    sm90_speed_intra=(60.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0),
    sm90_speed_inter=(48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12),
    dup_min_bw=25.0, dup_hopper_exception=(80, 50.0, 4), p2p_net_chunk_bytes=1 << 17,
    p2p_channels_per_net_peer=2,
)
_BASE_LAT_2_5_6 = _lat((4.4, 4.4, 0.0), (3.6, 3.6, 8.4))
"""v2.5.6 tuning.cc baseLat: Tree {4.4, 4.4, 0}, Ring {3.6, 3.6, 8.4}."""
_HW_LAT_2_5_6 = {"nvlink": _lat((.5, 1.9, 28.0), (.4, 2.5, 5.7)), "pci": _lat((1.0, 1.9, 28.0), (1.0, 2.5, 5.7)),
                 "net": _lat((5.0, 7.5, 50.0), (.9, 2.5, 6.6))}
"""v2.5.6 tuning.cc hwLat [NVLink, PCI, Net][Tree, Ring][LL, LL128, Simple]."""
_LL_BUFF_2_3 = 8 * 256 * 8 * 16
"""core.h NCCL_LL_BUFF_SIZE: NUM_LINES_PER_THREAD 8 x NCCL_LL_MAX_NTHREADS 256 x NCCL_LL_CHUNKS 8 x
16-byte lines (256 KiB)."""
V2_3_7 = NcclTables(
    release="2.3.7", commit="b56650c7f59b8cd40d18809784a6d6be38ef8acb", versions=("2.0", "2.1", "2.2", "2.3"),
    note="NCCL 2.3.7 (v2.3.7-1); 2.0-2.2 were binary releases, run as 2.3.7's source (assumed)",
    tuner="thresholds", multi_node=True, p2p=False, algorithms=("ring",), protocols=("LL", "Simple"),
    nvls_ops=(), base_lat_us=_BASE_LAT_2_5_6, hw_lat_us=_HW_LAT_2_5_6,
    max_channels=16, runtime_dup=False, simple_buffsize_bytes=1 << 22, nccl_steps=2 * 2,
    chunk_bytes={"Simple": (1 << 22) / 2, "LL": _LL_BUFF_2_3 / 8 / 2},
    window_bytes={"Simple": float(1 << 22), "LL": _LL_BUFF_2_3 / 2},
    max_threads={"LL": 256, "Simple": 256},
    socket=SocketDefaults(settable=False, default=(0, 1)),
    pci_bw=12.0, nvlink_bw_by_cc=_NVLINK_2_20, ring_ll_factor=(1 / 4, 1 / 4),
    ll_thread_threshold=(32, 64), ll_multi_node_factor=2, ll_max_nthreads=256,
)
"""Ring era. Simple: a step is ALLREDUCE_BUFCHUNKS 2 slices of the 4 MiB buffer (a 2 MiB chunk),
ALLREDUCE_SUBSTEPS 2 flags each (4 in flight); LL: NCCL_LL_CHUNKS 8 steps of the 256 KiB line buffer
at half payload (16 KiB). LL below nRanks x nRings x NCCL_LL_MAX_NTHREADS 256 x threadThreshold
bytes (NCCL_THREAD_THRESHOLD 64 on Volta, _PREVOLTA 32, x2 across nodes: init.cu
ncclThreadThreshold); its busBw x 1/4 is NCCL's own later figure for LL (v2.5.6 tuning.cc)."""
V1_3_4 = NcclTables(
    release="1.3.4", commit="649f04d07711440ec2699ce7ec1af4ab71d6dbf9", versions=("1.3",),
    note="NCCL 1.3.4 (v1.3.4-1): single node, one ring", tuner="single_ring", multi_node=False, p2p=False,
    algorithms=("ring",), protocols=("Simple",), nvls_ops=(), base_lat_us=_BASE_LAT_2_5_6,
    hw_lat_us=_HW_LAT_2_5_6, max_channels=1, runtime_dup=False, simple_buffsize_bytes=1 << 21,
    nccl_steps=2 * 2, chunk_bytes={"Simple": (1 << 21) / 2}, window_bytes={"Simple": float(1 << 21)}, max_threads={"Simple": 256},
    socket=SocketDefaults(settable=False), pci_bw=12.0, nvlink_bw_by_cc=_NVLINK_2_20,
)

TABLE_SETS = (V2_21_5, V2_20_5, V2_18_5, V2_3_7, V1_3_4)
NCCL_VERSIONS: dict[str, NcclTables] = {v: t for t in TABLE_SETS for v in t.versions}
DEFAULT_NCCL_VERSION = "2.21"
"""The newest release modelled: what a scenario that names no version runs."""


def known_versions() -> tuple[str, ...]:
    return tuple(sorted(NCCL_VERSIONS, key=lambda v: tuple(int(x) for x in v.split("."))))


def tables_for(version: str | None, where: str = "strategy.library_version") -> NcclTables:
    """The table set of NCCL ``version`` (a minor version, '2.3'; None: DEFAULT_NCCL_VERSION)."""
    key = DEFAULT_NCCL_VERSION if version is None else str(version)
    if key not in NCCL_VERSIONS:
        raise ConfigError(where, version, "an NCCL version the model knows: " + ", ".join(known_versions()))
    return NCCL_VERSIONS[key]


DEFAULT = NCCL_VERSIONS[DEFAULT_NCCL_VERSION]

PROTOCOL_WIRE_EFFICIENCY = {"LL": 0.5, "LL128": 120.0 / 128.0, "Simple": 1.0}
"""Payload per byte a protocol puts on the link: LL sends 8-byte lines of 4 data bytes and a 4-byte
flag (src/include/device.h union ncclLLFifoLine), LL128 128-byte lines with 8 flag bytes
(NCCL_LL128_DATAELEMS 15 of 16), Simple the data alone."""
