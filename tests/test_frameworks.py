"""Frameworks as presets (sim/frameworks.py), their mechanisms in the engine, and parameter
servers' layouts and Horovod's hierarchical allreduce through the libraries (sim/costs/comm.py)."""

from __future__ import annotations

import pytest

from sim.catalog import builtin_catalog
from sim.cluster import cluster_from_dict
from sim.config import scenario_from_dict
from sim.costs.backends import comm_cost
from sim.costs.comm import CommSpec, allreduce_cost
from sim.engine.plan import build_plan, fusion_batches
from sim.errors import ConfigError
from sim.frameworks import FRAMEWORKS
from sim.simulate import simulate
from sim.strategy import strategy_from_dict

LAYERS = [{"name": f"l{i}", "param_count": 1_000_000, "fwd_flops": 2e9, "activation_elems": 1000}
          for i in range(6)]
IDEAL = {"gpus": {"ideal": {"peak_tflops": {"fp32": 1.0}, "memory_bandwidth_GBps": 1e6, "memory_GiB": 1000,
                            "efficiency": 1.0, "sm_count": 100}},
         "links": {"ab": {"kind": "custom", "bandwidth_GBps": 1, "latency_us": 10}}}


def scenario(**strategy):
    return scenario_from_dict({"workload": {"layers": LAYERS, "batch_size": 1, "optimizer": "sgd"},
                               "cluster": {"gpus": 4, "gpus_per_node": 4, "gpu": "ideal", "intra_link": "ab"},
                               "strategy": strategy, "catalog": IDEAL,
                               "variability": {"stragglers": False}})  # closed forms of one rank at nominal speed


def test_a_framework_fills_only_what_the_user_leaves_out():
    s = strategy_from_dict({"framework": "horovod"})
    assert s.fusion_bytes == 64 * 2**20 and s.cycle_time_s == pytest.approx(0.005) and s.overlap
    s = strategy_from_dict({"framework": "horovod", "fusion_mib": 8})
    assert s.fusion_bytes == 8 * 2**20
    assert strategy_from_dict({"framework": "chainermn_2017"}).overlap is False
    assert set(FRAMEWORKS) >= {"pytorch_ddp", "horovod", "chainermn", "tf_ps"}
    with pytest.raises(ConfigError, match="strategy.framework"):
        strategy_from_dict({"framework": "mxnet_2016"})


def test_fusion_batches_are_runs_of_backward_order_up_to_the_threshold():
    batches, release = fusion_batches([4, 4, 4, 10, 1], 8, 0.005)
    # Horovod's coordinator: a batch takes the next tensor only while the total stays <= the
    # threshold, and stops at the first that does not fit (the 10 goes alone, the 1 after it
    # is not pulled forward): sim/costs/fusion.py
    assert batches == [[0, 1], [2], [3], [4]]
    assert release == [0.005] * 4


def test_horovod_batches_start_no_earlier_than_the_first_cycle_tick():
    s = scenario(framework="horovod", fusion_mib=4, cycle_time_ms=50, comm_slows_compute=False, negotiation=None)
    plan = build_plan(s)
    assert plan.bucket_release_s == (0.05,) * len(plan.buckets)
    fast = simulate(s)
    first = fast.buckets[0]
    backward_start = sum(plan.fwd_s)
    assert first.start_s >= backward_start + 0.05 - 1e-12


def test_per_iteration_overhead_is_added_once_and_in_the_baseline_too():
    plain = simulate(scenario(collective="ring"))
    slow = simulate(scenario(collective="ring", iteration_overhead_ms=3))
    assert slow.iteration_time_s == pytest.approx(plain.iteration_time_s + 0.003)
    assert slow.baseline_time_s == pytest.approx(plain.baseline_time_s + 0.003)


def test_double_buffering_hides_communication_behind_the_next_iterations_compute():
    s = scenario(framework="chainermn", comm_slows_compute=False)
    result = simulate(s)
    plan = build_plan(s)
    assert result.iteration_time_s == pytest.approx(max(plan.compute_s, sum(plan.bucket_comm_s)), rel=1e-9)


def test_nccl_kernels_slow_compute_by_their_channels_share_of_the_sms():
    on = scenario_from_dict({"workload": {"model": "resnet50"},
                             "cluster": {"gpus": 16, "gpus_per_node": 8, "gpu": "a100", "intra_link": "nvlink3",
                                         "inter_link": "ib_hdr", "nics_per_node": 1},
                             "strategy": {"framework": "pytorch_ddp"}})
    plan = build_plan(on)
    # by hand: one NIC per node gives NCCL's search one ring across the two nodes, which
    # connect.cc duplicates into 2 runtime channels, each kernel block on one SM of A100's 108
    held = {f.sms_held for f in plan.bucket_footprints if f is not None}
    assert held == {2} and all(f.sms == 108 for f in plan.bucket_footprints if f)
    off = scenario_from_dict({**{"workload": {"model": "resnet50"}},
                              "cluster": {"gpus": 16, "gpus_per_node": 8, "gpu": "a100", "intra_link": "nvlink3",
                                          "inter_link": "ib_hdr", "nics_per_node": 1},
                              "strategy": {"framework": "pytorch_ddp", "comm_slows_compute": False}})
    assert simulate(on).iteration_time_s > simulate(off).iteration_time_s


CAT = builtin_catalog()


def cluster(nodes=4, g=4, inter="tcp_10gbe"):
    return cluster_from_dict({"nodes": nodes, "gpus_per_node": g, "gpu": "v100", "intra_link": "nvlink2",
                              "inter_link": inter}, CAT)


def test_colocated_servers_keep_a_share_of_every_push_inside_the_node():
    c = cluster()
    dedicated = allreduce_cost(64e6, c, CommSpec("nccl", "ps", ps_servers=4, ps_layout="dedicated"))
    colocated = allreduce_cost(64e6, c, CommSpec("nccl", "ps", ps_servers=4, ps_layout="colocated"))
    assert colocated.bytes_by_link["inter"] == pytest.approx(dedicated.bytes_by_link["inter"] * 3 / 4)


def test_node_aggregation_pushes_once_per_node():
    c = cluster()
    agg = allreduce_cost(64e6, c, CommSpec("nccl", "ps", ps_servers=4, ps_layout="node_aggregated"))
    flat = allreduce_cost(64e6, c, CommSpec("nccl", "ps", ps_servers=4, ps_layout="dedicated"))
    assert agg.bytes_by_link["inter"] == pytest.approx(flat.bytes_by_link["inter"] / 4)
    assert agg.time_s < flat.time_s


def test_centralized_is_the_librarys_reduce_then_broadcast():
    c = cluster()
    central = allreduce_cost(64e6, c, CommSpec("nccl", "ps", ps_layout="centralized"))
    assert central.time_s == pytest.approx(comm_cost("nccl", "reduce", 64e6, c).time_s
                                           + comm_cost("nccl", "broadcast", 64e6, c).time_s)


def test_hierarchical_is_reduce_scatter_inside_allreduce_across_allgather_inside():
    c = cluster()
    spec = CommSpec("nccl", "hierarchical")
    cost = allreduce_cost(64e6, c, spec)
    node = cluster(1, 4)
    across = cluster_from_dict({"nodes": 4, "gpus_per_node": 1, "gpu": "v100", "inter_link": "tcp_10gbe"}, CAT)
    from dataclasses import replace

    across = replace(across, oversubscription=4.0)  # four local rings share each node's NIC
    expected = (comm_cost("nccl", "reduce_scatter", 64e6, node).time_s
                + comm_cost("nccl", "allreduce", 16e6, across).time_s
                + comm_cost("nccl", "allgather", 64e6, node).time_s)
    assert cost.time_s == pytest.approx(expected)


def test_horovod_2017_negotiates_every_tensor_with_its_coordinator_before_each_batch():
    """Horovod 0.9-0.13.2 (operations.cc, BackgroundThreadLoop): rank 0 receives (N-1)(T+1)
    messages at 1.2 us, then sends each batch's response to the N-1 workers at 8.7 us each
    (scripts/measure_horovod_coordinator.py). 4 ranks, 6 tensors of 4 MB, fusion 4 MiB: six
    one-tensor batches; by hand: before = 3 x 7 x 1.2 us + the link's 10 us = 35.2 us, 26.1 us
    per batch, 26.1 us of DONE messages."""
    s = scenario(framework="horovod", fusion_mib=4, cycle_time_ms=50, comm_slows_compute=False)
    plan = build_plan(s)
    assert len(plan.buckets) == 6
    assert plan.bucket_release_s == pytest.approx([0.05 + 35.2e-6 + (b + 1) * 26.1e-6 for b in range(6)], rel=1e-9)
    assert plan.coordination_s == pytest.approx(35.2e-6 + 7 * 26.1e-6, rel=1e-9)
    assert simulate(s).coordination_time_s == pytest.approx(plan.coordination_s)


def test_horovod_021_agrees_through_its_response_cache_in_log2_exchanges():
    """>= 0.16.2: one bit-vector allreduce per cycle, ceil(log2 4) = 2 exchanges of the link's
    10 us + 8.7 us, whatever the number of tensors; no per-batch cost."""
    s = scenario(framework="horovod_0.21", fusion_mib=4, cycle_time_ms=50, comm_slows_compute=False)
    plan = build_plan(s)
    assert plan.bucket_release_s == pytest.approx([0.05 + 2 * 18.7e-6] * len(plan.buckets), rel=1e-9)
    assert plan.coordination_s == pytest.approx(2 * 18.7e-6, rel=1e-9)


def test_negotiation_grows_with_ranks_and_tensors_and_only_the_2017_protocol_per_tensor():
    from sim.costs.coordination import horovod_cached, horovod_p2p

    base = horovod_p2p(32, 100, 0.0).total_s(2)
    assert horovod_p2p(128, 100, 0.0).total_s(2) == pytest.approx(base * 127 / 31, rel=1e-9)
    assert horovod_p2p(32, 200, 0.0).before_s == pytest.approx(31 * 201 * 1.2e-6)
    assert horovod_cached(1024, 100, 0.0).total_s(2) == pytest.approx(horovod_cached(1024, 10_000, 0.0).total_s(2))
    assert horovod_p2p(1, 100, 1e-5).total_s(3) == 0.0
