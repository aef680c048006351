"""Calibration without torch: alpha-beta fits, their mapping onto the simulator, loading and applying."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.calibration import apply_calibration, colocation_slowdown, layer_times_s, load_calibration
from sim.config import scenario_from_dict
from sim.costs.collectives import ring_allreduce_time
from sim.errors import ConfigError
from sim.fit import fit_alpha_beta, link_parameters

SIZES = [1024 * 4**i for i in range(10)]


@settings(max_examples=50, deadline=None)
@given(alpha_us=st.floats(1, 5000), bw_GBps=st.floats(0.01, 50))
def test_fit_recovers_exact_alpha_beta(alpha_us, bw_GBps):
    times = [alpha_us * 1e-6 + s / (bw_GBps * 1e9) for s in SIZES]
    fit = fit_alpha_beta(SIZES, times)
    assert fit.alpha_s == pytest.approx(alpha_us * 1e-6, rel=1e-6)
    assert fit.bandwidth_Bps == pytest.approx(bw_GBps * 1e9, rel=1e-6)
    assert fit.rms_relative_error < 1e-9


def test_fit_without_resolvable_latency_keeps_alpha_non_negative():
    times = [s / 1e9 for s in SIZES]
    times[0] *= 0.5  # noise that would make alpha negative
    fit = fit_alpha_beta(SIZES, times)
    assert fit.alpha_s >= 0 and fit.bandwidth_Bps > 0


def test_fit_at_the_latency_bound_is_the_one_parameter_optimum():
    """With alpha at its bound 0, sum((beta S/t - 1)^2) is least at beta = sum(S/t) / sum((S/t)^2)
    (by hand: set the derivative to zero)."""
    times = [s / 1e9 * (1.1 if i % 2 else 0.9) for i, s in enumerate(SIZES)]
    times[0] *= 0.5
    fit = fit_alpha_beta(SIZES, times)
    ratios = [s / t for s, t in zip(SIZES, times, strict=True)]
    assert fit.alpha_s == 0.0
    assert 1 / fit.bandwidth_Bps == pytest.approx(sum(ratios) / sum(r * r for r in ratios), rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.5, 2.0), min_size=len(SIZES), max_size=len(SIZES)), st.floats(0, 500), st.floats(0.05, 20))
def test_the_bounded_fit_is_no_worse_than_any_feasible_pair(noise, alpha_us, bw_GBps):
    """The fit minimises the relative squared error over alpha >= 0, beta > 0: no other feasible
    pair, the true one included, does better on the noisy data."""
    times = [(alpha_us * 1e-6 + s / (bw_GBps * 1e9)) * f for s, f in zip(SIZES, noise, strict=True)]
    fit = fit_alpha_beta(SIZES, times)

    def cost(alpha, beta):
        return sum(((alpha + beta * s) - t) ** 2 / t**2 for s, t in zip(SIZES, times, strict=True))

    best = cost(fit.alpha_s, 1 / fit.bandwidth_Bps)
    assert fit.alpha_s >= 0 and fit.bandwidth_Bps > 0
    for alpha, beta in ((alpha_us * 1e-6, 1 / (bw_GBps * 1e9)), (0.0, 1 / (bw_GBps * 1e9)),
                        (fit.alpha_s * 1.01, 1 / fit.bandwidth_Bps), (fit.alpha_s, 0.99 / fit.bandwidth_Bps)):
        assert best <= cost(alpha, beta) * (1 + 1e-9) + 1e-15


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_link_entry_reproduces_the_measured_allreduce_at_its_world_size(n):
    times = [300e-6 + s / 0.8e9 for s in SIZES]
    fit = fit_alpha_beta(SIZES, times)
    a_s, b_Bps = link_parameters(fit, "allreduce", n)
    for s, t in zip(SIZES, times, strict=True):
        assert ring_allreduce_time(n, s, a_s, b_Bps) == pytest.approx(t, rel=1e-6)


def _write_calibration(path):
    device = {
        "device": "cpu_local",
        "colocation_slowdown": {1: 1.0, 2: 1.2, 4: 2.4},
        "workloads": {"mlp": {64: {
            "layers": ["fc1", "fc2", "fc3"],
            "colocated": {1: {"fwd_s": [1e-3, 2e-3, 3e-3], "bwd_s": [2e-3, 4e-3, 6e-3]},
                          2: {"fwd_s": [1.5e-3, 2.5e-3, 3.5e-3], "bwd_s": [3e-3, 5e-3, 7e-3]}},
        }}},
    }
    catalog = {"gpus": {"cpu_local": {"peak_tflops": {"fp32": 0.05}, "memory_bandwidth_GBps": 5, "memory_GiB": 16,
                                      "source": "test"}},
               "links": {"gloo_loopback": {"kind": "loopback", "bandwidth_GBps": 1.0, "latency_us": 0,
                                           "software_latency_us": 100, "source": "test"}}}
    (path / "device.yaml").write_text(yaml.safe_dump(device))
    (path / "catalog.yaml").write_text(yaml.safe_dump(catalog))
    return load_calibration(path)


def test_colocation_slowdown_measured_interpolated_and_processor_sharing(tmp_path):
    cal = _write_calibration(tmp_path)
    assert colocation_slowdown(cal, 1) == 1.0
    assert colocation_slowdown(cal, 2) == 1.2
    assert colocation_slowdown(cal, 3) == pytest.approx(1.8)  # linear between 2 and 4
    assert colocation_slowdown(cal, 8) == pytest.approx(4.8)  # 2.4 x 8 / 4


def test_layer_times_measured_k_direct_else_alone_times_slowdown_and_batch_scaling(tmp_path):
    cal = _write_calibration(tmp_path)
    _, fwd, bwd = layer_times_s(cal, "mlp", 64, ranks=2)
    assert fwd == [1.5e-3, 2.5e-3, 3.5e-3]  # measured with 2 co-located ranks
    _, fwd4, _ = layer_times_s(cal, "mlp", 32, ranks=4)
    assert fwd4 == pytest.approx([0.5e-3 * 2.4, 1e-3 * 2.4, 1.5e-3 * 2.4])  # half the batch, s(4)
    with pytest.raises(ConfigError, match="calibration.workload"):
        layer_times_s(cal, "resnet50", 32)


def test_apply_calibration_and_catalog_load_together(tmp_path):
    from sim.catalog import load_catalog_file
    from sim.simulate import simulate

    cal = _write_calibration(tmp_path)
    spec = {"workload": {"model": "mlp", "batch_size": 64},
            "cluster": {"gpus": 2, "gpus_per_node": 2, "gpu": "cpu_local", "intra_link": "gloo_loopback",
                        "inter_link": "gloo_loopback"}}
    scenario = apply_calibration(scenario_from_dict(spec, load_catalog_file(cal.catalog_file)), cal)
    assert [layer.fwd_time_s for layer in scenario.workload.layers] == [1.5e-3, 2.5e-3, 3.5e-3]
    result = simulate(scenario)
    assert result.forward_time_s == pytest.approx(7.5e-3)
    assert result.backward_time_s == pytest.approx(15e-3)


def test_missing_calibration_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="scalebench calibrate"):
        load_calibration(tmp_path)


def test_calibrated_scenario_from_a_spec_with_a_real_section(tmp_path):
    from sim.calibration import calibrated_scenario

    _write_calibration(tmp_path)
    spec = {"workload": {"model": "mlp", "batch_size": 64}, "real": {"strategy": "ddp"},
            "cluster": {"gpus": 4, "gpus_per_node": 4, "gpu": "cpu_local", "intra_link": "gloo_loopback"}}
    scenario = calibrated_scenario(spec, tmp_path)
    assert scenario.cluster.gpu.name == "cpu_local"
    assert [layer.fwd_time_s for layer in scenario.workload.layers] == pytest.approx([2.4e-3, 4.8e-3, 7.2e-3])


def _with_steps(path):
    """The calibration above plus a measured whole step at k = 2 (forward 9 ms, backward 18 ms,
    optimizer 1 ms, median total 30 ms: the parts add up to 28 ms, so each is scaled by 30/28)."""
    cal = _write_calibration(path)
    device = dict(cal.device)
    device["workloads"]["mlp"][64]["steps"] = {2: {"fwd_s": 9e-3, "bwd_s": 18e-3, "opt_s": 1e-3, "total_s": 30e-3,
                                                  "repetitions": 40, "threads": 1}}
    (path / "device.yaml").write_text(yaml.safe_dump(device))
    return load_calibration(path)


def test_layer_times_scaled_to_the_measured_whole_step_keeping_the_profile_shares(tmp_path):
    cal = _with_steps(tmp_path)
    whole = 30 / 28
    _, fwd, bwd = layer_times_s(cal, "mlp", 64, ranks=2)
    assert sum(fwd) == pytest.approx(9e-3 * whole)
    assert sum(bwd) == pytest.approx(18e-3 * whole)
    profile = [1.5e-3, 2.5e-3, 3.5e-3]
    assert [f / sum(fwd) for f in fwd] == pytest.approx([p / sum(profile) for p in profile])
    _, fwd_half, _ = layer_times_s(cal, "mlp", 32, ranks=2)
    assert sum(fwd_half) == pytest.approx(9e-3 * whole / 2)  # batch scaling still applies
    _, fwd1, _ = layer_times_s(cal, "mlp", 64, ranks=1)
    assert fwd1 == [1e-3, 2e-3, 3e-3]  # no step measured at k = 1: the profile as it is


def test_calibrated_optimizer_step_replaces_the_roofline_and_the_iteration_adds_up(tmp_path):
    from sim.calibration import optimizer_time_s
    from sim.catalog import load_catalog_file
    from sim.simulate import simulate

    cal = _with_steps(tmp_path)
    assert optimizer_time_s(cal, "mlp", 64, ranks=2) == pytest.approx(1e-3 * 30 / 28)
    assert optimizer_time_s(cal, "mlp", 64, ranks=1) is None
    spec = {"workload": {"model": "mlp", "batch_size": 64},
            "cluster": {"gpus": 2, "gpus_per_node": 2, "gpu": "cpu_local", "intra_link": "gloo_loopback",
                        "inter_link": "gloo_loopback"}}
    scenario = apply_calibration(scenario_from_dict(spec, load_catalog_file(cal.catalog_file)), cal)
    result = simulate(scenario)
    assert result.optimizer_time_s == pytest.approx(1e-3 * 30 / 28)
    assert result.compute_time_s == pytest.approx(30e-3)  # the measured step, all three parts


def test_repetitions_fill_the_minimum_time_within_the_bounds():
    from real.timing import repetitions

    assert repetitions([0.01, 0.03], iterations=10) == 10  # no minimum time: the count asked for
    assert repetitions([0.01, 0.03], iterations=10, min_time_s=1.0, max_iterations=200) == 50  # 1 s / 20 ms
    assert repetitions([1e-4], iterations=10, min_time_s=1.0, max_iterations=200) == 200  # capped
    assert repetitions([2.0], iterations=10, min_time_s=1.0, max_iterations=200) == 10  # never fewer
    assert repetitions([], iterations=7, min_time_s=1.0, max_iterations=200) == 7  # no warm-up to go by
    assert repetitions([1e-4], iterations=10, min_time_s=1.0) == 10  # max 0: no more than asked
