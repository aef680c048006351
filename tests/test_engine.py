"""The event layer: exact logs for hand-computable cases, and invariants of whole iterations."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config import scenario_from_dict
from sim.engine.plan import assign_buckets, build_plan
from sim.simulate import simulate

TEST_CATALOG = {
    "gpus": {"testgpu": {"peak_tflops": {"fp32": 1.0}, "memory_bandwidth_GBps": 1200, "memory_GiB": 16, "efficiency": 1.0}},
    "links": {"testlink": {"bandwidth_GBps": 1, "latency_us": 10, "efficiency": 1.0}},
}


def two_layer_scenario(world: int = 2, overlap: bool = True, **strategy):
    """Two layers with measured times: fwd 1 ms each, bwd 2 ms each; 1000 and 2000 fp32 params."""
    return scenario_from_dict({
        "name": "hand",
        "workload": {"layers": [
            {"name": "l1", "param_count": 1000, "fwd_time_s": 1e-3, "bwd_time_s": 2e-3},
            {"name": "l2", "param_count": 2000, "fwd_time_s": 1e-3, "bwd_time_s": 2e-3},
        ], "batch_size": 4, "optimizer": "sgd"},
        "cluster": {"gpus": world, "gpus_per_node": world, "gpu": "testgpu", "intra_link": "testlink", "inter_link": "testlink"},
        "strategy": {"bucket_mib": 0.001, "overlap": overlap, **strategy},
        "catalog": TEST_CATALOG,
        "variability": {"stragglers": False},  # the hand-computed log of one rank at nominal speed
    })


def test_exact_event_log_two_ranks_two_layers_overlapped():
    """By hand: ring over 2 ranks = 2 steps of S/2 at 1 GB/s with 10 us latency.

    bucket 0 (l2, 8000 B): 2 (10 us + 4 us) = 28 us; bucket 1 (l1, 4000 B): 2 (10 + 2) = 24 us.
    optimizer (sgd): 3 x 3000 params x 4 B / 1.2e12 B/s = 30 ns.
    """
    r = simulate(two_layer_scenario())
    expected = [
        (1e-3, "compute:fwd l1"),
        (2e-3, "compute:fwd l2"),
        (4e-3, "compute:bwd l2"),
        (4.028e-3, "comm:bucket 0"),
        (6e-3, "compute:bwd l1"),
        (6.024e-3, "comm:bucket 1"),
        (6.024e-3 + 30e-9, "compute:optimizer step"),
    ]
    assert [name for _, name in r.log] == [name for _, name in expected]
    for (t, _), (want, _) in zip(r.log, expected, strict=True):
        assert t == pytest.approx(want, rel=1e-9)
    assert r.iteration_time_s == pytest.approx(6.024e-3 + 30e-9, rel=1e-9)
    assert r.compute_time_s == pytest.approx(6e-3 + 30e-9, rel=1e-9)
    assert r.exposed_comm_time_s == pytest.approx(24e-6, rel=1e-6)
    assert [(b.first_layer, b.ready_s, b.start_s) for b in r.buckets] == [
        ("l2", pytest.approx(4e-3), pytest.approx(4e-3)), ("l1", pytest.approx(6e-3), pytest.approx(6e-3))]


def test_exact_event_log_without_overlap():
    """Both buckets wait for the end of backward: 6 ms + 28 us + 24 us + 30 ns."""
    r = simulate(two_layer_scenario(overlap=False))
    assert [name for _, name in r.log][-3:] == ["comm:bucket 0", "comm:bucket 1", "compute:optimizer step"]
    assert r.iteration_time_s == pytest.approx(6e-3 + 52e-6 + 30e-9, rel=1e-9)
    assert r.exposed_comm_time_s == pytest.approx(52e-6, rel=1e-6)


def test_one_gpu_communicates_nothing_and_is_its_own_baseline():
    r = simulate(two_layer_scenario(world=1))
    assert r.comm_time_s == 0.0 and r.bytes_by_link == {"intra": 0.0, "inter": 0.0}
    assert r.iteration_time_s == r.compute_time_s == r.baseline_time_s
    assert r.scaling_efficiency == 1.0 and r.speedup == 1.0


def test_speedup_and_efficiency_definitions():
    r = simulate(two_layer_scenario())
    assert r.scaling_efficiency == pytest.approx(r.baseline_time_s / r.iteration_time_s)
    assert r.speedup == pytest.approx(2 * r.scaling_efficiency)
    assert r.throughput_samples_per_s == pytest.approx(2 * 4 / r.iteration_time_s)


def test_buckets_follow_ddp_first_bucket_cap_and_never_split_a_layer():
    mib = 1024**2
    # backward order sizes: the first bucket closes at >= 1 MiB, later ones at >= 25 MiB
    sizes = [0.5 * mib, 0.7 * mib, 10 * mib, 20 * mib, 3 * mib, 0]
    assert assign_buckets(sizes, 25 * mib, 1 * mib) == [[0, 1], [2, 3], [4, 5]]
    assert assign_buckets([30 * mib], 25 * mib, 1 * mib) == [[0]]
    assert assign_buckets([0, 0], 25 * mib, 1 * mib) == [[0, 1]]


def test_every_layer_lands_in_exactly_one_bucket():
    plan = build_plan(two_layer_scenario())
    layers = [i for b in plan.buckets for i in b.layers]
    assert sorted(layers) == [0, 1]


def mlp_scenario(gpus: int, per_node: int, link: str, collective: str = "ring", bw_scale: float = 1.0):
    from sim.catalog import builtin_catalog

    base = builtin_catalog().links[link]
    return scenario_from_dict({
        "workload": {"model": "mlp", "batch_size": 64},
        "cluster": {"gpus": gpus, "gpus_per_node": per_node, "gpu": "v100", "intra_link": "nvlink2", "inter_link": "scaled"},
        "strategy": {"collective": collective},
        "catalog": {"links": {"scaled": {"bandwidth_GBps": base.bandwidth_Bps * bw_scale / 1e9, "latency_us": base.latency_s * 1e6,
                                         "software_latency_us": base.software_latency_s * 1e6, "efficiency": base.efficiency}}},
    })


@settings(max_examples=30, deadline=None)
@given(
    nodes=st.integers(1, 32), per_node=st.sampled_from([1, 2, 4, 8]),
    link=st.sampled_from(["tcp_10gbe", "ib_edr", "roce_100g"]),
    collective=st.sampled_from(["ring", "tree", "hierarchical", "ps"]),
    factor=st.floats(1.0, 50.0),
)
def test_iteration_invariants(nodes, per_node, link, collective, factor):
    gpus = nodes * per_node
    slow = simulate(mlp_scenario(gpus, per_node, link, collective))
    fast = simulate(mlp_scenario(gpus, per_node, link, collective, bw_scale=factor))
    # more bandwidth is never slower
    assert fast.iteration_time_s <= slow.iteration_time_s * (1 + 1e-12)
    # the iteration is never shorter than its compute, nor than compute + non-overlappable tail
    assert slow.iteration_time_s >= slow.compute_time_s * (1 - 1e-12)
    assert slow.exposed_comm_time_s == pytest.approx(slow.iteration_time_s - slow.compute_time_s - slow.straggler_wait_time_s
                                                     - slow.overlap_slowdown_time_s, abs=1e-15)
    assert slow.straggler_wait_time_s >= 0 and slow.overlap_slowdown_time_s >= 0
    # more GPUs never more compute per GPU (weak scaling: the same per-GPU work)
    assert slow.compute_time_s == pytest.approx(slow.baseline_time_s, rel=1e-12)
    assert 0 < slow.scaling_efficiency <= 1 + 1e-12
    # the same input gives the same result
    again = simulate(mlp_scenario(gpus, per_node, link, collective))
    assert again.metrics() == slow.metrics() and again.log == slow.log
