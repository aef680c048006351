"""Multi-iteration experiment points (``iterations:``): rows from sim.run.simulate_run, plots, report."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.config import expand, experiment_from_dict
from experiments.plots import plot_results
from experiments.points import point_id, staleness_quantile
from experiments.report import render_markdown
from experiments.runner import run_experiment
from sim.config import scenario_from_dict
from sim.errors import ConfigError
from sim.run import simulate_run

LAYERS = [
    {"name": "conv", "param_count": 300_000, "fwd_flops": 6.0e8, "activation_elems": 200_000},
    {"name": "fc", "param_count": 2_000_000, "fwd_flops": 4.0e7, "activation_elems": 1000},
]
RAW = {
    "name": "runs",
    "workload": {"model": "mini", "batch_size": 16, "layers": LAYERS},
    "cluster": {"gpus": 4, "gpus_per_node": 1, "gpu": "v100", "inter_link": "ib_edr"},
    "strategy": {"collective": "ps", "ps_servers": 2},
    "heterogeneity": {"slow_nodes": 1},
    "faults": {"fail_at_s": 0.05, "restart_s": 0.1},
    "iterations": 20,
    "sweep": {
        "strategy.ps_mode": ["sync", "async"],
        "heterogeneity.jitter_cv": [0.0, 0.4],
        "faults.fail_rank": [None, 1],
    },
}


def experiment(**changes):
    raw = copy.deepcopy(RAW)
    raw.update(changes)
    return experiment_from_dict(raw)


def quiet(*_):
    return None


def test_rows_are_simulate_run_metrics_with_staleness_quantiles(tmp_path):
    exp = experiment()
    summary = run_experiment(exp, tmp_path / "r", jobs=1, progress=False, log=quiet)
    assert summary.rows == 8
    df = __import__("pandas").read_csv(tmp_path / "r" / "results.csv")
    points, _ = expand(exp)
    for point in points:
        row = df[df["point_id"] == point_id(point, exp)].iloc[0]
        result = simulate_run(scenario_from_dict(point.spec), 20)
        assert row["mode"] == result.mode
        assert row["samples_per_s"] == pytest.approx(result.samples_per_s, rel=1e-9)
        assert row["effective_samples_per_s"] == pytest.approx(result.effective_samples_per_s, rel=1e-9)
        assert row["lost_work_s"] == pytest.approx(result.lost_work_s, abs=1e-12)
        assert row["restarts"] == result.restarts
        assert row["time_per_iteration_s"] == pytest.approx(result.wall_time_s / 20, rel=1e-9)
        assert row["staleness_p50"] <= row["staleness_p95"] <= row["staleness_max"]
    sync = df[df["mode"] == "sync"]
    assert (sync["samples_per_s"] == sync["effective_samples_per_s"]).all()  # fresh updates
    failed = df[df["faults.fail_rank"] == 1]
    assert (failed[failed["mode"] == "sync"]["restarts"] == 1).all()  # the failure falls inside the run
    assert (failed[failed["mode"] == "async"]["restarts"] == 0).all()  # async carries on without it
    assert (df["lost_work_s"] >= 0).all()


def test_iterations_is_part_of_the_point_id_and_resume_recomputes(tmp_path):
    a, b = experiment(), experiment(iterations=21)
    pa, _ = expand(a)
    assert point_id(pa[0], a) != point_id(pa[0], b)
    run_experiment(a, tmp_path / "r", jobs=1, progress=False, log=quiet)
    again = run_experiment(b, tmp_path / "r", jobs=1, progress=False, log=quiet)
    assert again.reused == 0 and again.computed == 8


def test_one_iteration_points_keep_their_ids():
    # one iteration has no stragglers or failures: those sections are refused without iterations
    raw = {k: v for k, v in copy.deepcopy(RAW).items() if k not in ("iterations", "heterogeneity", "faults")}
    raw["sweep"] = {"heterogeneity.jitter_cv": [0.0]}
    plain = experiment_from_dict(raw)
    with_iterations = experiment_from_dict({**raw, "iterations": 5})
    point = expand(plain)[0][0]
    assert plain.iterations is None
    assert point_id(point, plain) != point_id(point, with_iterations)
    assert point_id(point, plain) == point_id(point, experiment_from_dict(raw))


@pytest.mark.parametrize(("changes", "field"), [
    ({"iterations": 0}, "iterations"),
    ({"iterations": 2.5}, "iterations"),
    ({"iterations": 10, "backend": "real"}, "iterations"),
])
def test_bad_iterations_are_one_line_errors(changes, field):
    with pytest.raises(ConfigError) as err:
        experiment(**changes)
    assert err.value.field == field


def test_a_layout_that_does_not_fit_is_skipped_with_the_memory_reason():
    raw = {"name": "mem", "workload": {"model": "gpt2_xl", "batch_size": 8},
           "cluster": {"gpus": 8, "gpus_per_node": 8, "gpu": "v100", "intra_link": "nvlink2", "inter_link": "ib_edr"},
           "strategy": {"precision": "fp16"},
           "sweep": {"case": [{"label": "dp", "strategy.kind": "data_parallel"},
                              {"label": "tp8", "strategy.kind": "tensor", "strategy.tp": 8}]}}
    points, skipped = expand(experiment_from_dict(raw))
    assert [p.axes["case"] for p in points] == ["tp8"]
    assert len(skipped) == 1 and skipped[0].axes["case"] == "dp" and "memory per rank" in skipped[0].reason


def test_plots_and_report_of_a_run_experiment(tmp_path):
    out = tmp_path / "r"
    run_experiment(experiment(), out, jobs=1, progress=False, log=quiet)
    written = {p.name for p in plot_results(out)}
    assert {"throughput.png", "staleness.png"} <= written
    text = render_markdown(out)
    assert "effective samples/s" in text and "plots/throughput.png" in text
    assert "Scaling efficiency" not in text.split("## Config")[0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 20), min_size=1, max_size=12), st.sampled_from([0.05, 0.5, 0.95, 1.0]))
def test_staleness_quantile_is_numpys_inverted_cdf(histogram, q):
    values = np.repeat(np.arange(len(histogram)), histogram)
    expected = float(np.quantile(values, q, method="inverted_cdf")) if len(values) else 0.0
    assert staleness_quantile(tuple(histogram), q) == expected
