"""Experiment configs: axes, validation before anything runs, invalid combinations, point ids, calibration."""

from __future__ import annotations

import copy
from importlib import resources

import pytest
from hypothesis import given
from hypothesis import strategies as st

from experiments.config import expand, expand_axis, experiment_from_dict, load_experiment
from experiments.points import point_id
from experiments.ship import SHIPPED as SHIPPED_EXPERIMENTS
from sim.calibration import compute_scale_factor
from sim.calibration import throughput_calibrated_scenario as calibrated_scenario
from sim.config import scenario_from_dict
from sim.errors import ConfigError
from sim.simulate import simulate
from sim.workload import zoo_names

LAYERS = [
    {"name": "conv", "param_count": 200_000, "fwd_flops": 4.0e8, "activation_elems": 100_000},
    {"name": "fc", "param_count": 4_000_000, "fwd_flops": 8.0e6, "activation_elems": 1000},
]


def config(**extra):
    base = {
        "name": "t",
        "workload": {"model": "tiny", "batch_size": 16, "layers": copy.deepcopy(LAYERS)},
        "cluster": {"gpus_per_node": 4, "gpu": "v100", "intra_link": "nvlink2", "inter_link": "tcp_10gbe"},
        "sweep": {"cluster.gpus": [1, 4, 8]},
    }
    base.update(extra)
    return base


def test_geometric_and_range_axes():
    assert expand_axis("cluster.gpus", {"geometric": {"start": 1, "stop": 256, "factor": 2}}) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert expand_axis("cluster.gpus", {"geometric": {"start": 3, "stop": 100, "factor": 3}}) == [3, 9, 27, 81]
    assert expand_axis("strategy.bucket_mib", {"range": {"start": 5, "stop": 25, "step": 10}}) == [5, 15, 25]
    assert expand_axis("cluster.inter_link", ["a", "b"]) == ["a", "b"]


@pytest.mark.parametrize(("change", "field"), [
    ({"sweeep": {}}, "config.sweeep"),
    ({"repetitions": "three"}, "repetitions"),
    ({"repetitions": 0}, "repetitions"),
    ({"backend": "gpu"}, "backend"),
    ({"sweep": {"cluster.gpus": []}}, "sweep.cluster.gpus"),
    ({"sweep": {"cluster.gpus": 8}}, "sweep.cluster.gpus"),
    ({"sweep": {"clusterr.gpus": [1]}}, "sweep.clusterr.gpus"),
    ({"sweep": {"cluster.gpus": {"geometric": {"start": 1, "stop": 8, "factor": 1}}}}, "sweep.cluster.gpus.geometric.factor"),
    ({"max_points": 2}, "sweep"),
    ({"calibration": {"batch_size": 8}}, "calibration"),
    ({"real": {"iterations": 0}}, "real.iterations"),
])
def test_bad_configs_fail_on_load_naming_the_field(change, field):
    with pytest.raises(ConfigError) as err:
        experiment_from_dict(config(**change))
    assert err.value.field == field
    assert "\n" not in str(err.value) and len(str(err.value)) < 400


def test_too_many_points_counts_axes_repetitions_and_backends():
    raw = config(sweep={"cluster.gpus": list(range(1, 101)), "strategy.collective": ["ring", "tree"]},
                 repetitions=3, backend="both", max_points=1199)
    with pytest.raises(ConfigError, match="1200 points"):
        experiment_from_dict(raw)
    raw["max_points"] = 1200
    experiment_from_dict(raw)


def test_cartesian_product_and_invalid_combinations_filtered_with_reason():
    raw = config(sweep={"cluster.gpus": [1, 4, 6, 8], "strategy.collective": ["ring", "tree"]})
    points, skipped = expand(experiment_from_dict(raw))
    assert len(points) == 3 * 2
    assert {(p.axes["cluster.gpus"], p.axes["strategy.collective"]) for p in points} == {
        (g, c) for g in (1, 4, 8) for c in ("ring", "tree")}
    assert len(skipped) == 2
    assert all(s.axes["cluster.gpus"] == 6 and "multiple of gpus_per_node=4" in s.reason for s in skipped)


def test_error_no_axis_causes_is_raised_not_filtered():
    raw = config(strategy={"collective": "butterfly"})
    with pytest.raises(ConfigError) as err:
        expand(experiment_from_dict(raw))
    assert err.value.field == "strategy.collective"


def test_all_combinations_invalid_raises_the_first_reason():
    raw = config(sweep={"cluster.gpus": [6, 10]})
    with pytest.raises(ConfigError, match="multiple of gpus_per_node"):
        expand(experiment_from_dict(raw))


def test_case_axis_sets_fields_together():
    raw = config(sweep={"cluster.gpus": [8], "case": [
        {"label": "ps over tcp", "strategy.collective": "ps", "cluster.inter_link": "tcp_10gbe"},
        {"label": "ring over ib", "strategy.collective": "ring", "cluster.inter_link": "ib_edr"}]})
    points, _ = expand(experiment_from_dict(raw))
    got = {p.axes["case"]: (p.spec["strategy"]["collective"], p.spec["cluster"]["inter_link"]) for p in points}
    assert got == {"ps over tcp": ("ps", "tcp_10gbe"), "ring over ib": ("ring", "ib_edr")}


def test_swept_gpus_replace_nodes_and_repetitions_get_seeds():
    raw = config(repetitions=2, seed=7)
    raw["cluster"]["nodes"] = 3
    points, _ = expand(experiment_from_dict(raw))
    assert all("nodes" not in p.spec["cluster"] for p in points)
    assert sorted({p.spec["simulation"]["seed"] for p in points}) == [7, 8]
    assert len(points) == 6


def test_point_ids_stable_distinct_and_key_order_free():
    e1 = experiment_from_dict(config(sweep={"cluster.gpus": [1, 4, 8], "cluster.inter_link": ["tcp_10gbe", "ib_edr"]}))
    reordered = config(sweep={"cluster.inter_link": ["tcp_10gbe", "ib_edr"], "cluster.gpus": [1, 4, 8]})
    reordered = dict(reversed(list(reordered.items())))
    e2 = experiment_from_dict(reordered)
    ids1 = {point_id(p, e1) for p in expand(e1)[0]}
    ids2 = {point_id(p, e2) for p in expand(e2)[0]}
    assert len(ids1) == 6 and ids1 == ids2


def test_backend_both_makes_a_sim_and_a_real_point_each():
    points, _ = expand(experiment_from_dict(config(backend="both", real={"iterations": 5, "backend": "gloo"})))
    assert sorted(p.source for p in points) == ["real"] * 3 + ["sim"] * 3
    assert all(p.spec.get("real") == {"backend": "gloo"} for p in points if p.source == "real")
    assert all("real" not in p.spec for p in points if p.source == "sim")


@pytest.mark.parametrize("given", [{"single_gpu_iteration_time_s": 0.25}, {"single_gpu_samples_per_s": 64.0}])
def test_calibration_makes_one_gpu_take_the_measured_time(given):
    """k = (T_measured - t_opt) / sum(layer times): T1 equals the measured figure exactly."""
    spec = config()
    spec.pop("sweep")
    spec["cluster"]["gpus"] = 8
    calibrated = calibrated_scenario(spec, given)
    result = simulate(calibrated)
    measured = given.get("single_gpu_iteration_time_s") or 16 / given["single_gpu_samples_per_s"]
    assert result.baseline_time_s == pytest.approx(measured, rel=1e-9)
    plain = simulate(scenario_from_dict(spec))
    k = compute_scale_factor(scenario_from_dict(spec), given)
    assert result.forward_time_s == pytest.approx(k * plain.forward_time_s, rel=1e-9)
    assert result.comm_time_s == pytest.approx(plain.comm_time_s, rel=1e-12)  # network untouched


def test_calibration_at_a_reference_batch_scales_other_batches_by_the_same_factor():
    spec = config()
    spec.pop("sweep")
    calib = {"single_gpu_iteration_time_s": 0.5, "batch_size": 64}
    k16 = compute_scale_factor(scenario_from_dict(spec), calib)
    spec["workload"]["batch_size"] = 32
    assert compute_scale_factor(scenario_from_dict(spec), calib) == pytest.approx(k16)


def test_calibration_shorter_than_the_optimizer_step_is_rejected():
    spec = config()
    spec.pop("sweep")
    with pytest.raises(ConfigError, match="single_gpu_iteration_time_s"):
        calibrated_scenario(spec, {"single_gpu_iteration_time_s": 1e-9})


SHIPPED = sorted(f"{name}.yaml" for name in SHIPPED_EXPERIMENTS)
"""The experiments `python -m experiments.ship` regenerates (validation*.yaml are validate's configs)."""
EXPECTED_SKIPS = {"model_vs_data_parallel.yaml": ("memory per rank", "strategy.pp:", "strategy.dp * tp * pp:")}
"""Shipped experiments that show invalid combinations on purpose, and the reasons they may give."""


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_experiments_load_and_expand(name):
    experiment = load_experiment(resources.files("experiments").joinpath(name))
    models = {experiment.base.get("workload", {}).get("model")} | set(experiment.axes.get("workload.model", []))
    missing = {m for m in models if m and m not in zoo_names()}
    if missing:
        pytest.skip(f"zoo models not in this checkout yet: {sorted(missing)}")
    points, skipped = expand(experiment)
    assert points
    assert all(s.reason.startswith(EXPECTED_SKIPS.get(name, ())) for s in skipped), skipped
    if name in EXPECTED_SKIPS:  # GPT-2 XL's pure data parallelism is left out for memory
        assert any(s.reason.startswith("memory per rank") and s.axes.get("workload.model") == "gpt2_xl"
                   and s.axes.get("case") == "data parallel" for s in skipped)


def test_inline_catalog_link_can_be_swept_and_a_bad_entry_names_its_field():
    raw = config(catalog={"links": {"my_link": {"kind": "roce", "bandwidth_Gbps": 50, "latency_us": 3}}},
                 sweep={"cluster.gpus": [8], "cluster.inter_link": ["my_link", "tcp_10gbe"]})
    points, _ = expand(experiment_from_dict(raw))
    assert {p.spec["cluster"]["inter_link"] for p in points} == {"my_link", "tcp_10gbe"}
    raw["catalog"]["links"]["my_link"]["bandwidth_Gbps"] = -1
    with pytest.raises(ConfigError) as err:
        expand(experiment_from_dict(raw))
    assert err.value.field == "catalog.links.my_link.bandwidth_Gbps"


@given(start=st.integers(1, 64), factor=st.integers(2, 5), span=st.integers(1, 10_000))
def test_geometric_axis_property(start, factor, span):
    """Values start x factor^i, all <= stop, and the next one would pass stop."""
    stop = start + span
    values = expand_axis("cluster.gpus", {"geometric": {"start": start, "stop": stop, "factor": factor}})
    assert values == [start * factor**i for i in range(len(values))]
    assert values[-1] <= stop < values[-1] * factor
