"""Stragglers, slow nodes, mixed GPUs and failures over multi-iteration runs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config import scenario_from_dict
from sim.errors import ConfigError
from sim.faults import lognormal_jitter
from sim.run import simulate_run
from sim.simulate import simulate


def spec(n=8, *, collective="ring", per_node=1, measured=True, het=None, faults=None, seed=0, gpu="v100", **strategy):
    rows = [{"name": f"l{i}", "param_count": 2_000_000, "fwd_flops": 5e10, "bwd_flops": 1e11, "activation_elems": 1000}
            for i in range(4)]
    if measured:
        for row in rows:
            row.update(fwd_time_s=0.01, bwd_time_s=0.02)
    out = {
        "workload": {"layers": rows, "batch_size": 32, "optimizer": "sgd"},
        "cluster": {"gpus": n, "gpus_per_node": per_node, "gpu": gpu, "inter_link": "ib_edr"},
        "strategy": {"collective": collective, **strategy},
        "simulation": {"seed": seed},
        "variability": {"stragglers": False},  # only heterogeneity's stragglers here (tests/test_stragglers.py: the rest)
    }
    if het:
        out["heterogeneity"] = het
    if faults:
        out["faults"] = faults
    return out


def test_jitter_has_the_requested_coefficient_of_variation():
    rng = np.random.default_rng(0)
    draws = lognormal_jitter(rng, 0.4, (20_000, 4))
    assert np.allclose(draws.mean(axis=0), 1.0, rtol=1e-12)
    cv = draws.std(axis=0) / draws.mean(axis=0)
    assert np.allclose(cv, 0.4, rtol=0.05)  # sampling error of 20,000 draws: ~1-2 %
    assert (lognormal_jitter(rng, 0.0, (3, 2)) == 1).all()


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 32), cv=st.floats(0.0, 2.0), seed=st.integers(0, 2**16), iterations=st.integers(1, 20),
       collective=st.sampled_from(["ring", "ps"]))
def test_jitter_never_makes_synchronous_training_faster(n, cv, seed, iterations, collective):
    """Each rank's jitter averages exactly 1 over the run; a synchronous iteration waits for the
    slowest rank and its time is convex and non-decreasing in the compute scale, so the run can
    only get slower (Jensen)."""
    calm = simulate_run(scenario_from_dict(spec(n, collective=collective, seed=seed)), iterations)
    noisy = simulate_run(scenario_from_dict(spec(n, collective=collective, seed=seed, het={"jitter_cv": cv})), iterations)
    assert noisy.wall_time_s >= calm.wall_time_s * (1 - 1e-12)


def test_without_heterogeneity_a_run_is_iterations_times_simulate():
    scenario = scenario_from_dict(spec(8))
    run = simulate_run(scenario, 10)
    assert run.wall_time_s == pytest.approx(10 * simulate(scenario).iteration_time_s, rel=1e-12)
    assert run.samples == 10 * 8 * 32


def test_a_slow_node_paces_synchronous_training():
    """No overlap: each iteration is the slow node's compute (forward, backward, optimizer) x 3
    plus the same communication."""
    fast = simulate_run(scenario_from_dict(spec(8, overlap=False)), 5)
    slow = simulate_run(scenario_from_dict(spec(8, overlap=False, het={"slow_nodes": 1, "slow_factor": 3.0})), 5)
    compute = 4 * (0.01 + 0.02) + simulate(scenario_from_dict(spec(8))).optimizer_time_s
    assert slow.wall_time_s - fast.wall_time_s == pytest.approx(5 * 2 * compute, rel=1e-6)


def test_mixed_gpus_slow_down_by_their_compute_ratio():
    from sim.catalog import builtin_catalog
    from sim.costs.compute import layer_times_s

    catalog = builtin_catalog()
    workload = scenario_from_dict(spec(8, measured=False)).workload
    t_v100 = sum(f + b for f, b in layer_times_s(workload, catalog.gpu("v100"), "fp32", 4))
    t_k80 = sum(f + b for f, b in layer_times_s(workload, catalog.gpu("k80"), "fp32", 4))
    base = simulate_run(scenario_from_dict(spec(8, measured=False, overlap=False)), 3)
    mixed = simulate_run(scenario_from_dict(spec(8, measured=False, overlap=False, het={"mixed_gpus": {"k80": 2}})), 3)
    # optimizer time scales too (one factor per rank); compute dominates, so compare the compute part
    assert mixed.wall_time_s - base.wall_time_s == pytest.approx(3 * (t_k80 - t_v100), rel=0.02)


def test_sync_failure_loses_work_since_the_checkpoint():
    """Closed form without jitter: wall = I T + (F - last checkpoint) + restart."""
    base = simulate_run(scenario_from_dict(spec(8)), 40)
    t = base.iteration_times_s[0]
    faults = {"fail_rank": 3, "fail_at_s": 25.5 * t, "checkpoint_interval_s": 10 * t * (1 - 1e-9), "restart_s": 2.0}
    failed = simulate_run(scenario_from_dict(spec(8, faults=faults)), 40)
    assert failed.restarts == 1
    assert failed.lost_work_s == pytest.approx(5.5 * t, rel=1e-9)  # checkpoint after iteration 20
    assert failed.lost_samples == 5 * 8 * 32
    assert failed.wall_time_s == pytest.approx(base.wall_time_s + failed.lost_work_s + 2.0, rel=1e-9)


def test_checkpoints_cost_time():
    base = simulate_run(scenario_from_dict(spec(8)), 20)
    t = base.iteration_times_s[0]
    ckpt = simulate_run(scenario_from_dict(spec(8, faults={"checkpoint_interval_s": 5 * t * (1 - 1e-9), "checkpoint_s": 0.5})), 20)
    assert ckpt.wall_time_s == pytest.approx(base.wall_time_s + 3 * 0.5, rel=1e-9)  # after 5, 10, 15 (not at the end)


def test_async_continues_with_fewer_workers():
    scenario = spec(8, collective="ps", ps_mode="async", ps_servers=2)
    whole = simulate_run(scenario_from_dict(scenario), 30)
    t_step = whole.wall_time_s / 30
    failed = simulate_run(scenario_from_dict({**scenario, "faults": {"fail_rank": 0, "fail_at_s": 10.5 * t_step}}), 30)
    assert failed.lost_samples == 32 and 0 < failed.lost_work_s <= t_step * 1.01
    assert failed.restarts == 0
    # the survivors keep going: about 7/8 of the updates in the same window
    assert failed.updates == pytest.approx(whole.updates - (30 - 10), abs=8)


@pytest.mark.parametrize("section, body, field", [
    ("faults", {"fail_rank": 8, "fail_at_s": 1.0}, "faults.fail_rank"),
    ("faults", {"fail_rank": 1}, "faults.fail_at_s"),
    ("faults", {"fail_at": 1}, "faults.fail_at"),
    ("heterogeneity", {"slow_nodes": 9, "slow_factor": 2}, "heterogeneity.slow_nodes"),
    ("heterogeneity", {"slow_factor": 0.5}, "heterogeneity.slow_factor"),
    ("heterogeneity", {"mixed_gpus": {"tpu9": 1}}, "heterogeneity.mixed_gpus"),
    ("heterogeneity", {"jitter_cv": -1}, "heterogeneity.jitter_cv"),
])
def test_bad_fault_and_heterogeneity_input(section, body, field):
    s = spec(8)
    s[section] = body
    with pytest.raises(ConfigError) as err:
        scenario_from_dict(s)
    assert err.value.field == field and "\n" not in str(err.value)


def test_no_failure_means_nothing_lost():
    run = simulate_run(scenario_from_dict(spec(4, faults={"checkpoint_interval_s": math.inf})), 5)
    assert run.lost_work_s == 0 and run.restarts == 0


def test_failure_during_a_checkpoint_write_never_moves_time_backwards():
    base = simulate_run(scenario_from_dict(spec(8)), 20)
    t = base.iteration_times_s[0]
    faults = {"fail_rank": 0, "fail_at_s": 10 * t + 0.1, "checkpoint_interval_s": 10 * t * (1 - 1e-9),
              "checkpoint_s": 1.0, "restart_s": 0.5}
    run = simulate_run(scenario_from_dict(spec(8, faults=faults)), 20)
    assert run.lost_work_s >= 0 and run.restarts == 1
    assert run.wall_time_s >= base.wall_time_s + 0.5
