"""Asynchronous and synchronous parameter servers over many iterations: staleness, contention,
placement, and the seeds' sync-versus-async trade-off."""

from __future__ import annotations

import pytest

from sim.cluster import Cluster
from sim.config import scenario_from_dict
from sim.costs.collectives import collective_time_s, ps_push_pull
from sim.costs.ps import even_placement, ps_placed_push_pull, round_robin_placement
from sim.errors import ConfigError
from sim.run import simulate_run
from tests.conftest import make_gpu, make_link


def spec(n=8, mode="async", *, compute_s=0.1, params=1_000_000, layers=4, servers=2, per_node=1,
         het=None, faults=None, seed=0, **strategy):
    rows = [{"name": f"l{i}", "param_count": params, "fwd_flops": 1e9, "activation_elems": 10,
             "fwd_time_s": compute_s / layers / 3, "bwd_time_s": 2 * compute_s / layers / 3} for i in range(layers)]
    out = {
        "workload": {"layers": rows, "batch_size": 32, "optimizer": "sgd"},
        "cluster": {"gpus": n, "gpus_per_node": per_node, "gpu": "v100", "inter_link": "ib_edr"},
        "strategy": {"collective": "ps", "ps_mode": mode, "ps_servers": servers, **strategy},
        "simulation": {"seed": seed},
        "variability": {"stragglers": False},  # identical workers unless het says otherwise
    }
    if het:
        out["heterogeneity"] = het
    if faults:
        out["faults"] = faults
    return out


def run(iterations=50, **kw):
    return simulate_run(scenario_from_dict(spec(**kw)), iterations)


def test_one_async_worker_is_never_stale():
    result = run(n=1)
    assert result.staleness_histogram == (result.updates,) and result.staleness_mean == 0
    assert result.effective_samples_per_s == result.samples_per_s


def test_identical_async_workers_see_staleness_near_n_minus_one():
    """In steady state each worker's update lands after the other n-1 workers' updates. The
    window closes when the first worker is done: the other 7 are at most one step behind."""
    result = run(n=8, iterations=100)
    assert 800 - 7 <= result.updates <= 800
    assert 6.5 <= result.staleness_mean <= 7.0
    assert len(result.staleness_histogram) - 1 == 7


def test_server_nic_contention_bounds_async_throughput():
    """Communication-bound: every update crosses one server's ingress NIC, so with P even shards
    updates/s <= B / (S/P) per server... = P B / S overall; the simulation reaches that bound."""
    scenario = scenario_from_dict(spec(n=32, compute_s=1e-6, params=2_500_000, servers=2))
    result = simulate_run(scenario, 50)
    model_bytes = 4 * 2_500_000 * 4
    bound = 2 * scenario.cluster.inter_link.effective_Bps / model_bytes
    rate = result.updates / result.wall_time_s
    assert rate <= bound * (1 + 1e-9)
    assert rate >= 0.9 * bound


def test_more_servers_relieve_contention():
    few = run(n=32, compute_s=1e-3, servers=1)
    many = run(n=32, compute_s=1e-3, servers=8)
    assert many.samples_per_s > 2 * few.samples_per_s


def test_round_robin_placement_matches_even_shards_when_layers_are_equal():
    cluster = Cluster(nodes=16, gpus_per_node=1, gpu=make_gpu(), intra_link=make_link(), inter_link=make_link())
    equal = round_robin_placement([1e6] * 4, 4)
    assert equal == even_placement(4e6, 4)
    assert collective_time_s(ps_placed_push_pull(equal, cluster), cluster) == pytest.approx(
        collective_time_s(ps_push_pull(4e6, cluster, servers=4), cluster), rel=1e-12)
    # one big layer on one server: that server's NIC sets the pace (the seeds' layout)
    lopsided = round_robin_placement([7e6, 1e6, 1e6, 1e6], 4)
    assert collective_time_s(ps_placed_push_pull(lopsided, cluster), cluster) > collective_time_s(
        ps_placed_push_pull(equal, cluster), cluster)


def test_sync_ps_round_robin_layout_runs_through_simulate():
    from sim.simulate import simulate

    rows = [{"name": "big", "param_count": 7_000_000, "fwd_flops": 1e6}, {"name": "small", "param_count": 1_000_000, "fwd_flops": 1e6}]
    base = {"workload": {"layers": rows, "batch_size": 8}, "cluster": {"gpus": 8, "gpus_per_node": 1}}
    rr = simulate(scenario_from_dict({**base, "strategy": {"collective": "ps", "ps_servers": 2, "ps_placement": "round_robin"}}))
    even = simulate(scenario_from_dict({**base, "strategy": {"collective": "ps", "ps_servers": 2}}))
    assert rr.comm_time_s > even.comm_time_s
    assert rr.bytes_by_link["inter"] == pytest.approx(even.bytes_by_link["inter"], rel=1e-12)


def test_async_is_deterministic_per_seed():
    het = {"jitter_cv": 0.5}
    a, b = run(n=8, het=het, seed=3), run(n=8, het=het, seed=3)
    c = run(n=8, het=het, seed=4)
    assert a.metrics() == b.metrics()
    assert a.staleness_histogram != c.staleness_histogram


def test_tradeoff_async_wins_raw_throughput_with_stragglers_sync_wins_progress_without():
    """The seeds' trade-off (Chen et al. 2016; Dutta et al. 2018): a persistently slow node
    (4x) holds every synchronous step back while asynchronous workers carry on; without
    stragglers, synchronous training makes more progress per second once a stale update counts
    1/staleness of a fresh one (Zhang et al. 2016)."""
    slow = {"slow_nodes": 1, "slow_factor": 4.0, "jitter_cv": 0.3}
    sync_slow, async_slow = run(n=8, mode="sync", het=slow), run(n=8, mode="async", het=slow)
    assert async_slow.samples_per_s > 2 * sync_slow.samples_per_s
    sync_even, async_even = run(n=8, mode="sync"), run(n=8, mode="async")
    assert sync_even.effective_samples_per_s > async_even.effective_samples_per_s
    assert async_even.effective_samples_per_s < async_even.samples_per_s
    assert sync_even.staleness_mean == 0


def test_async_needs_the_ps_collective():
    with pytest.raises(ConfigError) as err:
        scenario_from_dict(spec(collective="ring"))
    assert err.value.field == "strategy.ps_mode" and "collective=ring" in str(err.value)


def test_bad_iterations():
    with pytest.raises(ConfigError):
        simulate_run(scenario_from_dict(spec()), 0)


def test_bounded_staleness_holds_fast_workers_back():
    """Stale synchronous parallel (Ho et al. 2013): with a 4x slow node, unbounded workers race
    ahead; with a bound of s steps the fast ones wait, so staleness and throughput both drop.
    An update read when the slowest had done k - s steps lands before any worker passes step
    k + s + 1: at most (n - 1)(2 s + 2) other updates in between."""
    slow = {"slow_nodes": 1, "slow_factor": 4.0}
    free = run(n=8, het=slow, iterations=40)
    for s in (0, 2):
        bounded = run(n=8, het=slow, iterations=40, max_staleness=s)
        assert bounded.samples_per_s < free.samples_per_s
        assert len(bounded.staleness_histogram) - 1 <= 7 * (2 * s + 2)
        assert len(bounded.staleness_histogram) - 1 < len(free.staleness_histogram) - 1


def test_bounded_staleness_survives_a_failure():
    """A failed worker stops holding the others back: the run still finishes."""
    result = run(n=4, iterations=20, max_staleness=1, faults={"fail_rank": 2, "fail_at_s": 0.35})
    assert result.updates >= 3 * 19 and result.lost_samples == 32


def test_a_worker_that_dies_while_held_back_by_the_staleness_bound_loses_no_negative_work():
    """A worker waiting (for the bound or its push) when it dies had no compute in flight: its lost
    work is in [0, its longest step], never negative (the last step began before the deadline)."""
    from sim.config import scenario_from_dict
    from sim.run import simulate_run

    spec = {"workload": {"model": "resnet50", "batch_size": 32},
            "cluster": {"gpus": 16, "gpus_per_node": 1, "gpu": "v100", "inter_link": "ib_edr"},
            "strategy": {"collective": "ps", "ps_servers": 4, "ps_mode": "async", "max_staleness": 4},
            "heterogeneity": {"jitter_cv": 0.8, "slow_nodes": 1, "slow_factor": 4.0}}
    for fail_at_s in (2.0, 3.3, 5.0, 7.7, 15.0):
        run = simulate_run(scenario_from_dict({**spec, "faults": {"fail_rank": 5, "fail_at_s": fail_at_s}}), 200)
        assert 0.0 <= run.lost_work_s < 2.0, (fail_at_s, run.lost_work_s)
