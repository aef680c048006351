"""NCCL: its own tuning model picks the algorithm and protocol; the cluster's links set the time.

NCCL costs every (algorithm, protocol) pair of a collective with its tuning model
(src/graph/tuning.cc ``ncclTopoTuneModel`` / ``ncclTopoGetAlgoTime``: time = latency + bytes /
bandwidth, the bandwidth = channels x per-channel bandwidth of the topology search, refined
per protocol) and runs the fastest; NCCL_ALGO / NCCL_PROTO restrict the choice
(``CommOptions.algorithm`` / ``protocol``). That model is reproduced here from the tables of the
release the scenario names (``CommOptions.nccl_version``; sim/costs/backends/nccl_tables.py: one
table set per release, with its source commit) with the topology search reduced to its outcome:
the bandwidths it tries, the links it may use, the channel duplications. Releases before the
tuning model (2.0-2.3) choose by size thresholds over rings alone; NCCL 1.x runs one ring in one
node.

The prediction then runs the chosen algorithm on the cluster's real links: the same latency
terms, but the bandwidth of the hardware and transport (sim/costs/transports.py: NCCL's socket
transport opens NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS streams per connection, one
connection per channel) put through the same protocol refinements. A ring allreduce, reduce-
scatter or allgather runs as the schedule of a pipelined library (``_pipelined_ring_s``,
``ring_maxplus``): every step's transfer on its own edge class, each hop's latency (the link's,
tuning.cc's hwLat, the transport's per-message cost) on the data's way, not added to the
transfer as the tuner's formula adds it; trees, NVLS and chains are pipelined over their
chunks (common.pipelined_s), so that a link's propagation delay is paid per hop only where the
pipeline cannot hide it. Over verbs (InfiniBand, RoCE) a connection keeps at most NCCL_STEPS of
its buffer's slots in flight (``verbs_window_Bps``).
"""

from __future__ import annotations

import math

from sim.catalog import GPU, Link
from sim.cluster import Cluster
from sim.costs.backends.common import (
    Backend,
    CommCost,
    CommOptions,
    alltoall_bytes_by_link,
    alltoall_s,
    end_to_end,
    inter_node_Bps,
    library_ops,
    pipelined_s,
    ring_bytes_by_link,
    ring_edge_latency_s,
    ring_hop_link,
    ring_rate_Bps,
    ring_steps,
    ring_volume_bytes,
    zero_cost,
)
from sim.costs.backends.nccl_pipeline import (
    NVLS_CHANNELS,
    nvls_fill_s,
    ring_critical_bytes,
    ring_threads,
    tree_chunk_bytes,
)
from sim.costs.backends.nccl_tables import (
    ALGORITHMS,
    DEFAULT,
    DEFAULT_NCCL_VERSION,
    PROTOCOLS,
    NcclTables,
    known_versions,
    tables_for,
)
from sim.costs.backends.ring_maxplus import cut_through_ring_s
from sim.costs.transports import cold_start_s, connection_Bps, rtt_s
from sim.errors import ConfigError

SOCKET_AUTO_BY_NIC_VENDOR = DEFAULT.socket.by_vendor
"""NCCL's socket transport auto-detects the NIC vendor (src/transport/net_socket.cc,
ncclNetSocketGetNsockNthread): (helper threads, sockets per thread) per connection, AWS ENA (PCI
vendor 0x1d0f) 2 x 8, Google's gVNIC (0x1ae0) 4 x 1. Any other NIC: no helper thread ('autoNt=0
... By default, we only use the main thread and do not spawn extra threads'), so the connection's
one socket is progressed by ncclNetSocketTest, which the GPU's proxy thread calls ('progress
request using main thread'): every connection of that GPU shares its core. Per release:
``NcclTables.socket``."""
MAX_SOCKETS = DEFAULT.socket.max_sockets
"""net_socket.cc MAX_SOCKETS: NCCL_NSOCKS_PERTHREAD is cut to 64 / threads beyond it."""
P2P_CHANNELS_PER_NET_PEER = DEFAULT.p2p_channels_per_net_peer
"""NCCL_NCHANNELS_PER_NET_PEER: 2 channels to a peer on another node (2.18 paths.cc default 2;
2.20-2.21 start from 2 per NIC: ncclTopoGetNchannels)."""
VERBS_KINDS = ("infiniband", "roce")
"""Links NCCL drives through verbs (net_ib.cc): a send waits for the receiver's posted buffer."""


def tables(options: CommOptions | None) -> NcclTables:
    """The table set of the NCCL release ``options`` names (None: the newest modelled)."""
    return tables_for(None if options is None else options.nccl_version)


def socket_config(link: Link, options: CommOptions | None = None) -> tuple[int, int]:
    """(sockets, helper threads) of one NCCL socket connection over ``link`` as
    ncclNetSocketGetNsockNthread sets them: NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD where
    the strategy gives them, else the NIC vendor's (AWS 2 x 8, GCP 4 x 1, else no helper: 0 x 1);
    sockets = threads x sockets per thread, and with no helper thread the one control socket
    carries the data. Before 2.4.8 a connection was one socket and no helper thread."""
    sock = tables(options).socket
    threads, per_thread = sock.by_vendor.get(link.nic_vendor or "", sock.default)
    if sock.settable and options is not None and options.socket_nthreads is not None:
        threads = options.socket_nthreads
    if sock.settable and options is not None and options.nsocks_perthread is not None:
        per_thread = options.nsocks_perthread
    if threads and threads * per_thread > sock.max_sockets:  # NCCL clamps (and warns)
        per_thread = sock.max_sockets // threads
    return (threads * per_thread if threads else 1), threads


def sockets_per_connection(link: Link, options: CommOptions | None = None) -> int:
    """Streams one NCCL connection opens over ``link``: sockets over TCP, one queue pair otherwise."""
    if link.kind != "tcp":
        return 1
    return socket_config(link, options)[0]


def socket_threads(link: Link, connections: int, proxies: int, options: CommOptions | None = None) -> int | None:
    """Threads that copy ``connections`` NCCL socket connections through the kernel: the
    connection's helper threads, or, with none, the proxy threads of the ``proxies`` GPUs they
    leave from (one each); None for verbs (no copies)."""
    if link.kind != "tcp":
        return None
    helpers = socket_config(link, options)[1]
    return connections * helpers if helpers else max(1, proxies)


def ring_streams(group: Cluster, graph: Graph, options: CommOptions | None = None) -> tuple[int, int | None]:
    """(streams, copying threads) a ring sends out of each node: a connection per runtime channel,
    each of its sockets; the channels are the search's rings twice over (ncclTopoPostset duplicates
    them), so a duplicate leaves each node from the same GPU as its original and shares that GPU's
    proxy thread: graph.channels proxies where no helper threads copy (before 2.4 each ring's
    connection had a proxy thread of its own, and no duplicate)."""
    link = group.inter_link
    return (graph.runtime_channels * sockets_per_connection(link, options),
            socket_threads(link, graph.runtime_channels, graph.channels, options))


def socket_summary(group: Cluster, options: CommOptions | None = None) -> str | None:
    """One line on how NCCL's ring crosses a TCP network here (sockets, the threads copying them,
    the rate that leaves a node), for a reader of a prediction; None off TCP or on one node."""
    from sim.costs.transports import tcp_stream_copy_Bps

    link = group.inter_link
    if link.kind != "tcp" or group.nodes < 2:
        return None
    t = tables(options)
    sockets, copying = ring_streams(group, ring_graph(group, t), options)
    threads = copying or 1
    helpers = socket_config(link, options)[1]
    who = f"{helpers} helper threads per connection" if helpers else "the GPU's proxy thread, no helper threads"
    rate = ring_rate_Bps(group, sockets, threads)
    knob = ("--nccl-socket-nthreads sets NCCL_SOCKET_NTHREADS" if t.socket.settable
            else f"NCCL {t.release} has one socket per connection")
    return (f"NCCL {t.release} sockets over {link.name}: {sockets} per node, copied by {threads} thread(s) at "
            f"{tcp_stream_copy_Bps(link) * 8 / 1e9:g} Gbit/s each ({who}); the ring leaves a node at "
            f"{rate * 8 / 1e9:.1f} of {link.effective_Bps * 8 / 1e9:.1f} Gbit/s of payload ({knob})")


def verbs_window_Bps(link: Link, in_flight_bytes: float) -> float:
    """The most one NCCL connection moves over a verbs link per second: ncclIbIsend sends a slot
    only once the receiver has posted it ('Wait for the receiver to have posted the corresponding
    receive', src/transport/net_ib.cc), and the receiver's proxy posts at most NCCL_STEPS slots
    ahead (net.cc recvProxyProgress), reposting one when its data has arrived and been consumed:
    a slot turns over at most once per round trip, so a connection carries at most its slots'
    bytes per RTT. Sockets have no such wait (ncclNetSocketIsend queues the data at once; TCP's
    window bounds it: sim/costs/transports.py). inf where there is no round trip or no verbs."""
    rtt = rtt_s(link)
    if link.kind not in VERBS_KINDS or rtt <= 0:
        return math.inf
    return in_flight_bytes / rtt


# -- NCCL's view of the topology -----------------------------------------------------------

class Graph:
    """The outcome of NCCL's channel search for one communicator (per algorithm family)."""

    __slots__ = ("channels", "bw", "runtime_channels", "intra_hw", "hopper")

    def __init__(self, channels: int, bw: float, intra_hw: str, hopper: bool, t: NcclTables = DEFAULT):
        self.channels, self.bw, self.intra_hw, self.hopper = channels, bw, intra_hw, hopper
        # connect.cc ncclTopoPostset: the channels are duplicated again at run time (2.5 on)
        self.runtime_channels = min(t.max_channels, 2 * channels) if t.runtime_dup else channels


def _cc(gpu: GPU) -> float:
    return gpu.compute_capability if gpu.compute_capability is not None else 7.0


def intra_node_GBps(group: Cluster, t: NcclTables = DEFAULT) -> float:
    """What NCCL's topology gives a GPU inside its node: NVLinks x ncclTopoNVLinkBw, or the
    PCIe link as NCCL rates it (PCI_BW 12 GB/s for Gen3 x16: 3/4 of nominal, which the pcie
    catalog entries' efficiency holds)."""
    link = group.intra_link
    if link.kind == "nvlink" and group.gpu.nvlinks:
        return group.gpu.nvlinks * t.nvlink_bw_GBps(_cc(group.gpu))
    return link.effective_Bps / 1e9


def _pick(speeds: tuple[float, ...], available: float, t: NcclTables) -> tuple[float, int]:
    """search.cc: the fastest per-channel bandwidth of the array the topology can carry, with as
    many channels (at most MAXCHANNELS/2) as fit in it."""
    for speed in speeds:
        if speed <= available * (1 + 1e-9):
            return speed, max(1, min(t.search_max_channels, int(available / speed + 1e-9)))
    return speeds[-1], 1


def _ring_era_rings(group: Cluster, t: NcclTables) -> int:
    """Rings before the topology search (2.0-2.3; NCCL 1.x: one): one per NVLink of a GPU
    inside an NVLink node, one over PCIe, and across nodes no more than the node's NICs
    (net.cu netGetRings uses each NIC for one ring); at most MAXRINGS."""
    if t.tuner == "single_ring":
        return 1
    intra = group.gpu.nvlinks if group.intra_link.kind == "nvlink" and group.gpu.nvlinks else 1
    if group.nodes == 1:
        return max(1, min(t.max_channels, intra))
    rings = group.nics_per_node if group.gpus_per_node == 1 else min(intra, group.nics_per_node)
    return max(1, min(t.max_channels, rings))


def _duplicate(bw: float, channels: int, group: Cluster, t: NcclTables) -> bool:
    """search.cc ncclTopoDupChannels: duplicate a graph of bwIntra >= 25 GB/s, except (2.18.3 on)
    'ccMin > 80 && bwIntra < 50 && nChannels > 4'."""
    if t.dup_min_bw is None or bw < t.dup_min_bw:
        return False
    if t.dup_hopper_exception is not None:
        cc_above, bw_below, channels_above = t.dup_hopper_exception
        if round(_cc(group.gpu) * 10) > cc_above and bw < bw_below and channels > channels_above:
            return False
    return True


def ring_graph(group: Cluster, t: NcclTables = DEFAULT) -> Graph:
    hopper = _cc(group.gpu) >= 9.0
    intra_hw = "nvlink" if group.intra_link.kind == "nvlink" else "pci"
    speeds: tuple[float, ...]
    if group.nodes == 1:
        speeds = t.sm90_speed_intra if hopper else t.speed_intra
        available = intra_node_GBps(group, t)
    else:
        speeds = t.sm90_speed_inter if hopper else t.speed_inter
        # every channel leaves and enters each node once, through one of its NICs (NCCL rates a
        # NIC by its line speed: the net plugin's speed in Mb/s / 8000)
        available = group.nics_per_node * group.inter_link.bandwidth_Bps / 1e9
        if group.gpus_per_node > 1:
            available = min(available, intra_node_GBps(group, t))
    if t.tuner != "model":  # no search: the rings the transports build share what is there
        rings = _ring_era_rings(group, t)
        return Graph(rings, available / rings, intra_hw, hopper, t)
    bw, channels = _pick(speeds, available, t)
    if _duplicate(bw, channels, group, t):
        channels, bw = min(t.search_max_channels * 2, channels * 2), bw / 2
    return Graph(channels, bw, intra_hw, hopper, t)


def nvls_available(group: Cluster, t: NcclTables = DEFAULT) -> bool:
    """NVLink SHARP needs Hopper or later GPUs on NVSwitch (an NVLink node of more than two GPUs
    here) and a release that has it; without CollNet NCCL enables it on one node only (tuning.cc)."""
    return (bool(t.nvls_ops) and _cc(group.gpu) >= 9.0 and group.intra_link.kind == "nvlink"
            and group.gpus_per_node > 2 and group.gpu.nvlinks > 0)


def nvls_graph(group: Cluster, t: NcclTables = DEFAULT) -> Graph:
    """The NVLS search makes one channel per GPU of the node at the fastest bandwidth that fits
    (search.cc: intra-node NVLS pulls evenly from all GPUs, one head each); the kernels then run
    on NVLS_CHANNELS blocks (nvls.cc), not on duplicated graph channels."""
    g = group.gpus_per_node
    bw, _ = _pick(t.sm90_speed_intra, intra_node_GBps(group, t) / g, t)
    graph = Graph(g, bw, "nvlink", True, t)
    graph.runtime_channels = NVLS_CHANNELS
    return graph


# -- the tuning model ----------------------------------------------------------------------

def _arch_index(group: Cluster) -> int:
    cc = _cc(group.gpu)
    return 2 if cc >= 9.0 else 1 if cc >= 8.0 else 0


def _nodes_index(nodes: int) -> int:
    return nodes - 1 if nodes <= 2 else 2


def _refine_busbw(bus_bw: float, algo: str, proto: str, op: str, group: Cluster, graph: Graph,
                  t: NcclTables = DEFAULT) -> float:
    """tuning.cc's per-protocol refinements of busBw = channels x bandwidth (before the tuning
    model: LL's 1/4 alone, NCCL's first published figure for it, v2.5.6)."""
    nodes, ppn = group.nodes, group.gpus_per_node
    across_or_reducing = nodes > 1 or op in ("allreduce", "reduce")
    ll_factor = t.ring_ll_factor[0 if across_or_reducing else 1]
    if t.ll_max_bw is None:
        return bus_bw * ll_factor if proto == "LL" else bus_bw
    assert t.per_ch_max_ring_ll128_bw and t.per_ch_max_tree_bw and t.per_ch_max_tree_ll128_bw
    arch, ni = _arch_index(group), _nodes_index(nodes)
    ll_max = t.ll_max_bw[arch if nodes == 1 else 0][ni]
    ch = graph.channels
    if algo == "ring" and proto == "LL":
        bus_bw = min(ll_max, bus_bw * ll_factor)
    if algo == "ring" and proto == "LL128":
        bus_bw = min(bus_bw * (0.7 if ppn < 2 else 0.92), ch * t.per_ch_max_ring_ll128_bw[arch][ni])
    if algo == "tree":
        bus_bw = min(bus_bw * 0.92, ch * t.per_ch_max_tree_bw[arch][ni])
        if proto == "LL":
            bus_bw = min(bus_bw / 3.8, ll_max)
        if proto == "LL128":
            bus_bw = min(bus_bw * (7 / 9 if nodes == 1 else 120 / 128), ch * t.per_ch_max_tree_ll128_bw[arch][ni])
    return bus_bw


def _algbw(bus_bw: float, algo: str, op: str, n: int) -> float:
    """Bus to algorithm bandwidth: rings x n / nsteps, NVLS x 5/6, trees x 1/2 (tuning.cc)."""
    if algo == "ring":
        return bus_bw * n / _nccl_steps(op, n)
    if algo in ("nvls", "nvls_tree"):
        return bus_bw * 5 / 6
    return bus_bw * 0.5


def _nccl_steps(op: str, n: int) -> int:
    if op == "allreduce":
        return 2 * (n - 1)
    if op in ("reduce_scatter", "allgather"):
        return n - 1
    return n


def ring_hop_latencies_us(proto: str, group: Cluster, graph: Graph, t: NcclTables = DEFAULT) -> tuple[float, float, float]:
    """tuning.cc's latency terms of a ring under ``proto``: (baseLat once per collective, hwLat of
    a step over an intra-node edge of ``graph``'s class, of a step over the network), the
    intra-node step floored at getNetOverhead (tripled for Simple) when the ring spans nodes."""
    intra_lat = t.hw_lat_us[graph.intra_hw]["ring"][proto]
    if group.nodes > 1 and t.net_overhead_us:
        intra_lat = max(intra_lat, t.net_overhead_us * (3 if proto == "Simple" else 1))
    return t.base_lat_us["ring"][proto], intra_lat, t.hw_lat_us["net"]["ring"][proto]


def latency_factor(algo: str, proto: str, op: str, n_bytes: float, group: Cluster, graph: Graph,
                   t: NcclTables = DEFAULT) -> float:
    """ncclTopoGetAlgoTime's 'plateau effect of ring': a multi-node Simple ring allreduce's latency
    x 1.9 (Volta) or 1.4 once a channel's share of a rank's buffer is 64 bytes or more."""
    if t.ring_plateau and algo == "ring" and proto == "Simple" and group.nodes > 1 and op == "allreduce" \
            and n_bytes / (graph.channels * group.world_size) >= 64:
        return t.ring_plateau["volta" if _cc(group.gpu) < 8.0 else "ampere+"]
    return 1.0


def _latency_us(algo: str, proto: str, op: str, group: Cluster, graph: Graph, t: NcclTables = DEFAULT) -> float:
    """tuning.cc: base latency plus the hops the algorithm makes at the hardware's latency."""
    n, nodes = group.world_size, group.nodes
    intra_hw = graph.intra_hw
    hw = intra_hw if nodes == 1 else "net"
    lat = t.base_lat_us[algo][proto]
    intra_lat = t.hw_lat_us[intra_hw][algo][proto]
    inter_lat = t.hw_lat_us["net"][algo][proto]
    nsteps = _nccl_steps(op, n)
    if algo == "ring":
        if op in ("reduce", "broadcast"):
            step_lat = t.hw_lat_us[hw]["tree" if proto == "Simple" else "ring"][proto]
            return lat + nsteps * step_lat
        inter_steps = (2 * nodes if nodes > 1 else 0) if op == "allreduce" else nodes - 1
        lat, intra_lat, inter_lat = ring_hop_latencies_us(proto, group, graph, t)
        return lat + (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat
    if algo == "tree":
        return lat + 2 * ((n // nodes - 1) * intra_lat + math.floor(math.log2(nodes)) * inter_lat)
    if algo == "nvls":  # 2.18: baseLat 23 + the net's; 2.19 on: intraLat 23 (baseLat 0) + the net's
        return lat + intra_lat + (inter_lat if nodes > 1 else 0.0)
    return lat + intra_lat + 2 * math.floor(math.log2(nodes)) * inter_lat  # nvls_tree


def _candidates(op: str, group: Cluster, t: NcclTables = DEFAULT) -> list[tuple[str, str]]:
    """The (algorithm, protocol) pairs NCCL enables for ``op`` on this group (tuning.cc)."""
    algos = ["ring"]
    if op == "allreduce" and "tree" in t.algorithms:
        algos.append("tree")
    if op in t.nvls_ops and group.nodes == 1 and nvls_available(group, t):
        algos.append("nvls")
    pairs = []
    for a in algos:
        for p in t.protocols:
            if a.startswith("nvls") and p != "Simple":
                continue
            if p == "LL128" and not _ll128_enabled(group):
                continue
            pairs.append((a, p))
    return pairs


def _ll128_enabled(group: Cluster) -> bool:
    """LL128 by default only inside NVLink nodes (typeIntra <= PATH_NVB) with the network, if
    any, reached through a PCIe switch, on Volta, Ampere or Hopper (tuning.cc)."""
    cc = _cc(group.gpu)
    if not (7.0 <= cc < 10.0) or 7.5 <= cc < 8.0 or 8.5 <= cc < 9.0:
        return False
    return group.intra_link.kind == "nvlink" or group.gpus_per_node == 1 and group.nodes == 1


def _graph_for(algo: str, group: Cluster, t: NcclTables = DEFAULT) -> Graph:
    return nvls_graph(group, t) if algo.startswith("nvls") else ring_graph(group, t)


def _tree_correction(bw: float, algo: str, proto: str, n_bytes: float, t: NcclTables) -> float:
    log_size = int(math.log2(max(1.0, n_bytes / 64)))
    if algo == "tree" and t.tree_correction and log_size < 23:
        return bw * t.tree_correction[proto][log_size]
    return bw


def model_time_us(op: str, n_bytes: float, group: Cluster, algo: str, proto: str, t: NcclTables = DEFAULT) -> float:
    """NCCL's own estimate (ncclTopoGetAlgoTime), in microseconds: what its tuner compares."""
    graph = _graph_for(algo, group, t)
    bw = _algbw(_refine_busbw(graph.channels * graph.bw, algo, proto, op, group, graph, t), algo, op, group.world_size)
    bw = _tree_correction(bw, algo, proto, n_bytes, t)
    lat = _latency_us(algo, proto, op, group, graph, t) * latency_factor(algo, proto, op, n_bytes, group, graph, t)
    return lat + n_bytes / (1000 * bw)


def ll_threshold_bytes(group: Cluster, t: NcclTables) -> float:
    """2.0-2.3 (common_coll.h ncclGetCollResource): LL up to nRanks x nRings x
    NCCL_LL_MAX_NTHREADS x threadThreshold bytes, threadThreshold NCCL_THREAD_THRESHOLD (64 B a
    thread; NCCL_THREAD_THRESHOLD_PREVOLTA 32 before Volta), doubled across nodes (init.cu
    ncclThreadThreshold). (Below it the function also trims threads and rings; all LL.)"""
    per_thread = t.ll_thread_threshold[1 if _cc(group.gpu) >= 7.0 else 0]
    if group.nodes > 1:
        per_thread *= t.ll_multi_node_factor
    return group.world_size * ring_graph(group, t).channels * t.ll_max_nthreads * per_thread


def choose(op: str, n_bytes: float, group: Cluster, options: CommOptions) -> tuple[str, str]:
    """The pair NCCL's tuner runs: the fastest by its model among those enabled and allowed
    (2.0-2.3: a ring, LL below ``ll_threshold_bytes`` and Simple above; NCCL 1.x: Simple)."""
    t = tables(options)
    check_group(group, t)
    pairs = _candidates(op, group, t)
    if options.algorithm is not None:
        pairs = [(a, p) for a, p in pairs if a == options.algorithm]
        if not pairs:
            raise ConfigError("strategy.collective", options.algorithm,
                              f"an algorithm NCCL {t.release} offers for {op} here: "
                              + ", ".join(sorted({a for a, _ in _candidates(op, group, t)})))
    if options.protocol is not None:
        allowed = [(a, p) for a, p in pairs if p == options.protocol]
        if not allowed:
            raise ConfigError("strategy.protocol", options.protocol,
                              f"a protocol NCCL {t.release} enables here: " + ", ".join(sorted({p for _, p in pairs})))
        pairs = allowed
    if t.tuner == "model":
        return min(pairs, key=lambda ap: model_time_us(op, n_bytes, group, ap[0], ap[1], t))
    if len(pairs) == 1:
        return pairs[0]
    return ("ring", "LL") if n_bytes <= ll_threshold_bytes(group, t) else ("ring", "Simple")


def check_group(group: Cluster, t: NcclTables) -> None:
    if group.nodes > 1 and not t.multi_node:
        raise ConfigError("strategy.nccl_version", t.versions[0],
                          f"a version that crosses nodes ({group.nodes} here): NCCL 1.x is single-node; "
                          f"NCCL 2.0 or later, or backend mpi between nodes")


# -- the prediction on the real links ------------------------------------------------------

def _hardware_busbw_GBps(op: str, algo: str, proto: str, group: Cluster, graph: Graph,
                         options: CommOptions | None = None) -> float:
    """The refinements of tuning.cc applied to what the links deliver instead of the search's
    nominal bandwidth: a ring's slowest edge (its NIC connections, ``ring_streams``), each
    connection no faster than its verbs window (``verbs_window_Bps``)."""
    t = tables(options)
    if algo.startswith("nvls"):
        hw = connection_Bps(group.intra_link, 1) / 1e9
    else:
        hw = ring_rate_Bps(group, *ring_streams(group, graph, options)) / 1e9
        if group.nodes > 1:
            window = verbs_window_Bps(group.inter_link, t.window_bytes[proto])
            hw = min(hw, graph.runtime_channels * window / 1e9)
    model_bw = graph.channels * graph.bw
    # the search's nominal bandwidth never exceeds what NCCL measured its hardware to carry; the
    # refinements (protocol ceilings) apply to the smaller of the two
    refined = _refine_busbw(min(hw, model_bw) if group.nodes == 1 else hw, algo, proto, op, group, graph, t)
    return refined * fitted_factors(group, proto)[0]


def fitted_factors(group: Cluster, proto: str) -> tuple[float, float]:
    """(bandwidth, latency) factors measured for ``proto`` on the link that bounds a collective of
    ``group`` (the network across nodes, else the intra-node link): ``Link.nccl_protocols``, fitted
    by ``scalebench calibrate --from-nccl-tests`` (sim/nccl_tests_fit.py); (1, 1) on catalog links.
    NCCL's tuner never sees them: it picks by its own model, as the real library does."""
    return ring_hop_link(group).protocol_factors(proto)


def time_parts(op: str, n_bytes: float, group: Cluster, options: CommOptions | None = None) -> tuple[str, float, float]:
    """(protocol, latency s, transfer s) of NCCL's ``op`` over ``group``, their sum its time: the
    two terms a measured latency and bandwidth factor scale (sim/nccl_tests_fit.py)."""
    options = options or CommOptions()
    if op == "sendrecv":
        return _sendrecv_parts(n_bytes, group, options)
    if op == "alltoall":
        cost = _alltoall(n_bytes, group, options)
        latency = _alltoall(1e-30, group, options).time_s
        return cost.protocol, latency, cost.time_s - latency
    _, proto, lat_s, transfer_s, _ = _collective_parts(op, n_bytes, group, options, split=True)
    return proto, lat_s, transfer_s


def _collective(op: str, n_bytes: float, group: Cluster, options: CommOptions) -> CommCost:
    if group.world_size == 1 or n_bytes <= 0:
        return zero_cost()
    algo, proto, lat_s, transfer_s, by_link = _collective_parts(op, n_bytes, group, options)
    return CommCost(lat_s + transfer_s, algo, proto, by_link)


def _collective_parts(op: str, n_bytes: float, group: Cluster, options: CommOptions,
                      split: bool = False) -> tuple[str, str, float, float, dict[str, float]]:
    """(algorithm, protocol, latency s, transfer s, bytes by link class). A pipelined ring's time
    is one schedule, its latencies inside it; with ``split`` its latency term is what NCCL's
    latencies add to that schedule (the fitted latency factor's share), else NCCL's base latency."""
    n = group.world_size
    t = tables(options)
    algo, proto = choose(op, n_bytes, group, options)
    graph = _graph_for(algo, group, t)
    inter_streams, inter_threads = ring_streams(group, graph, options)
    bus_bw = _hardware_busbw_GBps(op, algo, proto, group, graph, options) * 1e9
    alg_bw = _tree_correction(_algbw(bus_bw, algo, op, n), algo, proto, n_bytes, t)
    factor = latency_factor(algo, proto, op, n_bytes, group, graph, t)
    lat_s = _latency_us(algo, proto, op, group, graph, t) * factor * 1e-6
    hop = ring_hop_link(group)
    inter_hops = (2 * group.nodes if op == "allreduce" else group.nodes - 1) if group.nodes > 1 else 0
    lat_s += inter_hops * group.inter_link.software_latency_s  # the transport's own per-message cost
    lat_factor = fitted_factors(group, proto)[1]
    lat_s *= lat_factor
    if algo == "ring" and op in PIPELINED_RING_OPS:
        # the hop latencies are inside the ring's schedule (they delay the data, not the sender)
        lat_s = t.base_lat_us["ring"][proto] * factor * lat_factor * 1e-6
        ring = (op, proto, n_bytes, group, graph, factor, (inter_streams, inter_threads), alg_bw, options, t)
        wire = _pipelined_ring_s(*ring, lat_factor)
        if split:  # the measured-factor fit's two terms: what the library's latencies add, the rest
            bare = _pipelined_ring_s(*ring, 0.0)
            lat_s, wire = lat_s + wire - bare, bare
        by_link = ring_bytes_by_link(ring_volume_bytes(op, n_bytes, n), group)
    elif algo == "ring":  # reduce and broadcast: a pipelined chain
        volume = ring_volume_bytes(op, n_bytes, n)
        steps = ring_steps(op, n)
        channels = graph.runtime_channels
        threads = ring_threads(proto, graph.channels * graph.bw, t)
        rate = volume / (n_bytes / alg_bw)
        chunk = t.chunk_bytes[proto]
        per_step = n_bytes / (channels * n)
        loops = max(1, math.ceil(per_step / chunk))
        busiest = _ring_busiest_volume(op, proto, n_bytes, volume, steps, channels, threads, n, t)
        wire = pipelined_s(busiest, rate, loops * steps, hop.latency_s, min(chunk, per_step))
        by_link = ring_bytes_by_link(volume, group)
    elif algo == "nvls":  # one node: NVLS_CHANNELS blocks, graph.channels heads (one per GPU)
        wire = n_bytes / alg_bw + nvls_fill_s(op, n_bytes, NVLS_CHANNELS, graph.channels, alg_bw) + hop.latency_s
        by_link = ring_bytes_by_link(float(n_bytes), group)
    else:  # trees: up and down, 2 log2(nodes) network hops (nvls_tree, offered on no single node, alike)
        depth = 2 * max(1, math.ceil(math.log2(group.nodes))) if group.nodes > 1 else 2
        volume = 2.0 * n_bytes if algo == "tree" else float(n_bytes)
        # a tree's chunk (enqueue.cc: one buffer step, halved for small messages) crosses each
        # hop at the link's rate (bus_bw), as a ring's does; the tree's algbw (bus / 2, x its
        # correction) is the throughput of the whole up-and-down
        unit = tree_chunk_bytes(proto, n_bytes, graph.runtime_channels, n, group.nodes, t) if algo == "tree" \
            else t.chunk_bytes[proto]
        wire = pipelined_s(n_bytes, alg_bw, depth, hop.latency_s, min(unit, n_bytes), hop_rate_Bps=bus_bw)
        by_link = ring_bytes_by_link(volume, group)
    cold = 0.0
    if group.nodes > 1 and not end_to_end(group):
        cold = cold_start_s(group.inter_link, ring_volume_bytes(op, n_bytes, n) if algo == "ring" else n_bytes,
                            inter_streams, options.idle_s, inter_threads)
    return algo, proto, lat_s, wire + cold, by_link


def granule_bytes(proto: str, t: NcclTables = DEFAULT) -> float:
    """What a ring's receiver gets whole before it passes it on, per channel: a slice of the Simple
    protocol's buffer (ALLREDUCE_SLICESTEPS = NCCL_STEPS / 4 steps of buffsize / NCCL_STEPS, 1 MiB
    of the default 4 MiB: prims_simple.h waits and posts per slice), one step of the LL and LL128
    buffers (their data per step, ``chunk_bytes``)."""
    if proto == "Simple":
        return t.simple_buffsize_bytes / t.nccl_steps * max(1, t.nccl_steps // 4)
    return t.chunk_bytes[proto]


PIPELINED_RING_OPS = ("allreduce", "reduce_scatter", "allgather")
"""The ring operations whose every step depends on the step before it at the predecessor: their
schedule is the timed event graph of ring_maxplus (a reduce or broadcast is a chain instead)."""


def _pipelined_ring_s(op: str, proto: str, n_bytes: float, group: Cluster, graph: Graph, factor: float,
                      streams: tuple[int, int | None], alg_bw: float, options: CommOptions, tab: NcclTables = DEFAULT,
                      lat_scale: float = 1.0) -> float:
    """The time of a ring ``op`` after NCCL's base latency: its steps as the timed event graph of
    a pipelined library (``ring_maxplus.cut_through_ring_s``) and, for a message of several of
    runRing's loops, the chain of its chunks through every hop (``pipelined_s``' chain: the slot
    window of NCCL_STEPS buffers such messages wait on), the longer of the two.

    Each edge class c (inside a node, across the network) has its own figures, as the detailed
    mode's flows have them: a step moves S/n x the class's pace (the protocol's ceiling and
    runRing's chunk rounding, ``ring_paces``) at the class's rate R_c (the intra-node link for one
    flow; the node's NICs with the ring's streams), holding its sender t_c = pace_c S / (n R_c); its
    latency l_c is the link's latency + tuning.cc's hop latency of the class (hwLat x the plateau
    factor) + the transport's per-message software latency. A receiver passes a step on per
    granule: one slice of the protocol's buffer per channel (``granule_bytes``; a step of at most
    that per channel goes on whole), u_c = t_c x min(1, granule / (S / (n channels))).
    NCCL's tuner adds every hop's latency to the transfer (latency + bytes / bandwidth); in the
    ring one edge's latency passes while other edges transfer, so a ring pays max(K t_max + one
    crossing, the data's chain of K hops), not their sum (SimGrid, running the same mechanism,
    gives the same time: ``scalebench validate --suite simgrid``, its library rings). ``lat_scale``
    multiplies tuning.cc's hop latencies (a measured latency factor, ``fitted_factors``; 0: none)."""
    n, g, nodes = group.world_size, group.gpus_per_node, group.nodes
    steps = ring_steps(op, n)
    volume = ring_volume_bytes(op, n_bytes, n)
    channels = graph.runtime_channels
    rate = volume / (n_bytes / alg_bw)
    hw_Bps = ring_rate_Bps(group, *streams)
    intra_pace, inter_pace = ring_paces(op, proto, n_bytes, group, options)
    _, intra_us, inter_us = ring_hop_latencies_us(proto, group, graph, tab)
    intra, inter = group.intra_link, group.inter_link
    intra_Bps = connection_Bps(intra, 1) if g > 1 else hw_Bps
    inter_latency_s = ring_edge_latency_s(group) if nodes > 1 else intra.latency_s
    lat_intra = intra.latency_s + intra_us * factor * lat_scale * 1e-6 + intra.software_latency_s
    if nodes == 1:  # every edge, the wrap-around too, inside the node
        period = n
        inter_Bps, lat_inter = intra_Bps, lat_intra
    else:
        period = g
        inter_Bps = inter_node_Bps(group, *streams)
        lat_inter = inter_latency_s + inter_us * factor * lat_scale * 1e-6 + inter.software_latency_s
    per_step = n_bytes / (channels * n)  # one channel's share of a step
    whole = min(1.0, granule_bytes(proto, tab) / per_step)
    step_bytes = volume / steps
    t = [intra_pace * step_bytes / intra_Bps] * (period - 1) + [inter_pace * step_bytes / inter_Bps]
    lat = [lat_intra] * (period - 1) + [lat_inter]
    ring = cut_through_ring_s(steps, t, [whole * x for x in t], lat)
    chunk = tab.chunk_bytes[proto]
    loops = max(1, math.ceil(per_step / chunk))
    if loops == 1:
        return ring
    # several loops: each chunk (``unit``) crosses every hop in sequence, a hop's propagation on
    # every loop, its software and library latency once per step (the chain of pipelined_s, per class)
    unit_s = min(chunk, per_step) / rate
    crossings = steps if period == 1 else (-(-steps // period) if nodes > 1 else 0)
    inter_prop = inter_latency_s if nodes > 1 else intra.latency_s
    chain = (loops * ((steps - crossings) * (intra.latency_s + unit_s * hw_Bps / intra_Bps)
                      + crossings * (inter_prop + unit_s * hw_Bps / inter_Bps))
             + (steps - crossings) * (lat_intra - intra.latency_s) + crossings * (lat_inter - inter_prop)
             + inter_prop)
    return max(ring, chain)


def ring_pace_factor(op: str, proto: str, n_bytes: float, group: Cluster, options: CommOptions | None = None) -> float:
    """How much longer than its payload at the links' rate a ring step of ``op`` takes under
    ``proto`` on the ring's slowest edge class: ``ring_paces``' second figure."""
    return ring_paces(op, proto, n_bytes, group, options)[1]


def ring_paces(op: str, proto: str, n_bytes: float, group: Cluster,
                options: CommOptions | None = None) -> tuple[float, float]:
    """(intra-node, inter-node) pace of a ring step of ``op`` under ``proto``: how much longer than
    its payload at an edge's own rate R_c a step takes. Each class runs at tuning.cc's refinement
    of its own rate, P_c (LL128 x 0.92, LL 1/4 capped by llMaxBws, per-channel ceilings; on the
    network, the verbs window and a measured bandwidth factor too): R_c / P_c. The network's edges
    also pay runRing's chunk rounding (every step moves the busiest slot's chunk on every channel:
    busiest volume / volume), which paces the ring's throughput there, as NCCL's ring's throughput
    bound has it; inside a node the rounded slots that carry no data leave the link to the one that
    does. So a faster network never slows the edges inside a node (a ceiling such as LL's caps
    every edge at its value, not at the same fraction of each). On one node both figures are the
    node's, rounding included. 1 for a large Simple ring's edges."""
    n = group.world_size
    t = tables(options)
    graph = ring_graph(group, t)
    streams = ring_streams(group, graph, options)
    volume = ring_volume_bytes(op, n_bytes, n)
    threads = ring_threads(proto, graph.channels * graph.bw, t)
    rounding = _ring_busiest_volume(op, proto, n_bytes, volume, ring_steps(op, n), graph.runtime_channels,
                                    threads, n, t) / volume
    if group.nodes == 1:
        pace = max(1.0, rounding * ring_rate_Bps(group, *streams)
                   / (_hardware_busbw_GBps(op, "ring", proto, group, graph, options) * 1e9))
        return pace, pace
    link_Bps = {"inter": inter_node_Bps(group, *streams)}
    hw_GBps = {"inter": min(link_Bps["inter"], graph.runtime_channels * verbs_window_Bps(group.inter_link,
                                                                                    t.window_bytes[proto])) / 1e9}
    if group.gpus_per_node > 1:
        link_Bps["intra"] = connection_Bps(group.intra_link, 1)
        hw_GBps["intra"] = link_Bps["intra"] / 1e9
    refined = {cls: _refine_busbw(hw_GBps[cls], "ring", proto, op, group, graph, t) * 1e9 for cls in link_Bps}
    refined["inter"] *= fitted_factors(group, proto)[0]
    paces = {cls: max(1.0, (rounding if cls == "inter" else 1.0) * R / refined[cls]) for cls, R in link_Bps.items()}
    return paces.get("intra", paces["inter"]), paces["inter"]


def _ring_busiest_volume(op: str, proto: str, n_bytes: float, volume: float, steps: int, channels: int,
                         threads: int, n: int, t: NcclTables = DEFAULT) -> float:
    """What a rank sends at the ring's pace: an allreduce's steps move the busiest slot's chunk on
    every channel (nccl_pipeline.ring_critical_bytes: runRing's rounding, 2.18 on), steps x
    channels x that; other operations, LL (whose busBw in tuning.cc, 1/4 of the graph's, capped by
    the measured llMaxBws, already holds what its chunks cost) and the releases before the tuning
    model (whose kernels this rounding is not read from), their plain ring volume."""
    if op != "allreduce" or proto == "LL" or t.tuner != "model":
        return volume
    return max(volume, steps * channels * ring_critical_bytes(proto, n_bytes, channels, n, threads, t))


def _require_p2p(t: NcclTables, op: str) -> None:
    if not t.p2p:
        raise ConfigError("strategy.nccl_version", t.versions[-1],
                          f"a version with ncclSend/ncclRecv for {op} (NCCL 2.7 or later: src/collectives/"
                          f"sendrecv.cc first appears in v2.7.3; NCCL {t.release} has none), or backend mpi/gloo")


def p2p_rate_Bps(group: Cluster, options: CommOptions | None = None) -> tuple[float, int, int | None]:
    """(rate, streams, copying threads) of a send to a peer on another node: its
    NCCL_NCHANNELS_PER_NET_PEER channels, each a connection of the transport's streams, and over
    verbs each no faster than NCCL_STEPS slots of NCCL_P2P_NET_CHUNKSIZE per round trip
    (``verbs_window_Bps``; init.cc: 128 KiB, so 1 MiB per channel per RTT)."""
    t = tables(options)
    link = group.inter_link
    streams = t.p2p_channels_per_net_peer * sockets_per_connection(link, options)
    # the peer's channels leave from one GPU: its proxy thread copies them unless helpers do
    threads = socket_threads(link, t.p2p_channels_per_net_peer, 1, options)
    rate = connection_Bps(link, streams, threads)
    window = t.p2p_channels_per_net_peer * verbs_window_Bps(link, t.nccl_steps * t.p2p_net_chunk_bytes)
    return min(rate, window), streams, threads


def _sendrecv(n_bytes: float, group: Cluster, options: CommOptions) -> CommCost:
    """One message between two ranks (on different nodes when the group spans nodes): NCCL's
    Simple protocol over NCCL_NCHANNELS_PER_NET_PEER channels (``p2p_rate_Bps``), the one-hop
    ring latency of its model."""
    if group.world_size == 1 or n_bytes <= 0:
        return zero_cost("p2p")
    across = group.nodes > 1
    _, lat_s, transfer_s = _sendrecv_parts(n_bytes, group, options)
    return CommCost(lat_s + transfer_s, "p2p", "Simple",
                    {"intra": 0.0 if across else n_bytes, "inter": n_bytes if across else 0.0})


def _sendrecv_parts(n_bytes: float, group: Cluster, options: CommOptions) -> tuple[str, float, float]:
    t = tables(options)
    _require_p2p(t, "sendrecv")
    across = group.nodes > 1
    link = group.inter_link if across else group.intra_link
    if across:
        rate, streams, threads = p2p_rate_Bps(group, options)
    else:
        rate, streams, threads = connection_Bps(link, 1), 1, None
    bw_factor, lat_factor = link.protocol_factors("Simple")
    rate *= bw_factor
    hw = "net" if across else ("nvlink" if link.kind == "nvlink" else "pci")
    lat_s = ((t.base_lat_us["ring"]["Simple"] + t.hw_lat_us[hw]["ring"]["Simple"]) * 1e-6
             + link.software_latency_s) * lat_factor
    wire = pipelined_s(n_bytes, rate, 1, link.latency_s, min(t.chunk_bytes["Simple"], n_bytes))
    cold = cold_start_s(link, n_bytes, streams, options.idle_s, threads) if across else 0.0
    return "Simple", lat_s, wire + cold


def _alltoall(n_bytes: float, group: Cluster, options: CommOptions) -> CommCost:
    """ncclAllToAll is a group of sends and receives to every peer, all in flight together."""
    if group.world_size == 1 or n_bytes <= 0:
        return zero_cost("p2p")
    t = tables(options)
    _require_p2p(t, "alltoall")
    per_peer = t.p2p_channels_per_net_peer
    streams = per_peer * sockets_per_connection(group.inter_link, options) * group.gpus_per_node
    threads = socket_threads(group.inter_link, per_peer * group.gpus_per_node, group.gpus_per_node, options)
    lat_s = (t.base_lat_us["ring"]["Simple"] + t.hw_lat_us["net" if group.nodes > 1 else "nvlink"]["ring"]["Simple"]) * 1e-6
    return CommCost(alltoall_s(n_bytes, group, streams, lat_s + group.inter_link.software_latency_s * (group.nodes > 1),
                               threads),
                    "p2p", "Simple", alltoall_bytes_by_link(n_bytes, group))


BACKEND = Backend(
    name="nccl",
    ops=library_ops(_collective, _alltoall, _sendrecv),
    algorithms=ALGORITHMS,
    protocols=PROTOCOLS,
    description="NVIDIA NCCL: its tuning model picks ring/tree/NVLS and LL/LL128/Simple; sockets or verbs",
    versions=known_versions(),
    default_version=DEFAULT_NCCL_VERSION,
)
