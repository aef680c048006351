"""The collective library of each era, MPI's host staging, IPoIB links, hosts, NCCL's verbs window
and TCP's restart after idle: each against its source's rule, worked out by hand here."""

from __future__ import annotations

import pytest

from sim.catalog import builtin_catalog, link_from_dict
from sim.cluster import cluster_from_dict
from sim.config import scenario_from_dict
from sim.costs.backends import CommOptions, comm_cost, mpi, nccl
from sim.costs.backends.nccl_tables import tables_for
from sim.costs.transports import connection_Bps, restart_window_bytes, rto_s, tcp_stream_copy_Bps
from sim.errors import ConfigError

CAT = builtin_catalog()
MIB = 2**20


def group(nodes=1, per_node=8, gpu="v100", intra="nvlink2", inter="ib_edr", catalog=CAT, **extra):
    return cluster_from_dict({"nodes": nodes, "gpus_per_node": per_node, "gpu": gpu, "intra_link": intra,
                              "inter_link": inter, **extra}, catalog)


# -- NCCL 2.0-2.3: rings, LL below a threshold, one socket ----------------------------------

def test_nccl_2_3_runs_rings_with_ll_below_its_thread_threshold():
    """common_coll.h: LL up to nRanks x nRings x 256 threads x threadThreshold; V100 across nodes
    (threshold 64 x 2): 4 nodes x 1 GPU, one NIC each -> one ring: 4 x 1 x 256 x 128 = 128 KiB."""
    g = group(nodes=4, per_node=1, inter="tcp_25gbe")
    opts = CommOptions(nccl_version="2.3")
    limit = 4 * 1 * 256 * 64 * 2
    assert nccl.ll_threshold_bytes(g, tables_for("2.3")) == limit == 128 * 1024
    assert nccl.choose("allreduce", limit, g, opts) == ("ring", "LL")
    assert nccl.choose("allreduce", limit + 1, g, opts) == ("ring", "Simple")
    p100 = group(nodes=4, per_node=1, gpu="p100", inter="tcp_25gbe")  # before Volta: 32 B a thread
    assert nccl.ll_threshold_bytes(p100, tables_for("2.0")) == 4 * 256 * 32 * 2
    node = group()  # one node of 8 V100s on NVLink 2: 6 links -> 6 rings, threshold x 1
    assert nccl.ring_graph(node, tables_for("2.3")).channels == 6
    assert nccl.ll_threshold_bytes(node, tables_for("2.3")) == 8 * 6 * 256 * 64


def test_nccl_2_3_has_no_tree_no_ll128_no_send_recv():
    g = group(nodes=2)
    for ask, field in ((CommOptions(algorithm="tree", nccl_version="2.3"), "strategy.collective"),
                       (CommOptions(protocol="LL128", nccl_version="2.3"), "strategy.protocol")):
        with pytest.raises(ConfigError) as err:
            comm_cost("nccl", "allreduce", MIB, g, ask)
        assert err.value.field == field
    with pytest.raises(ConfigError) as err:
        comm_cost("nccl", "sendrecv", MIB, g, CommOptions(nccl_version="2.3"))
    assert "2.7" in str(err.value)
    assert comm_cost("nccl", "allreduce", MIB, g, CommOptions(nccl_version="2.21")).algorithm in ("ring", "tree")


def test_nccl_2_3_one_socket_per_ring_each_its_own_proxy_thread():
    """net_socket.cu: one fd per connection; 2.21 opens a connection per run-time channel (the
    search's rings duplicated) on the GPU's one proxy thread."""
    g = group(nodes=2, per_node=8, inter="tcp_100gbe")
    old, new = nccl.tables(CommOptions(nccl_version="2.3")), nccl.tables(CommOptions())
    assert nccl.ring_streams(g, nccl.ring_graph(g, old), CommOptions(nccl_version="2.3")) == (1, 1)
    streams, threads = nccl.ring_streams(g, nccl.ring_graph(g, new), CommOptions())
    assert streams == 2 * nccl.ring_graph(g, new).channels and threads == nccl.ring_graph(g, new).channels
    # 2.3 leaves a node at one core's copies: 20 Gbit/s of the 94 the line carries
    busbw = 2 * MIB * 64 / comm_cost("nccl", "allreduce", 64 * MIB, g, CommOptions(nccl_version="2.3")).time_s
    assert busbw < 2.6e9 * 2 * 15 / 16


def test_nccl_socket_settings_arrived_in_2_4_8_and_1_x_stays_in_one_node():
    base = {"workload": {"model": "resnet50"}, "cluster": {"gpus": 8, "gpus_per_node": 4, "gpu": "v100",
                                                            "inter_link": "tcp_25gbe"}}
    with pytest.raises(ConfigError) as err:
        scenario_from_dict({**base, "strategy": {"nccl_version": "2.3", "nccl_socket_nthreads": 4}})
    assert err.value.field == "strategy.nccl_socket_nthreads" and "2.4.8" in str(err.value)
    with pytest.raises(ConfigError) as err:
        scenario_from_dict({**base, "strategy": {"nccl_version": "1.3"}})
    assert err.value.field == "strategy.nccl_version"
    with pytest.raises(ConfigError) as err:
        scenario_from_dict({**base, "strategy": {"nccl_version": 2.2}})  # YAML's number: refused, not read as 2.20
    assert "quoted" in str(err.value)
    one_node = scenario_from_dict({**base, "cluster": {**base["cluster"], "gpus": 4}, "strategy": {"nccl_version": "1.3"}})
    assert one_node.strategy.nccl_version == "1.3"
    assert nccl.ring_graph(one_node.cluster, tables_for("1.3")).channels == 1


def test_hopper_graphs_under_50_gbs_with_over_four_channels_are_not_duplicated():
    """search.cc ncclTopoDupChannels from 2.18.3: 'ccMin > 80 && bwIntra < 50 && nChannels > 4'.
    2 x 8 H100 with 8 NDR NICs: 8 x 400/8 = 400 GB/s of NICs, 18 x 20.6 = 370.8 of NVLink; the SM90
    inter array's 48 fits 7 times: 7 channels at 48 GB/s, kept (not 14 at 24)."""
    g = group(nodes=2, gpu="h100", intra="nvlink4", inter="ib_ndr", nics_per_node=8)
    graph = nccl.ring_graph(g, tables_for("2.21"))
    assert (graph.channels, graph.bw, graph.runtime_channels) == (7, 48.0, 14)
    v100 = nccl.ring_graph(group(nodes=2, inter="ib_ndr", nics_per_node=8), tables_for("2.21"))
    assert (v100.channels, v100.bw) == (4, 24.0)  # Volta: 6 x 20 = 120 GB/s -> 2 x 48, duplicated to 4 x 24


# -- NCCL over verbs: NCCL_STEPS slots per round trip --------------------------------------

def test_a_send_over_a_long_verbs_link_moves_its_slots_once_per_round_trip():
    """net_ib.cc: ncclIbIsend waits for the receiver's posted slot, and at most NCCL_STEPS = 8 of
    NCCL_P2P_NET_CHUNKSIZE = 128 KiB are posted per channel, 2 channels to a net peer: 2 MiB per RTT.
    One-way 5 ms (RTT 10 ms): 64 MiB take 64 MiB / (2 MiB / 10 ms) + 5 ms + NCCL's 8.4 + 14 us."""
    cat = CAT.extended({"links": {"ib_long": {"base": "ib_edr", "latency_us": 5000}}})
    g = group(nodes=2, per_node=1, inter="ib_long", catalog=cat)
    want = (8.4 + 14.0) * 1e-6 + 64 * MIB / (2 * 8 * 131072 / 0.010) + 0.005
    assert comm_cost("nccl", "sendrecv", 64 * MIB, g, CommOptions()).time_s == pytest.approx(want, rel=1e-12)
    near = group(nodes=2, per_node=1, inter="ib_edr")  # 2 us RTT: the line, 12 GB/s, not the window
    assert nccl.p2p_rate_Bps(near)[0] == pytest.approx(CAT.links["ib_edr"].effective_Bps)
    # sockets have no such wait: TCP's window bounds them (per stream, transports.py)
    tcp = group(nodes=2, per_node=1, inter="tcp_10gbe", catalog=cat)
    assert nccl.verbs_window_Bps(tcp.inter_link, 1e6) == float("inf")


def test_a_ring_over_a_long_verbs_link_is_capped_by_its_channels_buffers():
    """Each run-time channel's connection holds NCCL_BUFFSIZE 4 MiB in flight (Simple): at 10 ms
    RTT a node sends at most channels x 4 MiB / 10 ms."""
    cat = CAT.extended({"links": {"ib_long": {"base": "ib_edr", "latency_us": 5000}}})
    g = group(nodes=2, per_node=1, inter="ib_long", catalog=cat)
    graph = nccl.ring_graph(g)
    cap = graph.runtime_channels * 4 * MIB / 0.010
    opts = CommOptions(algorithm="ring", protocol="Simple")
    bus = nccl._hardware_busbw_GBps("allreduce", "ring", "Simple", g, graph, opts) * 1e9
    assert bus == pytest.approx(min(cap, CAT.links["ib_edr"].effective_Bps))


# -- TCP's restart after idle (Linux tcp_cwnd_restart) ---------------------------------------

def test_linux_halves_the_window_once_per_rto_of_idle_never_below_the_initial_window():
    """RTT 20 ms -> RTO = 20 + 200 ms (TCP_RTO_MIN floors RTTVAR); a 2.5 MB window of 1448-byte
    segments is 1726 of them: idle 1 s holds 4 RTOs after the first check (1.0 - k x 0.22 > 0 for
    k = 1..4): 1726 >> 4 = 107 segments; 0.3 s: one halving (863); 0.2 s: no restart at all."""
    wan = link_from_dict("wan", {"base": "tcp_10gbe", "tc": {"delay_ms": 10}}, links=CAT.links)
    rtt = 2 * (5e-6 + 0.010)
    assert rto_s(wan) == pytest.approx(rtt + 0.2)
    assert restart_window_bytes(wan, 1726 * 1448, 1.0) == 107 * 1448
    assert restart_window_bytes(wan, 1726 * 1448, 0.3) == 863 * 1448
    assert restart_window_bytes(wan, 1726 * 1448, 0.2) == 1726 * 1448
    assert restart_window_bytes(wan, 1726 * 1448, 60.0) == 10 * 1448  # the floor: the initial window
    assert restart_window_bytes(wan, 6 * 1448, 60.0) == 6 * 1448  # min(initial, window): never raised


# -- MPI: the implementation's rules, staging through the host -------------------------------

def test_open_mpi_1_10_allreduce_follows_its_fixed_decision():
    """coll_tuned_decision_fixed.c: recursive doubling below 10000 B, a ring when p x 1 MiB >= S,
    else the ring in 1 MiB segments; MPICH 3: recursive doubling to 2048 B, then Rabenseifner."""
    g = group(nodes=8, per_node=1, inter="ib_edr")
    ompi = CommOptions(mpi_library="openmpi-1.10")
    assert [comm_cost("mpi", "allreduce", s, g, ompi).algorithm for s in (9999, 10000, 8 * MIB, 8 * MIB + 1)] == \
        ["recursive_doubling", "ring", "ring", "ring_segmented"]
    assert [comm_cost("mpi", "allreduce", s, g, CommOptions()).algorithm for s in (2048, 2049)] == \
        ["recursive_doubling", "rabenseifner"]


def test_a_gpu_buffer_is_copied_through_the_host_around_the_mpi_call():
    """host_copy (default): S down and S up at min(PCIe 12 GB/s, the host's memcpy 3.4 GB/s);
    host_copy_pinned at the PCIe rate; the host then sums (p-1)/p S at 3 x bytes / 8.0 GB/s
    (epyc_vm_2026's figures, named here; a P100's usual host, DGX-1's, copies at 9.0 GB/s)."""
    g = group(nodes=4, per_node=1, gpu="p100", inter="ib_fdr", host="epyc_vm_2026")
    s = 64 * MIB
    pinned = comm_cost("mpi", "allreduce", s, g, CommOptions(mpi_gpu_buffers="host_copy_pinned")).time_s
    pageable = comm_cost("mpi", "allreduce", s, g, CommOptions()).time_s
    assert pageable - pinned == pytest.approx(2 * s / 3.4e9 - 2 * s / 12e9, rel=1e-9)
    cpu = group(nodes=4, per_node=1, gpu="cpu", inter="ib_fdr")  # tensors already on the host: no copies
    assert mpi.staging_s("allreduce", s, cpu, "host_copy", mpi.MPI_LIBRARIES["mpich-3"]) == 0.0
    assert mpi.host_reduce_s(0.75 * s, g) == pytest.approx(3 * 0.75 * s / 8.0e9)


def test_cuda_aware_open_mpi_copies_reductions_whole_and_pipelines_the_rest():
    """coll/cuda: MPI_Allreduce on device buffers copies them to malloc'ed memory and back (as
    host_copy); a broadcast goes through the PML's pipeline: one 128 KiB fragment down and up."""
    g = group(nodes=4, per_node=1, gpu="p100", inter="ib_fdr")
    lib = mpi.MPI_LIBRARIES["openmpi-1.10"]
    s = 64 * MIB
    assert mpi.staging_s("allreduce", s, g, "cuda_aware", lib) == mpi.staging_s("allreduce", s, g, "host_copy", lib)
    assert mpi.staging_s("broadcast", s, g, "cuda_aware", lib) == pytest.approx(2 * 128 * 1024 / 12e9)
    with pytest.raises(ConfigError) as err:
        comm_cost("mpi", "allreduce", s, g, CommOptions(mpi_gpu_buffers="cuda_aware"))  # MPICH 3: not modelled
    assert err.value.field == "strategy.mpi_gpu_buffers"


# -- IPoIB and hosts --------------------------------------------------------------------------

def test_ipoib_links_carry_ib_framing_and_a_stream_its_host_copies():
    """Datagram FDR: 1992 TCP bytes per 2048 + 34-byte UD packet x 64b/66b; connected FDR: 65468 of
    65524 + 32 x 26 bytes x 64b/66b. A stream over EDR datagram: 20 Gbit/s measured (ompi #9087)."""
    fdr = CAT.links["ib_fdr"].efficiency  # 64b/66b: 54.5 of 56 Gb/s
    assert CAT.links["ipoib_fdr_datagram"].efficiency == pytest.approx(1992 / 2082 * fdr, abs=6e-4)
    assert CAT.links["ipoib_fdr_connected"].efficiency == pytest.approx(65468 / (65524 + 32 * 26) * fdr, abs=6e-4)
    assert CAT.links["ipoib_edr_datagram"].efficiency == pytest.approx(4040 / 4130, abs=5e-4)
    edr = CAT.links["ipoib_edr_datagram"]
    assert connection_Bps(edr, 1) == pytest.approx(20e9 / 8) and connection_Bps(edr, 8) == pytest.approx(edr.effective_Bps)
    assert edr.kind == "tcp" and "software_latency_us" in edr.assumed


def test_a_cluster_runs_on_its_hosts_figures():
    cat = CAT.extended({"hosts": {"old": {"cores": 4, "tcp_stream_Gbps": 8, "memcpy_GBps": 2, "reduce_GBps": 5,
                                          "pcie_link": "pcie3", "source": "a test host"}}})
    slow = group(nodes=2, per_node=1, inter="tcp_25gbe", catalog=cat, host="old")
    assert tcp_stream_copy_Bps(slow.inter_link) == 1e9 and slow.host is not None
    assert tcp_stream_copy_Bps(group(nodes=2, per_node=1, inter="tcp_25gbe").inter_link) == 2.5e9  # default host
    fixed = group(nodes=2, per_node=1, inter="ipoib_edr_datagram", catalog=cat, host="old")
    assert tcp_stream_copy_Bps(fixed.inter_link) == 2.5e9  # the link's own measured stream wins
    with pytest.raises(ConfigError) as err:
        group(nodes=2, per_node=1, host="no_such_host")
    assert err.value.field == "cluster.host"
    with pytest.raises(ConfigError) as err:
        CAT.extended({"hosts": {"x": {"cores": 4, "tcp_stream_Gbps": 8, "memcpy_GBps": 2, "reduce_GBps": 5,
                                      "pcie_link": "ib_edr"}}})
    assert err.value.field == "catalog.hosts.x.pcie_link"
