"""The devset's second tranche (validation/devset_frameworks.py): each row's scenario as a user
would write it, and the 2017 frameworks' mechanisms against their sources' formulas."""

from __future__ import annotations

import pytest

from sim.catalog import builtin_catalog
from sim.cluster import cluster_from_dict
from sim.config import scenario_from_dict
from sim.costs.backends import CommOptions, comm_cost
from sim.costs.backends.gloo import binary_blocks, halving_doubling_allreduce
from sim.costs.comm import CommSpec, allreduce_cost
from sim.costs.ps import PS_RPCS, mxnet_key_placement, ps_phase_s
from validation.devset import DEVSET_DIR, _read
from validation.devset_frameworks import (
    chainermn_scenario,
    chainermn_spec,
    devset_catalog,
    goyal_scenario,
    horovod_docs_per_gpu,
)

CAT = builtin_catalog()


def test_a_chainermn_row_is_the_scenario_a_user_writes():
    """TensorFlow 0.12 on 64 GPUs: 16 nodes of 4 TITAN X over IPoIB, n - 1 = 15 parameter servers
    on the worker nodes (the post's appendix), the framework's preset named, the post's nodes and
    its 256 x 256 ImageNet."""
    assert chainermn_spec("TensorFlow", 64) == {
        "name": "chainermn2017-TensorFlow-64",
        "workload": {"model": "resnet50", "batch_size": 32, "data": "imagenet_jpeg_256"},
        "cluster": {"gpus": 64, "gpus_per_node": 4, "gpu": "titan_x_maxwell", "intra_link": "pcie3",
                    "inter_link": "ipoib_fdr_datagram", "host": "xeon_e5_2623v3_x2"},
        "strategy": {"framework": "tf_ps_0.12", "precision": "fp32", "ps_servers": 15},
    }
    assert chainermn_spec("ChainerMN", 2)["cluster"]["gpus_per_node"] == 2  # 1-2 GPUs: one node
    s = scenario_from_dict(chainermn_spec("MXNet", 128), devset_catalog())
    assert (s.cluster.nodes, s.strategy.ps_servers, s.strategy.ps_layout) == (32, 32, "colocated_aggregated")
    assert s.strategy.ps_placement == "mxnet_keys" and s.strategy.ps_rpc == "ps_lite_zmq"


def test_compute_is_calibrated_to_the_frameworks_own_one_gpu_figure():
    """ChainerMN's 81.8 images/s at batch 32: one GPU's iteration is 32 / 81.8 s."""
    from sim.simulate import simulate

    result = simulate(chainermn_scenario("ChainerMN", 8, 81.8))
    assert result.baseline_time_s == pytest.approx(32 / 81.8, rel=1e-9)


def test_goyal_one_p100_takes_its_120_ms_backward():
    from sim.engine.plan import build_plan

    plan = build_plan(goyal_scenario(8).with_world_size(1))
    assert sum(plan.bwd_s) == pytest.approx(0.120, rel=1e-6)
    s = goyal_scenario(352)
    assert (s.cluster.nodes, s.cluster.gpus_per_node, s.cluster.inter_link.name) == (44, 8, "tcp_50gbe")
    assert s.strategy.concurrent_collectives == 16 and s.strategy.root_collective == "halving_doubling"


def test_horovod_docs_one_gpu_figures():
    per_gpu = horovod_docs_per_gpu(DEVSET_DIR, _read)
    assert per_gpu == pytest.approx({"InceptionV3": 17024 / 128, "ResNet-101": 15072 / 128, "VGG-16": 154.0})


def test_the_titan_x_is_the_datasheets():
    gpu = CAT.gpus["titan_x_maxwell"]
    assert gpu.peak_flops["fp32"] == pytest.approx(3072 * 2 * 1.075e9, rel=1e-3)
    assert gpu.memory_bandwidth_Bps == pytest.approx(7.01e9 / 8 * 384, rel=1e-3)  # 336.5 GB/s


# -- mechanisms --------------------------------------------------------------------------

def test_mxnet_keys_go_whole_to_one_server_below_the_bound_and_split_above():
    """KVStoreDist::EncodeKey: key 0 (2 M elements) split over 3 servers; key 1 (500 k) to
    (1 x 9973) mod 3 = 1; key 2 (999,999) to (2 x 9973) mod 3 = 2."""
    placed = mxnet_key_placement([2e6, 5e5, 999_999], 3, 4)
    assert placed[0] == [(0, 8e6 / 3), (1, 8e6 / 3), (2, 8e6 / 3)]
    assert placed[1] == [(1, 2e6)] and placed[2] == [(2, 3_999_996)]


def test_halving_doubling_over_binary_blocks_by_hand():
    """44 ranks = 32 + 8 + 4: 2 (log2 32 + 2) steps of alpha; 2 (31/32 + 1/4) S / R, R one TCP
    stream per rank (a node of one GPU) at one core's 20 Gbit/s copy rate."""
    assert binary_blocks(44) == [32, 8, 4] and binary_blocks(32) == [32]
    c = cluster_from_dict({"nodes": 44, "gpus_per_node": 1, "gpu": "p100", "inter_link": "tcp_50gbe"}, CAT)
    link = c.inter_link
    s = 100e6
    t = halving_doubling_allreduce(s, c, CommOptions()).time_s
    alpha = link.alpha_s
    assert t == pytest.approx(14 * alpha + 2 * (31 / 32 + 1 / 4) * s / 2.5e9, rel=1e-6)
    # sixteen allreduces in flight on their own connections: the NIC's payload rate instead
    t16 = halving_doubling_allreduce(s, c, CommOptions(concurrent=16)).time_s
    assert t16 == pytest.approx(14 * alpha + 2 * (31 / 32 + 1 / 4) * s / (50e9 / 8 * 1448 / 1538), rel=1e-6)


def test_hierarchical_root_is_reduce_allreduce_among_roots_broadcast():
    c = cluster_from_dict({"nodes": 4, "gpus_per_node": 4, "gpu": "titan_x_maxwell", "intra_link": "pcie3",
                           "inter_link": "ib_fdr"}, CAT)
    node = cluster_from_dict({"nodes": 1, "gpus_per_node": 4, "gpu": "titan_x_maxwell", "intra_link": "pcie3"}, CAT)
    roots = cluster_from_dict({"nodes": 4, "gpus_per_node": 1, "gpu": "titan_x_maxwell", "inter_link": "ib_fdr"}, CAT)
    cost = allreduce_cost(100e6, c, CommSpec("mpi", "hierarchical_root"))
    expected = (comm_cost("nccl", "reduce", 100e6, node).time_s + comm_cost("mpi", "allreduce", 100e6, roots).time_s
                + comm_cost("nccl", "broadcast", 100e6, node).time_s)
    assert cost.time_s == pytest.approx(expected, rel=1e-9)
    # MPICH's Rabenseifner among 4 roots over FDR verbs: 2 log2 4 alpha + 2 (3/4) S / (56 x 0.973 Gbit/s),
    # on GPU buffers of a MPI that is not CUDA-aware (mpi_gpu_buffers' default host_copy): the input
    # copied out and the output back at the default host's pageable rate (memcpy 3.4 GB/s < PCIe 3's
    # 12), and the reduce-scatter's (n-1)/n S summed on the host (two reads and a write per element
    # at reduce_GBps 8.0: sim/data/hosts.yaml epyc_vm_2026)
    mpi = comm_cost("mpi", "allreduce", 100e6, roots).time_s
    wire = 4 * roots.inter_link.alpha_s + 1.5 * 100e6 / (56e9 * 0.973 / 8)
    staging = 2 * 100e6 / 9.95e9 + 0.75 * 100e6 * 3 / 19.9e9
    assert mpi == pytest.approx(wire + staging, rel=1e-6)


def test_a_ps_stream_is_capped_by_its_rpc_layer():
    """TF 0.12's gRPC moved 569 MB/s per RecvTensor stream (tensorflow#6256): two nodes of one GPU,
    one server on node 0 (colocated), a 100 MB bucket: the remote worker's 100 MB over one stream
    at 569 MB/s dominates 100 MB over IB FDR."""
    c = cluster_from_dict({"nodes": 2, "gpus_per_node": 1, "gpu": "v100", "inter_link": "ib_fdr"}, CAT)
    t, crossing = ps_phase_s([100e6], c, 1, 1, PS_RPCS["grpc_tf0"].stream_Bps)
    assert t == pytest.approx(c.inter_link.alpha_s + 100e6 / 569.27e6, rel=1e-9)
    assert crossing == pytest.approx(100e6)  # only the remote worker's push crosses a NIC
    t_verbs, _ = ps_phase_s([100e6], c, 1, 1, None)
    assert t_verbs == pytest.approx(c.inter_link.alpha_s + 100e6 / (56e9 * 0.973 / 8), rel=1e-9)


def test_colocated_servers_one_per_node_at_most():
    c = cluster_from_dict({"nodes": 4, "gpus_per_node": 4, "gpu": "v100", "intra_link": "nvlink2",
                           "inter_link": "tcp_10gbe"}, CAT)
    many = allreduce_cost(64e6, c, CommSpec("nccl", "ps", ps_servers=31, ps_layout="colocated"))
    four = allreduce_cost(64e6, c, CommSpec("nccl", "ps", ps_servers=4, ps_layout="colocated"))
    assert many.time_s == pytest.approx(four.time_s)
    one = allreduce_cost(64e6, c, CommSpec("nccl", "ps", ps_servers=1, ps_layout="colocated"))
    # one server on node 0: the 12 remote workers' pushes all enter its NIC
    assert one.bytes_by_link["inter"] == pytest.approx(2 * 12 * 64e6)
    assert one.time_s > four.time_s


def test_the_ipoib_rows_run_the_catalogs_ipoib_link_and_the_posts_host():
    """MXNet and TensorFlow 0.12 over H2's IPoIB FDR entry (datagram mode, assumed), every row on the
    post's 2 x E5-2623 v3 nodes reading its 256 x 256 JPEGs."""
    for framework in ("MXNet", "TensorFlow"):
        spec = chainermn_spec(framework, 32)
        assert spec["cluster"]["inter_link"] == "ipoib_fdr_datagram" in devset_catalog().links
    for framework in ("ChainerMN", "CNTK", "MXNet", "TensorFlow"):
        s = chainermn_scenario(framework, 8, 80.0)
        assert s.cluster.host is not None and s.cluster.host.name == "xeon_e5_2623v3_x2" and s.cluster.host.cores == 8
        assert s.workload.data == "imagenet_jpeg_256"


def test_mxnet_stages_each_key_through_host_memory():
    """CommCPU for a 100 MB key on 4 GPUs over PCIe Gen3 (12 GB/s payload): copy out, a sum of
    5 x 100 MB by 4 threads at the host's summing rate (the TITAN X's usual host,
    sim/data/hosts.yaml xeon_e5_2623v3_x2: reduce_GBps 19.9), copy back, by hand."""
    from sim.costs.ps import host_reduce_broadcast_s

    c = cluster_from_dict({"nodes": 2, "gpus_per_node": 4, "gpu": "titan_x_maxwell", "intra_link": "pcie3",
                           "inter_link": "tcp_10gbe"}, CAT)
    expected = 2 * 100e6 / 12e9 + 5 * 100e6 / (4 * 19.9e9)
    assert host_reduce_broadcast_s(100e6, c) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("strategy, field", [
    ({"negotiation": "gossip"}, "strategy.negotiation"),
    ({"ps_rpc": "thrift"}, "strategy.ps_rpc"),
    ({"concurrent_collectives": 0}, "strategy.concurrent_collectives"),
    ({"collective": "hierarchical_root", "backend": "nccl", "root_collective": "halving_doubling"},
     "strategy.root_collective"),
    ({"ps_placement": "random"}, "strategy.ps_placement"),
])
def test_bad_framework_settings_are_one_line_errors(strategy, field):
    from sim.errors import ConfigError

    spec = {"workload": {"model": "resnet50"}, "cluster": {"gpus": 8, "gpus_per_node": 4, "gpu": "v100",
                                                          "intra_link": "nvlink2", "inter_link": "tcp_10gbe"},
            "strategy": strategy}
    with pytest.raises(ConfigError, match=field) as err:
        scenario_from_dict(spec)
    assert "\n" not in str(err.value)


def test_chainermn_2017_reduces_among_the_roots_by_two_alltoalls():
    """ChainerMN 1.0's inter_allreduce_gpu (and its first public commit, Feb 2017): MPI_Alltoall of
    the whole buffer, a sum on the GPU, MPI_Alltoall back. Open MPI 1.10, CUDA-aware: an alltoall
    is no reduction, so it is pipelined through 128 KiB host fragments at min(network, PCIe), not
    copied whole (coll/cuda). By hand on 4 node roots of the post's cluster, S = 100 MB: pairwise
    alltoall = 3 steps of alpha + (S/4) / min(FDR 54.5 Gbit/s, PCIe 3's 12 GB/s) plus one fragment
    down and up, twice; the GPU's (3 + 3/4) S of traffic at the TITAN X's 336.5 GB/s."""
    from sim.costs.comm import alltoall_sum_allreduce

    s = chainermn_scenario("ChainerMN", 16, 81.8)
    st = s.strategy
    assert (st.root_collective, st.mpi_library, st.mpi_gpu_buffers, st.nccl_version) == \
        ("alltoall_sum", "openmpi-1.10", "cuda_aware", "1.3")
    roots = cluster_from_dict({"nodes": 4, "gpus_per_node": 1, "gpu": "titan_x_maxwell", "inter_link": "ib_fdr",
                               "host": "xeon_e5_2623v3_x2"}, CAT)
    spec = CommSpec("mpi", "hierarchical_root", root_collective="alltoall_sum", mpi_library="openmpi-1.10",
                    mpi_gpu_buffers="cuda_aware")
    cost = alltoall_sum_allreduce(100e6, roots, spec)
    rate = min(56e9 * 0.973 / 8, 16e9 * 0.75)
    fragment = 2 * 128 * 1024 / (16e9 * 0.75)
    a2a = 3 * (roots.inter_link.alpha_s + 25e6 / rate) + fragment
    assert cost.time_s == pytest.approx(2 * a2a + 3.75 * 100e6 / 336.5e9, rel=1e-6)
    # Open MPI's own allreduce on device buffers would copy 100 MB down and up whole
    whole = comm_cost("mpi", "allreduce", 100e6, roots, CommOptions(mpi_library="openmpi-1.10",
                                                                     mpi_gpu_buffers="cuda_aware"))
    assert whole.time_s > cost.time_s


def test_cntk_copies_through_pinned_host_buffers_into_open_mpi_1_10():
    """CNTK 2.0 across nodes: cudaMemcpy into CUDAPageLockedMemAllocator buffers (no NCCL, no GDR
    build), MPI on host memory: Open MPI 1.10.3 as its Dockerfile builds it (not CUDA-aware)."""
    st = chainermn_scenario("CNTK", 16, 120.7).strategy
    assert (st.backend, st.mpi_library, st.mpi_gpu_buffers) == ("mpi", "openmpi-1.10", "host_copy_pinned")
