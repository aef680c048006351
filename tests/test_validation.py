"""Validation: summary math on synthetic rows, the config loader's errors, the exit code."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from scalebench.cli import main
from sim.errors import ConfigError
from validation.config import load_validation_config
from validation.summary import (
    group_stats,
    relative_error,
    repeatability_text,
    round_spread,
    summarize,
    verdict,
    worst_points,
)

ROOT = Path(__file__).resolve().parents[1]


def _rows(pairs, **cols):
    return [{"point": f"p{i}", "rel_error": relative_error(p, m), **cols} for i, (p, m) in enumerate(pairs)]


def test_relative_error_and_mape_by_hand():
    rows = _rows([(1.1, 1.0), (0.8, 1.0), (2.0, 2.0)])
    s = group_stats(rows)
    assert s.points == 3
    assert s.mape_percent == pytest.approx((10 + 20 + 0) / 3)
    assert s.worst_percent == pytest.approx(20)
    assert s.worst_point == "p1"
    assert s.bias_percent == pytest.approx((10 - 20 + 0) / 3)


def test_missing_values_do_not_count():
    rows = _rows([(1.1, 1.0)]) + [{"point": "skipped", "rel_error": math.nan}, {"point": "none"}]
    assert group_stats(rows).points == 1
    assert math.isnan(relative_error(1.0, 0.0)) and math.isnan(relative_error(math.nan, 1.0))
    assert group_stats([]).points == 0 and math.isnan(group_stats([]).mape_percent)


def test_grouping_splits_by_column_and_keeps_the_overall_line():
    rows = (_rows([(1.1, 1.0), (1.3, 1.0)], strategy="ddp", link="loopback")
            + _rows([(0.5, 1.0)], strategy="ps_sync", link="1gbit"))
    stats = summarize(rows, ("strategy", "link"))
    by = {(s.column, s.value): s for s in stats}
    assert by[("all", "all")].points == 3
    assert by[("strategy", "ddp")].mape_percent == pytest.approx(20)
    assert by[("strategy", "ps_sync")].worst_percent == pytest.approx(50)
    assert by[("link", "1gbit")].points == 1
    assert [r["rel_error"] for r in worst_points(rows, 2)] == pytest.approx([-0.5, 0.3])


@given(st.lists(st.tuples(st.floats(0.01, 10), st.floats(0.01, 10)), min_size=1, max_size=30))
def test_mape_is_between_zero_and_worst_and_groups_partition(pairs):
    rows = [{**r, "strategy": "ab"[i % 2]} for i, r in enumerate(_rows(pairs))]
    stats = summarize(rows, ("strategy",))
    overall = stats[0]
    assert 0 <= overall.mape_percent <= overall.worst_percent + 1e-9
    parts = stats[1:]
    assert sum(s.points for s in parts) == overall.points
    weighted = sum(s.mape_percent * s.points for s in parts) / overall.points
    assert weighted == pytest.approx(overall.mape_percent)


def test_verdict_thresholds():
    s = group_stats(_rows([(1.05, 1.0), (1.2, 1.0)]))  # MAPE 12.5, worst 20
    assert verdict(s, mape_percent=15, worst_percent=25, min_points=2).passed
    assert not verdict(s, mape_percent=10, worst_percent=None, min_points=2).passed
    assert not verdict(s, mape_percent=15, worst_percent=15, min_points=2).passed
    assert "only 2 points" in verdict(s, mape_percent=15, worst_percent=None, min_points=3).reasons[0]


# -- the config loader -----------------------------------------------------------------------

def _write(tmp_path, spec) -> Path:
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


BASE = {"threshold": {"mape_percent": 10}, "sweeps": [{"model": "mlp", "ranks": [1, 2]}]}


def test_shipped_configs_load_and_are_large_enough():
    full = load_validation_config(ROOT / "experiments" / "validation.yaml")
    assert len(full.points) >= 40 and full.mape_percent == 10 and full.worst_percent == 25
    assert {p.strategy for p in full.points} == {"ddp", "ps_sync", "pipeline"}
    assert {p.link for p in full.points} == {"loopback", "10gbit", "1gbit", "100mbit"}
    assert {p.codec for p in full.points} == {"fp32", "fp16", "bf16", "fp8"}
    assert {p.ranks for p in full.points} == {1, 2, 4}
    assert len({p.id for p in full.points}) == len(full.points)
    quick = load_validation_config(ROOT / "experiments" / "validation_quick.yaml")
    assert 4 <= len(quick.points) <= 8 and {p.link for p in quick.points} == {"loopback"}


def test_expansion_drops_what_cannot_run(tmp_path):
    spec = {**BASE, "sweeps": [{"model": "mlp", "ranks": [1, 2], "link": ["loopback", "1gbit"],
                                "codec": ["fp32", "fp16"], "overlap": [True, False]}]}
    cfg = load_validation_config(_write(tmp_path, spec))
    ids = {p.id for p in cfg.points}
    assert "ddp-mlp-n1-1gbit-fp32-ov-b25" not in ids  # one rank: no link
    assert "ddp-mlp-n2-1gbit-fp16-noov-b25" not in ids  # codecs need overlap
    assert "ddp-mlp-n2-1gbit-fp16-ov-b25" in ids
    # (codec, overlap): 4 combinations minus fp16 without overlap = 3; one link on 1 rank, two on 2
    assert len(cfg.points) == 3 * 1 + 3 * 2
    assert cfg.skipped


@pytest.mark.parametrize(("patch", "field"), [
    ({"threshold": {}}, "threshold.mape_percent"),
    ({"threshold": {"mape_percent": -1}}, "threshold.mape_percent"),
    ({"sweeps": []}, "sweeps"),
    ({"sweeps": [{"ranks": 2}]}, "sweeps[0].model"),
    ({"sweeps": [{"model": "resnet50", "ranks": 2}]}, "sweeps[0].model"),
    ({"sweeps": [{"model": "mlp", "ranks": 2, "link": "5gbit"}]}, "sweeps[0].link"),
    ({"sweeps": [{"model": "mlp", "ranks": 0}]}, "sweeps[0].ranks"),
    ({"sweeps": [{"model": "mlp", "ranks": 2, "colour": "red"}]}, "sweeps[0]"),
    ({"measure": {"iterations": 0}}, "measure.iterations"),
    ({"network": {"collectives": ["alltoall"]}}, "network.collectives"),
    ({"bogus": 1}, "v.yaml"),
])
def test_config_errors_name_the_field(tmp_path, patch, field):
    with pytest.raises(ConfigError) as err:
        load_validation_config(_write(tmp_path, {**BASE, **patch}))
    assert field in err.value.field


def test_cli_config_error_exits_2(tmp_path, capsys):
    assert main(["validate", "--config", str(_write(tmp_path, {**BASE, "threshold": {}}))]) == 2
    assert "threshold.mape_percent" in capsys.readouterr().err


# -- the exit code, end to end on a synthetic calibration and cached measurements ------------

def _calibration(directory: Path) -> None:
    directory.mkdir(parents=True)
    layers = {"layers": ["0", "2", "4"], "colocated": {
        1: {"fwd_s": [1e-3, 2e-3, 1e-3], "bwd_s": [2e-3, 4e-3, 2e-3]},
        2: {"fwd_s": [2e-3, 4e-3, 2e-3], "bwd_s": [4e-3, 8e-3, 4e-3]}}}
    (directory / "device.yaml").write_text(yaml.safe_dump({
        "device": "cpu_local", "colocation_slowdown": {1: 1.0, 2: 2.0}, "workloads": {"mlp": {64: layers}}}))
    (directory / "catalog.yaml").write_text(yaml.safe_dump({"gpus": {"cpu_local": {
        "peak_tflops": {"fp32": 0.05}, "memory_bandwidth_GBps": 10, "memory_GiB": 8, "source": "test"}}}))
    (directory / "links.yaml").write_text(yaml.safe_dump({"fits": [{
        "backend": "gloo", "collective": "allreduce", "link": "loopback", "world_size": 2,
        "link_latency_us": 50.0, "link_bandwidth_GBps": 1.0, "rms_relative_error": 0.1}]}))


def _calibration_with_fit(directory: Path, **fit) -> None:
    """``_calibration`` plus one more gloo fit: the first one with ``fit``'s fields replaced."""
    _calibration(directory)
    links = yaml.safe_load((directory / "links.yaml").read_text())
    links["fits"].append({**links["fits"][0], **fit})
    (directory / "links.yaml").write_text(yaml.safe_dump(links))


@pytest.mark.parametrize(("factor", "status"), [(1.05, 0), (0.97, 0), (2.0, 1)])
def test_exit_code_follows_the_threshold(tmp_path, factor, status):
    from real.calibrated_links import calibrated_catalog
    from sim.calibration import load_calibration
    from validation.points import predict

    cal_dir = tmp_path / "cal"
    _calibration(cal_dir)
    spec = {"out": str(tmp_path / "out"), "threshold": {"mape_percent": 10, "min_points": 2},
            "calibration": {"dir": str(cal_dir)}, "sweeps": [{"model": "mlp", "ranks": [1, 2]}]}
    path = _write(tmp_path, spec)
    cfg = load_validation_config(path)
    cal = load_calibration(cal_dir)
    catalog = calibrated_catalog(cal)
    cache = {p.id: {"status": "measured", "row": {"iteration_time_s": predict(p, cal, catalog)["iteration_time_s"] / factor}}
             for p in cfg.points}
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "measured.json").write_text(json.dumps(cache))
    assert main(["validate", "--config", str(path)]) == status
    out = tmp_path / "out" / "replay"  # a complete record is replayed: its report goes apart from the record
    for name in ("validation.csv", "summary.csv", "summary.md", "validation.png", "worst_breakdown.png"):
        assert (out / name).stat().st_size > 0
    text = (out / "summary.md").read_text()
    assert ("PASS" if status == 0 else "FAIL") in text


@pytest.mark.slow
@pytest.mark.torch
def test_real_vs_sim_small_point(tmp_path):
    """Measure -> calibrate -> predict -> compare for real on two small points (minutes).

    Tolerance 50% MAPE: timings here vary by +-15% between runs and more on a shared machine;
    a model that ignored co-location (2 ranks on 2 cores) or the gloo link would miss by more."""
    pytest.importorskip("torch")
    spec = {"out": str(tmp_path / "out"), "threshold": {"mape_percent": 50, "min_points": 2},
            "measure": {"iterations": 6, "warmup": 2, "timeout_s": 90},
            "calibration": {"dir": str(tmp_path / "cal"), "models": ["small_cnn"], "colocated": [1, 2],
                            "ranks": [2], "links": ["loopback"], "max_bytes": 2**21, "iterations": 5},
            "sweeps": [{"model": "small_cnn", "ranks": 2, "overlap": [True, False]}]}
    assert main(["validate", "--config", str(_write(tmp_path, spec))]) == 0
    rows = (tmp_path / "out" / "validation.csv").read_text().splitlines()
    assert len(rows) == 3


# -- model pieces the validation added ----------------------------------------------------------

def test_colocation_factor_is_processor_sharing():
    from sim.costs.colocation import colocation_factor, shared_device
    from tests.conftest import make_gpu

    assert colocation_factor(2, 1) == 1.0  # one rank, both cores
    assert colocation_factor(2, 2) == 2.0  # two ranks, one core each
    assert colocation_factor(2, 4) == 4.0  # four ranks, half a core each
    assert colocation_factor(8, 2) == 2.0
    gpu = make_gpu(tflops=1.0, mem_GBps=10.0)
    shared = shared_device(gpu, cores=2, ranks=4)
    assert shared.memory_bandwidth_Bps == pytest.approx(gpu.memory_bandwidth_Bps / 4)
    assert shared.peak_flops["fp32"] == pytest.approx(gpu.peak_flops["fp32"] / 4)
    assert shared_device(gpu, cores=2, ranks=1) is gpu


def test_fp16_reduce_cost_from_same_wire_bytes():
    from real.microbench import reduce_cost_ns

    n, e = 2, 2**20
    rows = [{"dtype": "fp16", "elems": e, "time_s": 0.012}, {"dtype": "fp32_half", "elems": e, "time_s": 0.002},
            {"dtype": "bf16", "elems": e, "time_s": 0.001}]
    ns = reduce_cost_ns(rows, n)
    assert ns["fp16"] == pytest.approx(0.010 / (0.5 * e) * 1e9)
    assert ns["bf16"] == 0.0  # faster than fp32 at the same bytes: no extra cost, never negative


def test_coarse_calibration_splits_a_block_by_flops(tmp_path):
    from real.calibrated_links import calibrated_catalog
    from sim.calibration import load_calibration
    from validation.config import Point
    from validation.points import sim_scenario

    cal_dir = tmp_path / "cal"
    _calibration(cal_dir)
    device = yaml.safe_load((cal_dir / "device.yaml").read_text())
    device["workloads"]["small_transformer"] = {8: {"layers": ["0_embedding", "1_block", "2_block", "3_lmhead"],
                                                    "colocated": {2: {"fwd_s": [1e-3, 4e-3, 4e-3, 1e-3],
                                                                      "bwd_s": [2e-3, 8e-3, 8e-3, 2e-3]}}}}
    (cal_dir / "device.yaml").write_text(yaml.safe_dump(device))
    cal = load_calibration(cal_dir)
    point = Point(group="t", model="small_transformer", batch_size=8, ranks=2, link="loopback", strategy="ps_sync",
                  overlap=True, bucket_mib=25.0, codec="fp32", microbatches=4)
    layers = sim_scenario(point, cal, calibrated_catalog(cal)).workload.layers
    block1 = [x for x in layers if x.name.startswith("1.")]
    assert sum(x.fwd_time_s for x in block1) == pytest.approx(4e-3)
    assert sum(x.bwd_time_s for x in layers) == pytest.approx(20e-3)
    flops = {x.name: x.fwd_flops for x in block1}
    qkv, fc = next(x for x in block1 if x.name == "1.attn.qkv"), next(x for x in block1 if x.name == "1.fc")
    assert qkv.fwd_time_s / fc.fwd_time_s == pytest.approx(flops["1.attn.qkv"] / flops["1.fc"])


def test_two_regime_fit_recovers_alpha_and_bandwidth_despite_noisy_small_sizes():
    from sim.fit import two_regime_fit

    alpha, bw = 200e-6, 50e6
    sizes = [1024 * 4**k for k in range(8)]
    noise = [3.0, 0.5, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0]  # small sizes off by factors, as on shared cores
    times = [alpha * f + s / bw for s, f in zip(sizes, noise, strict=True)]
    a, b = two_regime_fit(sizes, times)
    assert b == pytest.approx(bw, rel=0.01)
    assert a == pytest.approx(2 * alpha, rel=0.3)  # the median of the three small sizes' alphas
    assert two_regime_fit(sizes[:3], times[:3]) is None  # no large sizes: no bandwidth


# -- rounds: every number the median of separate launches -------------------------------------

def test_median_round_and_row_keep_the_middle_launch_and_list_all():
    from real.calibrate import median_round
    from validation.run import median_row

    rows = [{"iteration_time_s": 0.06, "id": "a"}, {"iteration_time_s": 0.17, "id": "slow"},
            {"iteration_time_s": 0.065, "id": "b"}]
    kept = median_row(rows)
    assert kept["id"] == "b" and kept["round_iteration_times_s"] == [0.06, 0.17, 0.065]
    assert median_row(rows[:2])["id"] == "a"  # an even count keeps the lower one
    step = median_round([{"total_s": 0.095}, {"total_s": 0.058}, {"total_s": 0.060}], "total_s")
    assert step["total_s"] == 0.060 and step["rounds_total_s"] == [0.095, 0.058, 0.060]
    with pytest.raises(ValueError):
        median_round([], "total_s")


def test_measure_all_runs_rounds_one_after_the_other_and_resumes(tmp_path, monkeypatch):
    import real.measure
    from validation.run import measure_all

    spec = {"out": str(tmp_path / "out"), "threshold": {"mape_percent": 10}, "measure": {"rounds": 3, "max_rounds": 3},
            "sweeps": [{"model": ["mlp", "small_cnn"], "ranks": 2}]}  # max_rounds 3: no re-measuring of spread points
    cfg = load_validation_config(_write(tmp_path, spec))
    assert cfg.rounds == 3
    times = iter([0.01, 0.02, 0.05, 0.02, 0.03, 0.03])
    monkeypatch.setattr(real.measure, "measure_point", lambda spec, **kw: {"iteration_time_s": next(times)})
    said: list[str] = []
    measured = measure_all(cfg, remeasure=True, progress=said.append)
    a, b = (p.id for p in cfg.points)
    assert said == [f"round {r}/3 [{i}/2] measuring {p}" for r in (1, 2, 3) for i, p in ((1, a), (2, b))]
    # a: 0.01, 0.05, 0.03 -> 0.03; b: 0.02, 0.02, 0.03 -> 0.02
    assert measured[a]["row"]["iteration_time_s"] == 0.03
    assert measured[a]["row"]["round_iteration_times_s"] == [0.01, 0.05, 0.03]
    assert measured[b]["row"]["iteration_time_s"] == 0.02 and len(measured[b]["rounds"]) == 3
    said.clear()
    measure_all(cfg, remeasure=False, progress=said.append)  # every round cached: nothing measured
    assert said == []


def test_step_profiles_before_each_round_feed_the_predictions(tmp_path, monkeypatch):
    """With measure.step_profiles, the whole step is profiled once before each round (not again
    on resume) and each (model, k) step predicted from is the median of those launches."""
    import real.calibrate
    import real.measure
    from sim.calibration import Calibration
    from validation.run import STEPS_FILE, measure_all, with_round_steps

    spec = {"out": str(tmp_path / "out"), "threshold": {"mape_percent": 10},
            "measure": {"rounds": 3, "step_profiles": True}, "calibration": {"models": ["mlp"], "colocated": [2]},
            "sweeps": [{"model": "mlp", "ranks": 2}]}
    cfg = load_validation_config(_write(tmp_path, spec))
    totals = iter([0.30e-3, 0.20e-3, 0.50e-3, 0.40e-3, 0.35e-3, 0.25e-3])
    calls: list[tuple[tuple[str, ...], tuple[int, ...]]] = []

    def fake_round(models, batches, colocated, **kw):
        calls.append((tuple(models), tuple(colocated)))
        return {m: {k: {"fwd_s": 0.0, "bwd_s": 0.0, "opt_s": 0.0, "total_s": next(totals)} for k in (1, *colocated)}
                for m in models}

    monkeypatch.setattr(real.calibrate, "profile_step_round", fake_round)
    monkeypatch.setattr(real.measure, "measure_point", lambda spec, **kw: {"iteration_time_s": 1e-3})
    said: list[str] = []
    measure_all(cfg, remeasure=True, progress=said.append)
    assert calls == [(("mlp",), (2,))] * 3
    assert [s.split(" measuring")[0] for s in said] == ["round 1/3 [1/1]", "round 2/3 [1/1]", "round 3/3 [1/1]"]
    rounds = json.loads((cfg.out / STEPS_FILE).read_text())["rounds"]
    assert [r["mlp"]["2"]["total_s"] for r in rounds] == [0.20e-3, 0.40e-3, 0.25e-3]
    measure_all(cfg, remeasure=False, progress=said.append)  # all rounds done: no profile, no point
    assert len(calls) == 3

    cal = Calibration(path=tmp_path, links={}, device={"workloads": {"mlp": {64: {"steps": {
        1: {"fwd_s": 0.0, "bwd_s": 0.0, "opt_s": 0.0, "total_s": 0.9e-3},
        2: {"fwd_s": 0.0, "bwd_s": 0.0, "opt_s": 0.0, "total_s": 0.6e-3},
        4: {"fwd_s": 0.0, "bwd_s": 0.0, "opt_s": 0.0, "total_s": 0.7e-3}}}}}})
    steps = with_round_steps(cal, rounds).device["workloads"]["mlp"][64]["steps"]
    assert steps[1]["total_s"] == 0.35e-3 and steps[1]["rounds_total_s"] == [0.30e-3, 0.50e-3, 0.35e-3]
    assert steps[2]["total_s"] == 0.25e-3 and steps[2]["calibration_total_s"] == 0.6e-3
    assert steps[4]["total_s"] == 0.7e-3  # never profiled in the rounds: the calibration's value
    assert cal.device["workloads"]["mlp"][64]["steps"][2]["total_s"] == 0.6e-3  # the loaded calibration untouched
    assert with_round_steps(cal, []) is cal


@pytest.mark.parametrize(("patch", "field"), [
    ({"measure": {"rounds": 0}}, "measure.rounds"),
    ({"calibration": {"step_rounds": 0}}, "calibration.step_rounds"),
    ({"measure": {"step_profiles": "yes"}}, "measure.step_profiles"),
])
def test_round_settings_are_checked(tmp_path, patch, field):
    with pytest.raises(ConfigError) as err:
        load_validation_config(_write(tmp_path, {**BASE, **patch}))
    assert field in err.value.field


def test_median_per_size_takes_each_size_from_its_median_launch():
    from real.calibrate import median_per_size

    def launch(t1k, t1m):
        return [{"collective": "allreduce", "size_bytes": 1024, "time_s": t1k},
                {"collective": "allreduce", "size_bytes": 2**20, "time_s": t1m},
                {"collective": "alltoall", "size_bytes": 1024, "error": "unsupported"}]

    rows = median_per_size([launch(1.5e-3, 3.0e-3), launch(0.45e-3, 3.2e-3), launch(0.6e-3, 2.9e-3)])
    by = {(r["collective"], r["size_bytes"]): r for r in rows}
    assert by[("allreduce", 1024)]["time_s"] == 0.6e-3
    assert by[("allreduce", 2**20)]["time_s"] == 3.0e-3
    assert by[("allreduce", 1024)]["rounds_time_s"] == [1.5e-3, 0.45e-3, 0.6e-3]
    assert "error" in by[("alltoall", 1024)] and len(rows) == 3


def test_pipeline_micro_batch_profiles_keep_the_median_launch_per_k(monkeypatch):
    import real.calibrate
    from real.pipeline_bench import profile_micro_batches

    sums = {1: iter([0.030, 0.010, 0.012]), 2: iter([0.020, 0.090, 0.025])}  # one slow launch each
    calls: list[int] = []

    def fake_profile(models, batches, k, **kw):
        calls.append(k)
        t = next(sums[k])
        return [{"fwd_s": [t / 4, t / 4], "bwd_s": [t / 2, 0.0], "k": k}]

    totals = iter([0.007, 0.006, 0.013])
    step_calls: list[int] = []

    def fake_steps(models, batches, k, **kw):
        step_calls.append(k)
        return {models[0]: {"total_s": next(totals), "threads": 1}}

    monkeypatch.setattr(real.calibrate, "profile_colocated", fake_profile)
    monkeypatch.setattr(real.calibrate, "profile_steps", fake_steps)
    monkeypatch.setattr(real.calibrate, "_layer_entry", lambda model, profiles: dict(profiles))
    out = profile_micro_batches({"small_cnn": 8}, (2,), rounds=3, progress=lambda _: None)
    kept = out["small_cnn"][8]
    assert calls == [1, 1, 1, 2, 2, 2]
    assert kept[1]["layers_s"] == pytest.approx(0.012) and kept[2]["layers_s"] == pytest.approx(0.025)
    assert kept[2]["rounds_layers_s"] == pytest.approx([0.020, 0.090, 0.025])
    # whole steps only with co-located ranks (one thread each, as a stage): the median launch
    assert step_calls == [2, 2, 2]
    assert kept["steps"] == {2: {"total_s": 0.007, "threads": 1, "rounds_total_s": [0.007, 0.006, 0.013]}}


def test_framework_overhead_is_the_residual_of_the_models_own_link(tmp_path):
    """DDP step - local step - the simulator's allreduce of that gradient on the calibrated
    loopback link; never negative; one rank subtracts nothing (it sends nothing)."""
    from real.calibrated_links import calibrated_catalog
    from sim.calibration import load_calibration
    from sim.cluster import Cluster
    from validation.calib import framework_overhead_s, predict_collective_s

    cal_dir = tmp_path / "cal"
    _calibration(cal_dir)
    (cal_dir / "framework.yaml").write_text(yaml.safe_dump({"world_sizes": {
        1: {"ddp_step_s": 0.6e-3, "local_step_s": 0.4e-3, "gradient_bytes": 1088},
        2: {"ddp_step_s": 2.7e-3, "local_step_s": 0.8e-3, "gradient_bytes": 1088},
        4: {"ddp_step_s": 0.9e-3, "local_step_s": 0.8e-3, "gradient_bytes": 1088}}}))
    cal = load_calibration(cal_dir)
    catalog = calibrated_catalog(cal)
    link = catalog.link("gloo_loopback_n2")
    wire_s = predict_collective_s("allreduce", 1088, Cluster(nodes=1, gpus_per_node=2, gpu=catalog.gpu("cpu_local"),
                                                             intra_link=link, inter_link=link))
    assert wire_s > 0
    assert framework_overhead_s(cal, 2) == pytest.approx(2.7e-3 - 0.8e-3 - wire_s)
    assert framework_overhead_s(cal, 1) == pytest.approx(0.2e-3)
    assert framework_overhead_s(cal, 4) == 0.0  # 0.1 ms left, less than the 4-rank allreduce: clipped


@pytest.mark.parametrize(("patch", "field"), [
    ({"calibration": {"stall_ranks": [0]}}, "calibration.stall_ranks[0]"),
    ({"calibration": {"stall_bursts_ms": [1, -4]}}, "calibration.stall_bursts_ms[1]"),
])
def test_stall_settings_are_checked(tmp_path, patch, field):
    with pytest.raises(ConfigError) as err:
        load_validation_config(_write(tmp_path, {**BASE, **patch}))
    assert field in err.value.field


def test_stall_is_in_situ_minus_back_to_back_per_size_and_clipped():
    from real.stall_bench import STALL_SIZES_BYTES, stall_entry

    small, big = STALL_SIZES_BYTES
    hot = [{small: 0.3e-3, big: 0.9e-3}, {small: 0.4e-3, big: 5.0e-3}, {small: 0.35e-3, big: 1.0e-3}]  # one slow launch
    in_situ = {1.0: [{small: 0.6e-3, big: 1.4e-3}] * 3, 16.0: [{small: 2.35e-3, big: 3.0e-3}] * 3,
               0.25: [{small: 0.2e-3, big: 0.8e-3}] * 3}  # faster than back to back: no stall, not negative
    entry = stall_entry(hot, in_situ)
    assert entry["back_to_back_s"] == {small: pytest.approx(0.35e-3), big: pytest.approx(1.0e-3)}
    assert entry["stall_s"][1.0] == pytest.approx(((0.6 - 0.35) + (1.4 - 1.0)) / 2 * 1e-3)
    assert entry["stall_s"][16.0] == pytest.approx(((2.35 - 0.35) + (3.0 - 1.0)) / 2 * 1e-3)
    assert entry["stall_s"][0.25] == 0.0
    assert list(entry["stall_s"]) == [0.25, 1.0, 16.0]
    by_size = entry["stall_by_size_s"]
    assert by_size[small][1.0] == pytest.approx(0.25e-3) and by_size[big][1.0] == pytest.approx(0.4e-3)
    assert by_size[small][0.25] == 0.0 and by_size[big][0.25] == 0.0
    assert entry["stall_s"][16.0] == pytest.approx((by_size[small][16.0] + by_size[big][16.0]) / 2)


def _stall_file(cal_dir: Path, *, with_by_size: bool = True) -> None:
    """2 ranks: back to back 1 KiB 1.4 ms, 1 MiB 1.6 ms; after 0.25 ms of compute 1 KiB no longer
    (1.39 ms), 1 MiB +0.7 ms; after 16 ms both +2.5 ms (the shape of 2026-11-25's calibration)."""
    from real.stall_bench import stall_entry

    small, big = 1024, 1024 * 1024
    hot = [{small: 1.4e-3, big: 1.6e-3}]
    in_situ = {0.25: [{small: 1.39e-3, big: 2.3e-3}], 16.0: [{small: 3.9e-3, big: 4.1e-3}]}
    entry = stall_entry(hot, in_situ)
    if not with_by_size:  # a file written before stall_by_size_s
        entry.pop("stall_by_size_s")
    cal_dir.mkdir(parents=True, exist_ok=True)
    (cal_dir / "comm_stall.yaml").write_text(yaml.safe_dump({"world_sizes": {2: entry}}))


@pytest.mark.parametrize("with_by_size", [True, False])
@given(size=st.floats(1.0, 1e9), burst_ms=st.floats(0.0, 40.0))
def test_stall_depends_on_the_first_collective_size_in_log_bytes(tmp_path_factory, with_by_size, size, burst_ms):
    """stall(b, S): per measured size linear in b, between the sizes linear in log S, held
    outside them; files without per-size stalls give the same (from their medians); without a
    size, the mean of the sizes."""
    import math

    from real.stall_bench import stall_for

    cal_dir = tmp_path_factory.mktemp("cal")
    _stall_file(cal_dir, with_by_size=with_by_size)
    burst_s = burst_ms / 1e3

    def by_hand(at_quarter_ms: float, at_16_ms: float) -> float:  # 0 at b = 0, linear between, held after 16 ms
        if burst_ms <= 0.25:
            return at_quarter_ms * burst_ms / 0.25
        if burst_ms >= 16.0:
            return at_16_ms
        return at_quarter_ms + (at_16_ms - at_quarter_ms) * (burst_ms - 0.25) / (16.0 - 0.25)

    # the file's stalls (in situ - back to back, clipped at 0): 1 KiB 0 and 2.5 ms, 1 MiB 0.7 and 2.5 ms
    lo, hi = by_hand(0.0, 2.5e-3), by_hand(0.7e-3, 2.5e-3)
    share = min(1.0, max(0.0, (math.log(size) - math.log(1024)) / (math.log(2**20) - math.log(1024))))
    assert stall_for(cal_dir, 2, burst_s, size) == pytest.approx(lo + share * (hi - lo), abs=1e-12)
    assert stall_for(cal_dir, 2, burst_s) == pytest.approx((lo + hi) / 2, abs=1e-12)
    assert stall_for(cal_dir, 1, burst_s, size) == 0.0
    assert min(lo, hi) - 1e-12 <= stall_for(cal_dir, 4, burst_s, size) <= max(lo, hi) + 1e-12  # nearest n: 2


@given(st.floats(0, 0.1))
def test_stall_interpolation_is_linear_from_zero_and_held_after_the_last_burst(burst_s):
    from real.stall_bench import interpolate_stall_s

    stalls = {1.0: 0.5e-3, 4.0: 2.0e-3, 16.0: 3.0e-3}
    got = interpolate_stall_s(stalls, burst_s)
    assert 0.0 <= got <= 3.0e-3
    if burst_s <= 1e-3:
        assert got == pytest.approx(0.5 * burst_s)
    elif burst_s <= 4e-3:
        assert got == pytest.approx(0.5e-3 + 1.5e-3 * (burst_s - 1e-3) / 3e-3)
    elif burst_s >= 16e-3:
        assert got == pytest.approx(3.0e-3)


def test_stall_enters_ddp_and_ps_points_once_per_step_and_not_one_rank(tmp_path):
    """The calibrated stall (nearest world size, at the step's predicted compute) is one
    parameter-free step of the iteration; one rank and a missing file add nothing."""
    from real.calibrated_links import calibrated_catalog
    from sim.calibration import load_calibration
    from validation.config import Point
    from validation.points import sim_scenario as calibrated_scenario

    cal_dir = tmp_path / "cal"
    _calibration(cal_dir)
    cal = load_calibration(cal_dir)
    catalog = calibrated_catalog(cal)
    base = dict(model="mlp", batch_size=64, link="loopback", overlap=True, bucket_mib=25.0, codec="fp32",
                microbatches=4)

    def stall_layers(point):
        return [layer for layer in calibrated_scenario(point, cal, catalog).workload.layers if layer.name == "comm_stall"]

    assert stall_layers(Point(group="s", ranks=2, strategy="ddp", **base)) == []  # no comm_stall.yaml yet
    (cal_dir / "comm_stall.yaml").write_text(yaml.safe_dump({"world_sizes": {2: {"stall_s": {1.0: 1e-3, 100.0: 4e-3}}}}))
    cal = load_calibration(cal_dir)
    for strategy in ("ddp", "ps_sync"):
        point = Point(group="s", ranks=2, strategy=strategy, **base)
        (step,) = stall_layers(point)
        layers = [x for x in calibrated_scenario(point, cal, catalog).workload.layers if x.kind != "overhead"]
        compute_s = sum(x.fwd_time_s + x.bwd_time_s for x in layers)
        assert step.fwd_time_s == pytest.approx(1e-3 + 3e-3 * (compute_s - 1e-3) / 99e-3)
        assert step.bwd_time_s == 0 and step.param_count == 0
    assert stall_layers(Point(group="s", ranks=1, strategy="ddp", **base)) == []


@pytest.mark.parametrize(("strategy", "bucket_mib", "codec", "expected_bytes"), [
    ("ddp", 25.0, "fp32", None),                   # one bucket: the whole gradient
    ("ddp", 0.001, "fp32", "first"),               # the first (last layers') 1 KiB bucket of several
    ("ddp", 25.0, "fp16", 0.5),                    # half the bytes on the wire
    ("ddp", 25.0, "fp8", 0.25 + 4 / 4),            # a byte per element plus its scale
    ("ps_sync", 0.25, "fp32", None),               # the server takes the flat gradient at once
])
def test_stall_is_taken_at_the_first_collectives_wire_bytes(tmp_path, strategy, bucket_mib, codec, expected_bytes):
    from real.calibrated_links import calibrated_catalog
    from real.stall_bench import stall_for
    from sim.calibration import load_calibration
    from sim.engine.plan import build_plan
    from validation.config import Point
    from validation.points import first_collective_bytes, sim_scenario

    cal_dir = tmp_path / "cal"
    _calibration(cal_dir)
    _stall_file(cal_dir)
    cal = load_calibration(cal_dir)
    catalog = calibrated_catalog(cal)
    point = Point(group="s", model="mlp", batch_size=64, ranks=2, link="loopback", strategy=strategy, overlap=True,
                  bucket_mib=bucket_mib, codec=codec, microbatches=4)
    scenario = sim_scenario(point, cal, catalog)
    layers = [x for x in scenario.workload.layers if x.kind != "overhead"]
    grad_bytes = 4.0 * sum(x.param_count for x in layers)
    buckets = build_plan(scenario).buckets
    got = first_collective_bytes(scenario)
    if expected_bytes is None:
        assert got == pytest.approx(grad_bytes)
    elif expected_bytes == "first":
        assert len(buckets) > 1 and got == pytest.approx(buckets[0].n_bytes) and got < grad_bytes
    elif codec == "fp8":
        assert got == pytest.approx(grad_bytes / 4)  # scales are per bucket, not per element
    else:
        assert got == pytest.approx(grad_bytes * expected_bytes)
    (step,) = [x for x in scenario.workload.layers if x.name == "comm_stall"]
    compute_s = sum(x.fwd_time_s + x.bwd_time_s for x in layers)
    assert step.fwd_time_s == pytest.approx(stall_for(cal_dir, 2, compute_s, got))


@pytest.mark.parametrize(("link", "bytes_", "iteration_s", "carried"), [
    ("100mbit", 14_616, 2.8e-3, True),      # the mlp on 4 ranks: 14.6 KB per 2.8 ms step, bucket 133 KB
    ("100mbit", 4_531_440, 0.4, False),     # small_cnn on 4 ranks: 4.5 MB, far beyond the bucket
    ("100mbit", 100_000, 2.8e-3, False),    # within the bucket, but it refills only 35 KB per step
    ("10gbit", 1_510_480, 29e-3, True),     # 10 Gbit/s: a 2 ms (2.5 MB) bucket
    ("10gbit", 5_345_280, 30e-3, False),
])
def test_the_emulators_bucket_carries_an_iteration_only_when_it_fits_and_refills(link, bytes_, iteration_s, carried):
    from validation.calib import bucket_carries

    assert bucket_carries(link, bytes_, iteration_s) is carried


def test_points_on_a_bucket_carried_link_are_predicted_on_the_unshaped_fit(tmp_path):
    from real.calibrated_links import calibrated_catalog
    from sim.calibration import load_calibration
    from validation.config import Point
    from validation.points import predict

    cal_dir = tmp_path / "cal"
    _calibration_with_fit(cal_dir, link="100mbit", link_bandwidth_GBps=0.0125)
    cal = load_calibration(cal_dir)
    catalog = calibrated_catalog(cal)
    base = dict(group="s", model="mlp", batch_size=64, ranks=2, strategy="ddp", overlap=True, bucket_mib=25.0,
                codec="fp32", microbatches=4)
    shaped, unshaped = predict(Point(link="100mbit", **base), cal, catalog), predict(Point(link="loopback", **base), cal, catalog)
    assert shaped["intra_link"] == unshaped["intra_link"] == "gloo_loopback_n2"
    assert shaped["iteration_time_s"] == pytest.approx(unshaped["iteration_time_s"])


@given(st.lists(st.floats(1e-4, 10.0), min_size=2, max_size=7), st.floats(0.1, 10.0))
def test_round_spread_is_range_over_median_and_scale_free(times, scale):
    import statistics

    got = round_spread(times)
    assert got == pytest.approx((max(times) - min(times)) / statistics.median(times))
    assert got >= 0
    assert round_spread([t * scale for t in times]) == pytest.approx(got)


def test_round_spread_needs_two_launches():
    assert math.isnan(round_spread([]))
    assert math.isnan(round_spread([0.02]))
    assert math.isnan(round_spread([0.02, float("nan")]))


def test_repeatability_reports_median_p90_largest_and_the_worst_points_own_spread():
    rows = [{"point": f"p{i}", "rel_error": 0.01 * i, "round_spread": 0.01 * i} for i in range(1, 11)]
    rows[2]["rel_error"] = -0.5  # p3: the worst point, its own launches 3% apart
    rows.append({"point": "skipped", "rel_error": math.nan, "round_spread": 0.9})  # not compared: not counted
    text = repeatability_text(rows)
    assert "5.5% (median over 10 points)" in text
    assert "9.0% (90th percentile)" in text
    assert "10.0% at most (p10)" in text
    assert "the worst point's own launches spread 3.0%" in text
    assert repeatability_text([{"point": "a", "rel_error": 0.1, "round_spread": math.nan}]) == ""
