"""'scalebench calibrate --from-runs': the scenario's terms fitted to a user's own small runs, only
those the runs identify, written as a calibration file that simulate, run and plan load."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from scalebench.cli import main
from sim.catalog import builtin_catalog, load_catalog_file
from sim.config import scenario_from_dict
from sim.costs.compute import layer_times_s, optimizer_step_time_s
from sim.errors import ConfigError
from sim.runs_fit import ScenarioModel, Theta, fit_runs
from sim.runs_io import Run, read_runs
from sim.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
SPEC = {"workload": {"model": "vgg16", "batch_size": 32},
        "cluster": {"gpus_per_node": 4, "gpu": "v100", "intra_link": "pcie3", "inter_link": "tcp_10gbe"},
        "strategy": {"precision": "fp32"}}
"""VGG-16 over 10 GbE: its gradients (528 MB) are exposed, so every network term shows."""


def _runs_from_the_model(theta: Theta, configs, sd_fraction=0.001):
    model = ScenarioModel(SPEC)
    out = []
    for gpus, gpn in configs:
        t = model.result((gpus, gpn), theta).iteration_time_s
        out.append(Run(gpus, gpn, t, sd_fraction * t, where=f"made: {gpus} GPUs"))
    return out


def test_compute_scale_is_the_one_gpu_step_over_the_roofline():
    """By hand: one GPU runs layers (roofline) + the optimizer step; measured 0.3 s means
    c = 0.3 / (sum of layers + optimizer) since both scale with the GPU's compute_scale."""
    scenario = scenario_from_dict({**SPEC, "cluster": {**SPEC["cluster"], "gpus": 1, "gpus_per_node": 1}})
    w, gpu = scenario.workload, scenario.cluster.gpu
    step = sum(f + b for f, b in layer_times_s(w, gpu, "fp32", 4)) + optimizer_step_time_s(w.param_count, 4, w.optimizer, gpu)
    cal = fit_runs(SPEC, [Run(1, 1, 0.3, 0.003, where="one")])
    assert cal.theta.compute_scale == pytest.approx(0.3 / step, rel=1e-6)


def test_terms_are_recovered_from_runs_the_model_made():
    """Runs made by the model with known terms: compute and the intra-node rate come back exactly;
    across nodes the overhead and the network rate trade off within the runs' 0.1 %, so what is
    checked there is the prediction at 64 GPUs (8 nodes, beyond the runs) against the truth's."""
    truth = Theta(compute_scale=1.3, intra_bandwidth_factor=0.2, inter_bandwidth_factor=0.5,
                  inter_latency_s=0.0, inter_node_overhead_s=0.015)
    runs = _runs_from_the_model(truth, [(1, 1), (4, 4), (8, 4), (16, 4)])  # two node counts: no latency term
    cal = fit_runs(SPEC, runs)
    terms = {t.name: t for t in cal.terms}
    assert terms["compute_scale"].value == pytest.approx(1.3, rel=1e-3)
    assert terms["intra_bandwidth_factor"].value == pytest.approx(0.2, rel=0.02)  # exposed: slow enough to show
    assert terms["inter_bandwidth_factor"].identified and terms["inter_bandwidth_factor"].value == pytest.approx(0.5, rel=0.05)
    assert terms["inter_node_overhead_ms"].identified and not terms["inter_latency_us"].identified
    for r in cal.results:
        assert r.fit_s == pytest.approx(r.run.iteration_s, rel=0.005)
    model = ScenarioModel(SPEC)
    assert model.result((64, 4), cal.theta).iteration_time_s == pytest.approx(
        model.result((64, 4), truth).iteration_time_s, rel=0.01)


def test_what_the_runs_cannot_identify_keeps_the_catalog_and_says_why():
    cal = fit_runs(SPEC, _runs_from_the_model(Theta(compute_scale=1.2), [(1, 1)]))
    terms = {t.name: t for t in cal.terms}
    assert terms["compute_scale"].identified
    for name in ("intra_bandwidth_factor", "inter_bandwidth_factor", "inter_latency_us", "inter_node_overhead_ms",
                 "overlap"):
        assert not terms[name].identified and terms[name].note
    assert "no run on one node with several GPUs" in terms["intra_bandwidth_factor"].note
    assert "no run on two or more nodes" in terms["inter_node_overhead_ms"].note
    assert cal.catalog_section() == {"gpus": {"v100": {"base": "v100", "compute_scale": pytest.approx(1.2, rel=1e-4),
                                                       "source": cal.catalog_section()["gpus"]["v100"]["source"]}},
                                     "calibration": {"workload": "vgg16", "source": cal.catalog_section()["calibration"]["source"]}}


def test_one_node_count_fits_the_overhead_and_a_noisy_run_moves_it_less():
    """A single 2-node run identifies only the per-iteration overhead; MAP with the 5 % prior: the
    same 30 ms deficit measured to +-1 % moves it nearly all the way, to +-20 % hardly."""
    model = ScenarioModel(SPEC)
    t8 = model.result((8, 4), Theta()).iteration_time_s + 0.030
    t1 = model.result((1, 1), Theta()).iteration_time_s
    exact = fit_runs(SPEC, [Run(1, 1, t1, 1e-4 * t1), Run(8, 4, t8, 0.01 * t8)])
    noisy = fit_runs(SPEC, [Run(1, 1, t1, 1e-4 * t1), Run(8, 4, t8, 0.20 * t8)])
    by = {t.name: t for t in exact.terms}
    assert not by["inter_bandwidth_factor"].identified and "two node counts" in by["inter_bandwidth_factor"].note
    prior = 0.05 * model.result((8, 4), Theta()).iteration_time_s
    # closed form of the MAP for a term entering linearly: d x prior^2 / (prior^2 + sd^2)
    for cal, sd in ((exact, 0.01 * t8), (noisy, 0.20 * t8)):
        expected = 0.030 * prior**2 / (prior**2 + sd**2)
        assert cal.theta.inter_node_overhead_s == pytest.approx(expected, rel=0.02)


def _write_inputs(tmp_path: Path, runs: list[Run]) -> tuple[Path, Path]:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(SPEC))
    csv_path = tmp_path / "runs.csv"
    lines = ["gpus,gpus_per_node,iteration_s,sd_s"] + [f"{r.gpus},{r.gpus_per_node},{r.iteration_s!r},{r.sd_s!r}"
                                                        for r in runs]
    csv_path.write_text("\n".join(lines) + "\n")
    return scenario, csv_path


def test_the_calibration_file_is_what_simulate_run_and_plan_load(tmp_path, capsys):
    truth = Theta(compute_scale=1.1, inter_bandwidth_factor=0.6, inter_node_overhead_s=0.02)
    scenario, csv_path = _write_inputs(tmp_path, _runs_from_the_model(truth, [(1, 1), (8, 4), (16, 4)]))
    out = tmp_path / "cal"
    assert main(["calibrate", "--from-runs", str(csv_path), "--config", str(scenario), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "compute_scale" in text and "not identified" in text and f"{out}/catalog.yaml" in text
    cal = fit_runs(SPEC, _runs_from_the_model(truth, [(1, 1), (8, 4), (16, 4)]))
    catalog = load_catalog_file(out / "catalog.yaml")
    for gpus in (16, 1024):
        assert main(["simulate", str(scenario), "--catalog", str(out / "catalog.yaml"), "--gpus", str(gpus),
                     "--format", "json"]) == 0
        row = json.loads(capsys.readouterr().out)[0]
        fitted = ScenarioModel(SPEC).result((gpus, 4), cal.theta).iteration_time_s
        assert row["iteration_time_s"] == pytest.approx(fitted, rel=1e-4)
    assert catalog.gpus["v100"].compute_scale == pytest.approx(cal.theta.compute_scale, rel=1e-5)
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(yaml.safe_dump({**SPEC, "name": "cal_exp", "sweep": {"cluster.gpus": [16]}}))
    assert main(["run", str(experiment), "--catalog", str(out / "catalog.yaml"), "--results", str(tmp_path / "res"),
                 "--no-plot", "--no-progress"]) == 0
    import csv

    row = next(csv.DictReader((tmp_path / "res" / "cal_exp" / "results.csv").open()))
    assert float(row["iteration_time_s"]) == pytest.approx(ScenarioModel(SPEC).result((16, 4), cal.theta).iteration_time_s,
                                                           rel=1e-4)
    from sim.planner.request import plan_request_from_dict

    request = plan_request_from_dict({**SPEC, "cluster": {**SPEC["cluster"], "gpus": 16}}, catalog)
    assert request.strategy.inter_node_overhead_s == pytest.approx(cal.theta.inter_node_overhead_s, rel=1e-4)
    assert request.cluster.gpu.compute_scale == catalog.gpus["v100"].compute_scale


@pytest.mark.slow
def test_plan_with_a_calibration_checks_against_simulate(tmp_path, capsys):
    scenario, csv_path = _write_inputs(tmp_path, _runs_from_the_model(Theta(compute_scale=1.1, inter_node_overhead_s=0.02),
                                                                      [(1, 1), (8, 4)]))
    assert main(["calibrate", "--from-runs", str(csv_path), "--config", str(scenario), "--out", str(tmp_path / "c")]) == 0
    capsys.readouterr()
    assert main(["plan", "--model", "vgg16", "--batch-size", "32", "--gpus", "16", "--gpus-per-node", "4", "--gpu",
                 "v100", "--intra-link", "pcie3", "--inter-link", "tcp_10gbe", "--catalog", str(tmp_path / "c" / "catalog.yaml"),
                 "--top", "1", "--max-tp", "1", "--max-pp", "1", "--backends", "nccl", "--codecs", "none",
                 "--out", str(tmp_path / "plan")]) == 0
    assert "gives the planner's figures" in capsys.readouterr().out


def test_machine_readable_terms(tmp_path, capsys):
    scenario, csv_path = _write_inputs(tmp_path, _runs_from_the_model(Theta(compute_scale=1.1), [(1, 1), (8, 4)]))
    assert main(["calibrate", "--from-runs", str(csv_path), "--config", str(scenario), "--out", str(tmp_path / "c"),
                 "--format", "json"]) == 0
    rows = {r["term"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["compute_scale"]["identified"] is True and rows["inter_latency_us"]["identified"] is False


def test_scalebench_real_rows_name_their_scenario():
    runs, hint = read_runs(ROOT / "results" / "real" / "small_cnn-ddp-2-25c92a7e.csv")
    assert [(r.gpus, r.gpus_per_node) for r in runs] == [(2, 2)]
    assert runs[0].iteration_s == pytest.approx(0.30185513524997987)
    assert runs[0].exposed_comm_s == 0.0  # the row's -0.109 s: a difference of two measurements
    assert runs[0].sd_s == pytest.approx(max(0.15421678724987942 / 1.349 / 20**0.5, 0.01 * 0.30185513524997987))
    assert hint["workload"] == {"model": "small_cnn", "batch_size": 32} and hint["cluster"]["gpu"] == "cpu"


def test_a_profiler_trace_is_a_run(tmp_path):
    """Two steps of 100 and 120 us; comm kernels (nccl) overlapping each other, compute kernels."""
    events = [
        {"name": "ProfilerStep#1", "ph": "X", "ts": 0, "dur": 100, "cat": "user_annotation"},
        {"name": "ProfilerStep#2", "ph": "X", "ts": 100, "dur": 120, "cat": "user_annotation"},
        {"name": "sgemm", "ph": "X", "ts": 0, "dur": 60, "cat": "kernel"},
        {"name": "ncclKernel_AllReduce_RING_LL_Sum_float", "ph": "X", "ts": 50, "dur": 30, "cat": "kernel"},
        {"name": "ncclDevKernel_AllReduce", "ph": "X", "ts": 70, "dur": 20, "cat": "kernel"},
        {"name": "sgemm", "ph": "X", "ts": 100, "dur": 80, "cat": "kernel"},
        {"name": "ncclKernel_AllReduce_RING_LL_Sum_float", "ph": "X", "ts": 170, "dur": 40, "cat": "kernel"},
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8}}))
    (run,), hint = read_runs(path, gpus_per_node=4)
    assert hint is None and (run.gpus, run.gpus_per_node) == (8, 4)
    assert run.iteration_s == pytest.approx(110e-6)  # (100 + 120) / 2
    assert run.comm_s == pytest.approx((40 + 40) / 2 * 1e-6)  # step 1: 50-90 (union); step 2: 170-210
    assert run.compute_s == pytest.approx((60 + 80) / 2 * 1e-6)


@pytest.mark.parametrize("text, field", [
    ("gpus,gpus_per_node,iteration_s\nx,4,0.5\n", "runs.csv:2: gpus"),
    ("gpus,gpus_per_node\n8,4\n", "runs.csv:2"),
    ("gpus,gpus_per_node,iteration_s\n6,4,0.5\n", "runs.csv:2: gpus"),
    ("gpus,gpus_per_node,samples_per_s\n8,4,-3\n", "runs.csv:2: samples_per_s"),
    ("gpus,gpus_per_node,iteration_s,sd_pct\n8,4,0.5,lots\n", "runs.csv:2: sd_pct"),
])
def test_bad_runs_are_one_line_errors(tmp_path, capsys, text, field):
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(SPEC))
    (tmp_path / "runs.csv").write_text(text)
    assert main(["calibrate", "--from-runs", str(tmp_path / "runs.csv"), "--config", str(scenario),
                 "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0] and "Traceback" not in err[0]


def test_runs_without_a_scenario_are_refused(tmp_path, capsys):
    (tmp_path / "runs.csv").write_text("gpus,gpus_per_node,iteration_s\n1,1,0.5\n")
    assert main(["calibrate", "--from-runs", str(tmp_path / "runs.csv"), "--out", str(tmp_path / "c")]) == 2
    assert "--config: got None" in capsys.readouterr().err


def test_a_gpu_entry_with_base_only_calibrates():
    catalog = builtin_catalog().extended({"gpus": {"v100": {"base": "v100", "compute_scale": 1.5}}})
    assert catalog.gpus["v100"].compute_scale == 1.5
    assert catalog.gpus["v100"].peak_flops == builtin_catalog().gpus["v100"].peak_flops
    with pytest.raises(ConfigError, match="memory_GiB.*only compute_scale"):
        builtin_catalog().extended({"gpus": {"v100": {"base": "v100", "memory_GiB": 8}}})


def test_the_inter_node_overhead_is_never_paid_by_one_gpu():
    scenario = scenario_from_dict({**SPEC, "cluster": {**SPEC["cluster"], "gpus": 8}})
    plain = simulate(scenario)
    paid = simulate(replace(scenario, strategy=replace(scenario.strategy, inter_node_overhead_s=0.05)))
    assert paid.iteration_time_s == pytest.approx(plain.iteration_time_s + 0.05)
    assert paid.baseline_time_s == plain.baseline_time_s
    one_node = scenario_from_dict({**SPEC, "cluster": {**SPEC["cluster"], "gpus": 4}})
    same = simulate(replace(one_node, strategy=replace(one_node.strategy, inter_node_overhead_s=0.05)))
    assert same.iteration_time_s == simulate(one_node).iteration_time_s
