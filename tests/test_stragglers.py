"""Waiting for the slowest rank (sim/costs/stragglers.py): the expected maximum against closed forms
and Monte Carlo draws, its invariants, and the one-iteration paths against the multi-iteration
runner and the detailed mode."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config import scenario_from_dict
from sim.costs.stragglers import GPU_CV, combined_cv, expected_max_lognormal
from sim.errors import ConfigError
from sim.run import simulate_run
from sim.simulate import simulate


def test_gpu_cv_from_sinha_et_al_whisker_range():
    """8 % whisker-to-whisker over the median; whiskers at the 1.5 IQR fences of a normal spread:
    4 IQR = 4 x 1.3490 sigma (Phi^-1(0.75) = 0.6745), so sigma = 0.08 / 5.396."""
    iqr_sigmas = 2 * NormalDist().inv_cdf(0.75)
    assert pytest.approx(0.08 / (4 * iqr_sigmas), rel=1e-5) == GPU_CV
    assert pytest.approx(0.01483, abs=1e-5) == GPU_CV


def test_two_ranks_closed_form():
    """For iid lognormal X1, X2 of mean 1 and log-sd s: E[max] = 2 Phi(s / sqrt 2) (E[X1 1{X1 > X2}]
    = E[X] P(Z1 + s > Z2) under the measure tilted by X1)."""
    for cv in (0.0148, 0.1, 0.5):
        s = math.sqrt(math.log1p(cv * cv))
        assert expected_max_lognormal(2, cv) == pytest.approx(2 * NormalDist().cdf(s / math.sqrt(2)), rel=1e-7)


@pytest.mark.parametrize("n", [8, 128, 1024])
def test_quadrature_against_a_monte_carlo_draw(n):
    rng = np.random.default_rng(7)
    for cv in (GPU_CV, 0.3):
        s2 = math.log1p(cv * cv)
        draws = rng.lognormal(-s2 / 2, math.sqrt(s2), size=(4000, n)).max(axis=1)
        se = draws.std() / math.sqrt(len(draws))
        assert abs(expected_max_lognormal(n, cv) - draws.mean()) < 4 * se


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 2**20), more=st.integers(1, 2**10), cv=st.floats(0.001, 2.0))
def test_expected_max_grows_with_n_and_waits_for_nobody_at_one(n, more, cv):
    assert expected_max_lognormal(1, cv) == 1.0
    assert expected_max_lognormal(n, cv) >= 1.0
    assert expected_max_lognormal(n + more, cv) >= expected_max_lognormal(n, cv) - 1e-12


def test_combined_cv_is_that_of_the_product():
    rng = np.random.default_rng(1)
    a, b = 0.2, 0.3
    x = rng.lognormal(-math.log1p(a * a) / 2, math.sqrt(math.log1p(a * a)), 400_000)
    y = rng.lognormal(-math.log1p(b * b) / 2, math.sqrt(math.log1p(b * b)), 400_000)
    assert combined_cv(a, b) == pytest.approx((x * y).std() / (x * y).mean(), rel=0.02)


def _scenario(gpus=64, fidelity="fast", **variability):
    return scenario_from_dict({"workload": {"model": "resnet50"},
                               "cluster": {"gpus": gpus, "gpus_per_node": min(8, gpus), "gpu": "v100",
                                           "intra_link": "nvlink2", "inter_link": "ib_edr"},
                               "strategy": {"collective": "ring"}, "simulation": {"fidelity": fidelity},
                               "variability": variability or None})


def test_on_by_default_and_one_gpu_waits_for_nobody():
    one, many = simulate(_scenario(gpus=1)), simulate(_scenario())
    assert one.straggler_wait_time_s == 0.0 and one.straggler_scale == 1.0
    assert many.straggler_scale == pytest.approx(expected_max_lognormal(64, GPU_CV))
    assert many.straggler_wait_time_s > 0
    off = simulate(_scenario(stragglers=False))
    assert off.straggler_wait_time_s == 0.0
    assert many.iteration_time_s == pytest.approx(off.iteration_time_s + many.straggler_wait_time_s)
    assert many.scaling_efficiency < off.scaling_efficiency


def test_the_wait_is_the_slowest_ranks_compute_not_its_communication():
    """Compute-bound on a fast network: the wait is nearly (scale - 1) x compute; the breakdown
    keeps the nominal rank's compute and the wait apart and adds up to the iteration."""
    r = simulate(_scenario())
    assert r.straggler_wait_time_s <= (r.straggler_scale - 1) * (r.compute_time_s + r.overlap_slowdown_time_s) + 1e-12
    assert r.straggler_wait_time_s >= 0.5 * (r.straggler_scale - 1) * r.compute_time_s
    assert r.iteration_time_s == pytest.approx(r.compute_time_s + r.overlap_slowdown_time_s + r.exposed_comm_time_s
                                               + r.straggler_wait_time_s)


def test_multi_iteration_runner_agrees_with_the_expected_maximum():
    """sim.run draws each GPU's factor once and each iteration's jitter per rank; its mean iteration
    over seeds is the one-iteration answer within 0.5 % (the spread of one run's slowest rank)."""
    for variability in ({}, {"iteration_cv": 0.05}):
        s = _scenario(**variability)
        expected = simulate(s).iteration_time_s
        iterations = 40 if variability else 5
        means = [np.mean(simulate_run(replace(s, seed=seed), iterations).iteration_times_s) for seed in range(6)]
        assert np.mean(means) == pytest.approx(expected, rel=0.005)


def test_detailed_mode_waits_as_the_fast_path_does():
    fast, detailed = simulate(_scenario(gpus=32)), simulate(_scenario(gpus=32, fidelity="detailed"))
    assert detailed.straggler_scale == fast.straggler_scale
    assert detailed.straggler_wait_time_s == pytest.approx(fast.straggler_wait_time_s, rel=0.05)
    assert detailed.iteration_time_s == pytest.approx(fast.iteration_time_s, rel=0.01)


def test_pipelines_wait_for_the_slowest_stage_rank():
    spec = {"workload": {"model": "gpt2_small", "batch_size": 8},
            "cluster": {"gpus": 16, "gpus_per_node": 8, "gpu": "a100", "intra_link": "nvlink3", "inter_link": "ib_hdr"},
            "strategy": {"kind": "hybrid", "pp": 2, "tp": 2, "micro_batches": 4, "precision": "bf16"}}
    on = simulate(scenario_from_dict(spec))
    off = simulate(scenario_from_dict({**spec, "variability": {"stragglers": False}}))
    assert on.straggler_wait_time_s > 0
    assert on.iteration_time_s == pytest.approx(off.iteration_time_s + on.straggler_wait_time_s)
    assert on.bubble_time_s == pytest.approx(off.bubble_time_s)


@pytest.mark.parametrize("section,allowed", [
    ({"stragglers": "yes"}, "true or false"),
    ({"gpu_cv": -0.1}, "non-negative number"),
    ({"iteration_cv": 50}, "a ratio, not a percentage"),
    ({"cv": 0.1}, "gpu_cv"),
])
def test_bad_variability_is_one_line_naming_the_field(section, allowed):
    with pytest.raises(ConfigError) as err:
        _scenario(**section)
    assert "variability" in str(err.value) and allowed in str(err.value)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scalebench", *args], capture_output=True, text=True, timeout=120)


def test_simulate_prints_the_source_and_no_stragglers_turns_it_off():
    flags = ["simulate", "--model", "resnet50", "--gpus", "64", "--gpus-per-node", "8", "--gpu", "v100",
             "--intra-link", "nvlink2", "--inter-link", "ib_edr"]
    on = _cli(*flags)
    assert on.returncode == 0, on.stderr
    assert "waiting for stragglers" in on.stdout
    assert "Sinha et al. SC'22" in on.stdout and "expected slowest of 64 ranks" in on.stdout
    off = _cli(*flags, "--no-stragglers")
    assert off.returncode == 0, off.stderr
    assert "waiting for stragglers" not in off.stdout and "stragglers: off" in off.stdout
    csv = _cli(*flags, "--gpu-cv", "0", "--format", "csv")
    assert csv.returncode == 0 and "straggler_wait_time_s" in csv.stdout.splitlines()[0]
