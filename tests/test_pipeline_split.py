"""Pipeline stages: one split rule for the simulator and the harness, the framework's per-pass
overhead, its calibration by inverting the simulator, micro-batch calibration."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.calibration import Calibration
from sim.catalog import builtin_catalog
from sim.config import scenario_from_dict
from sim.costs.pipeline import balance_stages, layer_unit, pipeline_time_closed_form, split_units
from sim.engine.pipeline import run_pipeline
from sim.engine.pipeline_plan import build_pipeline_plan, stage_bounds
from sim.errors import ConfigError
from sim.simulate import simulate

CPU_MODELS = {"mlp": (2, 3), "small_cnn": (2, 4), "small_transformer": (2, 4)}
IDEAL = {
    "gpus": {"ideal": {"peak_tflops": {"fp32": 1.0}, "memory_bandwidth_GBps": 1e9, "memory_GiB": 1000, "efficiency": 1.0}},
    "links": {"free": {"bandwidth_GBps": 1e9, "latency_us": 0, "kind": "custom"},
              "slow": {"bandwidth_GBps": 0.001, "latency_us": 0, "software_latency_us": 300, "kind": "custom"}},
}


def _scenario(model: str, pp: int, rule: str, **strategy):
    return scenario_from_dict({"workload": {"model": model}, "cluster": {"gpus": pp, "gpus_per_node": pp, "gpu": "cpu"},
                               "strategy": {"kind": "pipeline", "pp": pp, "stage_balance": rule, **strategy}})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.floats(0.0, 10.0)), min_size=1, max_size=9), st.integers(1, 9))
def test_split_units_never_cuts_a_unit_and_is_the_best_unit_split(units, p):
    names = [f"{u}.{j}" for u, (size, _) in enumerate(units) for j in range(size)]
    costs = [c for size, c in units for _ in range(size)]
    unit_of = [layer_unit(n) for n in names]
    if p > len(units):
        with pytest.raises(ValueError):
            split_units(costs, unit_of, p)
        return
    bounds = split_units(costs, unit_of, p)
    assert bounds[0][0] == 0 and bounds[-1][1] == len(names)
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    assert all(lo == 0 or unit_of[lo] != unit_of[lo - 1] for lo, _ in bounds)  # cuts between units only
    best = balance_stages([size * c for size, c in units], p)
    worst = max(sum(costs[lo:hi]) for lo, hi in bounds)
    assert worst == pytest.approx(max(sum(size * c for size, c in units[a:b]) for a, b in best))


def test_rules_cut_by_their_cost():
    # small_transformer: embedding 139k params, blocks 198k each, head 132k -> by params and by
    # FLOPs two stages hold (embedding, block 1) and (block 2, head)
    s = _scenario("small_transformer", 2, "params")
    names = [layer.name for layer in s.workload.layers]
    assert [names[lo] for lo, _ in stage_bounds(s)] == ["0.tok", "2.ln1"]
    # small_cnn by params: the 131k-parameter fc layer alone after the convolutions ...
    cnn = _scenario("small_cnn", 2, "params")
    assert [cnn.workload.layers[lo].name for lo, _ in stage_bounds(cnn)] == ["0", "10"]
    # ... by FLOPs the first two convolutions (most of the FLOPs) on stage 0
    cnn = _scenario("small_cnn", 2, "flops")
    assert [cnn.workload.layers[lo].name for lo, _ in stage_bounds(cnn)] == ["0", "6"]


@pytest.mark.parametrize(("field", "value"), [("stage_balance", "memory"), ("pipeline_overhead_s", -1e-3),
                                               ("pipeline_overhead_s", "fast")])
def test_bad_pipeline_fields_name_the_field(field, value):
    with pytest.raises(ConfigError, match=f"strategy.{field}"):
        _scenario("small_cnn", 2, "flops", **{field: value})


def test_more_stages_than_top_level_modules_is_a_config_error():
    with pytest.raises(ConfigError, match="strategy.pp"):
        stage_bounds(_scenario("mlp", 4, "flops"))


@pytest.mark.parametrize("model", list(CPU_MODELS))
@pytest.mark.parametrize("rule", ["time", "flops", "params"])
def test_sim_and_real_put_the_same_layers_on_each_stage(model, rule):
    """The harness' torch children per stage hold exactly the parameters of the simulator's zoo
    layers per stage, and each zoo layer's own torch child (its name's index) is on its stage."""
    torch = pytest.importorskip("torch")  # noqa: F841
    from real.models import build_model
    from real.strategies.pipeline import child_ranges, pipeline_scenario

    children = list(build_model(model))
    for pp in CPU_MODELS[model]:
        scenario = pipeline_scenario(_scenario(model, pp, rule), pp, 1)
        sim_bounds = stage_bounds(scenario)
        real_bounds = child_ranges(scenario, len(children))
        assert len(sim_bounds) == len(real_bounds) == pp
        for (lo, hi), (clo, chi) in zip(sim_bounds, real_bounds, strict=True):
            sim_params = sum(layer.param_count for layer in scenario.workload.layers[lo:hi])
            real_params = sum(p.numel() for c in children[clo:chi] for p in c.parameters())
            assert sim_params == real_params
            assert all(clo <= int(layer_unit(layer.name)) < chi for layer in scenario.workload.layers[lo:hi])


def _uniform(p: int, m: int, **strategy):
    layers = [{"name": str(i), "kind": "custom", "param_count": 0, "fwd_flops": 1e9, "bwd_flops": 2e9,
               "activation_elems": 0} for i in range(p)]
    return scenario_from_dict({"workload": {"layers": layers, "batch_size": 8 * m, "optimizer": "sgd"},
                               "cluster": {"gpus": p, "gpus_per_node": p, "gpu": "ideal", "intra_link": "free",
                                           "inter_link": "free"},
                               "strategy": {"kind": "pipeline", "pp": p, "micro_batches": m, **strategy},
                               "catalog": IDEAL, "variability": {"stragglers": False}})  # the closed form at nominal speed


@pytest.mark.parametrize(("p", "m", "schedule"), [(2, 4, "gpipe"), (4, 4, "gpipe"), (4, 8, "1f1b"), (3, 1, "gpipe")])
def test_overhead_adds_one_o_per_pass_on_the_critical_path(p, m, schedule):
    """Equal stages, free sends: (m + p - 1)(f + b + 2o), the closed form with f + o and b + o."""
    o = 2.5e-3
    base = simulate(_uniform(p, m, schedule=schedule))
    over = simulate(_uniform(p, m, schedule=schedule, pipeline_overhead_s=o))
    f, b = 1e9 * 8 / 1e12, 2e9 * 8 / 1e12
    assert base.iteration_time_s == pytest.approx(pipeline_time_closed_form(p, m, f, b), rel=1e-9)
    assert over.iteration_time_s == pytest.approx(pipeline_time_closed_form(p, m, f + o, b + o), rel=1e-9)


@pytest.mark.parametrize(("p", "m", "o"), [(2, 4, 0.8e-3), (4, 8, 2e-3), (4, 2, 0.0)])
def test_bench_inversion_recovers_the_overhead(p, m, o):
    """A benchmark row whose step time the simulator itself produced with overhead o gives back o."""
    from real.pipeline_bench import bench_scenario, overhead_per_pass_s

    catalog = builtin_catalog().extended(IDEAL, where="test")
    row = {"ranks": p, "micro_batches": m, "micro_batch": 2, "stage_fwd_s": 1e-4, "stage_bwd_s": 2e-4}
    scenario = bench_scenario(row, "slow", catalog, "ideal", o)
    row["step_s"] = run_pipeline(build_pipeline_plan(scenario), p, scenario.workload.batch_size).iteration_time_s
    assert overhead_per_pass_s(row, "slow", catalog, "ideal") == pytest.approx(o, abs=1e-9)


def test_micro_batch_profiles_join_the_calibration_and_the_overhead_is_the_nearest_depth(tmp_path):
    from real.pipeline_bench import (
        PIPELINE_FILE,
        micro_batch_calibration,
        pipeline_overhead_for,
    )

    (tmp_path / PIPELINE_FILE).write_text(yaml.safe_dump({
        "world_sizes": {2: {"overhead_per_pass_s": 1e-3}, 4: {"overhead_per_pass_s": 3e-3}},
        "workloads": {"small_cnn": {8: {"layers": ["0"], "colocated": {1: {"fwd_s": [1.0], "bwd_s": [2.0]}}}}}}))
    cal = Calibration(path=tmp_path, device={"workloads": {"small_cnn": {32: {"layers": ["0"]}}}}, links={})
    merged = micro_batch_calibration(cal)
    assert sorted(merged.device["workloads"]["small_cnn"]) == [8, 32]
    assert cal.device["workloads"]["small_cnn"] == {32: {"layers": ["0"]}}  # the original is untouched
    assert [pipeline_overhead_for(tmp_path, n) for n in (1, 2, 3, 4, 8)] == [1e-3, 1e-3, 3e-3, 3e-3, 3e-3]
    assert pipeline_overhead_for(tmp_path / "missing", 2) == 0.0


def test_a_stage_ending_in_a_layer_without_activation_sends_the_one_before():
    """small_transformer's stage 0 at 4 stages ends in the positional embedding (added in place,
    no activation of its own): it still sends the embedding output, micro-batch x 8192 fp32."""
    plan = build_pipeline_plan(_scenario("small_transformer", 4, "flops", micro_batches=4))
    assert plan.stages[0].send_bytes == 16 // 4 * 8192 * 4
    assert all(st.send_bytes > 0 for st in plan.stages[:-1])


@given(st.lists(st.floats(0.0, 1e3), min_size=1, max_size=8))
def test_busy_stages_is_between_one_and_p(work):
    from sim.costs.pipeline import busy_stages

    k = busy_stages(work)
    assert 1.0 - 1e-9 <= k <= len(work) + 1e-9
    if max(work) > 0 and len(set(work)) == 1:
        assert k == pytest.approx(len(work))


def test_loss_residual_is_the_profile_beyond_its_layers_slowed_like_them(tmp_path):
    from validation.points import loss_residual_s

    prof = {1: {"fwd_s": [3.0, 1.0], "bwd_s": [4.0, 2.0], "iteration_wall_s": 12.0},   # layers 10, rest 2
            2: {"fwd_s": [4.5, 1.5], "bwd_s": [6.0, 3.0], "iteration_wall_s": 30.0}}   # layers 1.5 x alone
    cal = Calibration(path=tmp_path, device={"workloads": {"m": {4: {"layers": ["0", "1"], "colocated": prof}}}}, links={})
    assert loss_residual_s(cal, "m", 4, 1) == pytest.approx(2.0)
    assert loss_residual_s(cal, "m", 4, 2) == pytest.approx(3.0)  # not 30 - 15: waits for a core are not loss
    assert loss_residual_s(cal, "m", 2, 1) == pytest.approx(1.0)  # nearest batch, scaled linearly
    assert loss_residual_s(cal, "other", 4, 1) == 0.0


def test_pipeline_point_takes_micro_batch_profiles_at_the_busy_stage_count(tmp_path):
    """small_cnn, 2 stages by FLOPs ((0, 3) | (6, 10, 12)), 4 micro-batches of 8: the plan's
    per-micro-batch stage times are pipeline.yaml's batch-8 profile (not device.yaml's batch 32 / 4)
    interpolated between k = 1 and 2 at k_eff = sum W / max W, the loss after the last layer,
    plus the calibrated overhead per pass."""
    from real.pipeline_bench import PIPELINE_FILE
    from validation.points import pipeline_calibrated

    names = ["0", "3", "6", "10", "12"]

    def prof(scale, fwd, bwd, rest):
        f, b = [scale * t for t in fwd], [scale * t for t in bwd]
        return {"fwd_s": f, "bwd_s": b, "iteration_wall_s": sum(f) + sum(b) + rest}

    fwd, bwd = [1.0, 1.0, 0.1, 0.1, 0.1], [2.0, 2.0, 0.2, 0.2, 0.2]
    micro = {"layers": names, "colocated": {1: prof(1.0, fwd, bwd, 0.5), 2: prof(1.5, fwd, bwd, 9.0)}}
    full = {"layers": names, "colocated": {1: prof(40.0, fwd, bwd, 0.0), 2: prof(40.0, fwd, bwd, 0.0)}}
    o = 1e-3
    (tmp_path / PIPELINE_FILE).write_text(yaml.safe_dump({"world_sizes": {2: {"overhead_per_pass_s": o}},
                                                          "workloads": {"small_cnn": {8: micro}}}))
    cal = Calibration(path=tmp_path, device={"workloads": {"small_cnn": {32: full}}}, links={})
    scenario = pipeline_calibrated(_scenario("small_cnn", 2, "flops", micro_batches=4), cal)
    plan = build_pipeline_plan(scenario)
    assert [st.layers for st in plan.stages] == [(0, 2), (2, 5)]
    k_eff = (6.0 + 0.9 + 0.5) / 6.0
    factor = 1.0 + 0.5 * (k_eff - 1.0)  # alone x 1, two ranks x 1.5, linear in k
    assert plan.stages[0].fwd_s == pytest.approx(2.0 * factor + o)
    assert plan.stages[0].bwd_s == pytest.approx(4.0 * factor + o)
    assert plan.stages[1].fwd_s == pytest.approx(0.3 * factor + o)
    assert plan.stages[1].bwd_s == pytest.approx((0.6 + 0.5) * factor + o)  # the loss: 0.5 alone, slowed alike


def test_pipeline_micro_batch_profile_is_scaled_like_the_full_batch_profile_to_its_step(tmp_path):
    """With the whole step measured at the full batch, the raw micro-batch profile is scaled by
    step / profile (forward and backward apart) from a k whose step ran with the profile's
    threads per rank (the 2-thread 1-rank step is not used for one-thread stages); that step
    holds the loss, so no loss residual is added."""
    from real.pipeline_bench import PIPELINE_FILE
    from validation.points import pipeline_calibrated, stage_step_scale

    names = ["0", "3", "6", "10", "12"]

    def prof(scale, fwd, bwd, rest):
        f, b = [scale * t for t in fwd], [scale * t for t in bwd]
        return {"fwd_s": f, "bwd_s": b, "iteration_wall_s": sum(f) + sum(b) + rest, "threads_per_rank": 1}

    fwd, bwd = [1.0, 1.0, 0.1, 0.1, 0.1], [2.0, 2.0, 0.2, 0.2, 0.2]
    micro = {"layers": names, "colocated": {1: prof(1.0, fwd, bwd, 0.5), 2: prof(1.5, fwd, bwd, 9.0)}}
    f_sum, b_sum = 40.0 * sum(fwd), 40.0 * sum(bwd)

    def step(rf, rb, threads):
        return {"fwd_s": rf * f_sum, "bwd_s": rb * b_sum, "opt_s": 0.0, "total_s": rf * f_sum + rb * b_sum,
                "threads": threads}

    full = {"layers": names, "colocated": {1: prof(40.0, fwd, bwd, 0.0), 2: prof(40.0, fwd, bwd, 0.0)},
            "steps": {1: step(0.1, 0.1, 2), 2: step(0.5, 0.8, 1)}}
    o = 1e-3
    (tmp_path / PIPELINE_FILE).write_text(yaml.safe_dump({"world_sizes": {2: {"overhead_per_pass_s": o}},
                                                          "workloads": {"small_cnn": {8: micro}}}))
    cal = Calibration(path=tmp_path, device={"workloads": {"small_cnn": {32: full}}}, links={})
    assert stage_step_scale(cal, "small_cnn", 32, 1) == pytest.approx((0.5, 0.8))  # k = 2's, same threads
    plan = build_pipeline_plan(pipeline_calibrated(_scenario("small_cnn", 2, "flops", micro_batches=4), cal))
    assert [st.layers for st in plan.stages] == [(0, 2), (2, 5)]
    w0, w1 = 2.0 * 0.5 + 4.0 * 0.8, 0.3 * 0.5 + 0.6 * 0.8
    factor = 1.0 + 0.5 * ((w0 + w1) / w0 - 1.0)
    assert plan.stages[0].fwd_s == pytest.approx(2.0 * 0.5 * factor + o)
    assert plan.stages[0].bwd_s == pytest.approx(4.0 * 0.8 * factor + o)
    assert plan.stages[1].bwd_s == pytest.approx(0.6 * 0.8 * factor + o)  # no loss residual on top


def test_pipeline_micro_batch_step_sets_the_stage_compute_over_the_full_batchs(tmp_path):
    """With the whole step measured at the micro-batch (k = 2, one thread), the stage times come
    from it: at k = 2 the layers sum to that step's forward and backward, and the 1-rank profile
    is scaled by the micro-batch's own step / profile ratio, not the full batch's."""
    from real.pipeline_bench import PIPELINE_FILE
    from validation.points import pipeline_calibrated

    names = ["0", "3", "6", "10", "12"]

    def prof(scale, fwd, bwd):
        f, b = [scale * t for t in fwd], [scale * t for t in bwd]
        return {"fwd_s": f, "bwd_s": b, "iteration_wall_s": sum(f) + sum(b), "threads_per_rank": 1}

    fwd, bwd = [1.0, 1.0, 0.1, 0.1, 0.1], [2.0, 2.0, 0.2, 0.2, 0.2]
    f_sum, b_sum = sum(fwd), sum(bwd)

    def step(rf, rb, threads, n=1.0):
        return {"fwd_s": n * rf * f_sum, "bwd_s": n * rb * b_sum, "opt_s": 0.0,
                "total_s": n * (rf * f_sum + rb * b_sum), "threads": threads}

    micro = {"layers": names, "colocated": {1: prof(1.0, fwd, bwd), 2: prof(1.0, fwd, bwd)},
             "steps": {2: step(0.9, 0.5, 1)}}
    full = {"layers": names, "colocated": {1: prof(40.0, fwd, bwd), 2: prof(40.0, fwd, bwd)},
            "steps": {1: step(0.1, 0.1, 2, 40.0), 2: step(1.2, 0.7, 1, 40.0)}}
    (tmp_path / PIPELINE_FILE).write_text(yaml.safe_dump({"world_sizes": {2: {"overhead_per_pass_s": 0.0}},
                                                          "workloads": {"small_cnn": {8: micro}}}))
    cal = Calibration(path=tmp_path, device={"workloads": {"small_cnn": {32: full}}}, links={})
    plan = build_pipeline_plan(pipeline_calibrated(_scenario("small_cnn", 2, "flops", micro_batches=4), cal))
    # both k = 1 and k = 2 give 0.9 x forward and 0.5 x backward: the micro-batch's ratio
    assert plan.stages[0].fwd_s == pytest.approx(2.0 * 0.9)
    assert plan.stages[0].bwd_s == pytest.approx(4.0 * 0.5)
    assert plan.stages[1].fwd_s == pytest.approx(0.3 * 0.9)


def test_pipeline_overhead_follows_the_stage_compute_between_measured_stage_sizes(tmp_path):
    """Stages of several sizes measured: o is linear in the busiest stage's pass time between
    them and held beyond; without a pass time (or by_stage) it is the tiny stage's o."""
    from real.pipeline_bench import PIPELINE_FILE, pipeline_overhead_for

    (tmp_path / PIPELINE_FILE).write_text(yaml.safe_dump({"world_sizes": {4: {
        "overhead_per_pass_s": 0.1e-3,
        "by_stage": [{"pass_s": 1e-3, "overhead_per_pass_s": 0.5e-3}, {"pass_s": 0.1e-3, "overhead_per_pass_s": 0.1e-3},
                     {"pass_s": 3e-3, "overhead_per_pass_s": 0.9e-3}]}}}))
    assert pipeline_overhead_for(tmp_path, 4) == pytest.approx(0.1e-3)
    assert pipeline_overhead_for(tmp_path, 4, 0.05e-3) == pytest.approx(0.1e-3)
    assert pipeline_overhead_for(tmp_path, 4, 0.55e-3) == pytest.approx(0.3e-3)
    assert pipeline_overhead_for(tmp_path, 4, 2e-3) == pytest.approx(0.7e-3)
    assert pipeline_overhead_for(tmp_path, 2, 10e-3) == pytest.approx(0.9e-3)


def test_pipeline_overhead_moves_from_unbalanced_to_equal_stages_with_the_busy_stage_count(tmp_path):
    """Equal and unbalanced stage variants measured: o follows each group's curve in the pass
    time and, between the groups' busy-stage counts, is linear in k_eff (held beyond); without
    k_eff it is the equal stages' curve."""
    from real.pipeline_bench import PIPELINE_FILE, pipeline_overhead_for

    (tmp_path / PIPELINE_FILE).write_text(yaml.safe_dump({"world_sizes": {2: {
        "overhead_per_pass_s": 0.3e-3,
        "by_stage": [{"depth": 1, "pass_s": 0.1e-3, "busy_stages": 2.0, "overhead_per_pass_s": 0.3e-3},
                     {"depth": 24, "pass_s": 3e-3, "busy_stages": 1.9, "overhead_per_pass_s": 0.9e-3},
                     {"depths": [8, 1], "pass_s": 1e-3, "busy_stages": 1.2, "overhead_per_pass_s": 0.1e-3},
                     {"depths": [24, 1], "pass_s": 3e-3, "busy_stages": 1.0, "overhead_per_pass_s": 0.0}]}}}))
    k_equal, k_unequal = 1.95, 1.1  # the groups' median busy-stage counts
    assert pipeline_overhead_for(tmp_path, 2, 3e-3) == pytest.approx(0.9e-3)
    assert pipeline_overhead_for(tmp_path, 2, 3e-3, 2.0) == pytest.approx(0.9e-3)
    assert pipeline_overhead_for(tmp_path, 2, 3e-3, 1.0) == pytest.approx(0.0)
    share = (1.5 - k_unequal) / (k_equal - k_unequal)
    assert pipeline_overhead_for(tmp_path, 2, 3e-3, 1.5) == pytest.approx(share * 0.9e-3)
    o_equal, o_unequal = 0.3e-3 + 0.6e-3 * (2e-3 - 0.1e-3) / 2.9e-3, 0.05e-3
    assert pipeline_overhead_for(tmp_path, 2, 2e-3, 1.5) == pytest.approx(o_unequal + share * (o_equal - o_unequal))


def test_bench_stage_times_keep_the_ranks_ratios_at_the_slowest_ranks_level():
    """Own-clock means give the stages' ratios; the busiest stage's pass is set to the
    slowest-rank mean (which holds the waits for a core)."""
    from real.pipeline_bench import stage_summary, stage_times_by_rank

    row = {"ranks": 2, "stage_fwd_s": 2e-3, "stage_bwd_s": 4e-3}
    out = stage_times_by_rank(row, [1e-3, 0.1e-3], [2e-3, 0.2e-3])  # own passes 3 and 0.3 ms
    assert out["stage_fwd_s_by_rank"] == pytest.approx([2e-3, 0.2e-3])
    assert out["stage_bwd_s_by_rank"] == pytest.approx([4e-3, 0.4e-3])
    rows = [{**row, **out, "overhead_per_pass_s": o} for o in (1e-4, 3e-4, 2e-4)]
    summary = stage_summary(rows)
    assert summary["pass_s"] == pytest.approx(6e-3)
    assert summary["busy_stages"] == pytest.approx(1.1)
    assert summary["overhead_per_pass_s"] == pytest.approx(2e-4)


def test_unbalanced_bench_stages_reach_the_simulator_per_rank(tmp_path):
    """bench_scenario gives each stage its own measured times when the row has them."""
    from real.pipeline_bench import bench_scenario, stage_depths

    assert stage_depths({"depths": [24, 1]}, 4) == [24, 1, 1, 1]
    assert stage_depths({"depth": 8}, 2) == [8, 8]
    catalog = builtin_catalog().extended(IDEAL, where="test")
    row = {"ranks": 2, "micro_batches": 4, "micro_batch": 2, "stage_fwd_s": 1e-3, "stage_bwd_s": 2e-3,
           "stage_fwd_s_by_rank": [1e-3, 0.1e-3], "stage_bwd_s_by_rank": [2e-3, 0.2e-3]}
    layers = bench_scenario(row, "slow", catalog, "ideal", 0.0).workload.layers
    assert [x.fwd_time_s for x in layers] == pytest.approx([4e-3, 0.4e-3])
    assert [x.bwd_time_s for x in layers] == pytest.approx([8e-3, 0.8e-3])


@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=6, unique_by=lambda t: t[0]),
       st.floats(-1, 2))
def test_piecewise_linear_stays_within_its_points_and_passes_through_them(points, x):
    from real.calib_lookup import piecewise_linear

    points = sorted(points)
    y = piecewise_linear(points, x)
    assert min(p[1] for p in points) - 1e-9 <= y <= max(p[1] for p in points) + 1e-9
    for px, py in points:
        assert piecewise_linear(points, px) == pytest.approx(py)
