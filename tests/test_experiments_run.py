"""scalebench run: rows, persistence, resume, interruption, executors, the real backend, plots and reports."""

from __future__ import annotations

import copy
import importlib.util
import sys

import pandas as pd
import pytest

import experiments.points
import experiments.runner
from experiments.config import experiment_from_dict
from experiments.runner import run_experiment
from experiments.store import ResultDir
from scalebench.cli import main
from sim.config import scenario_columns, scenario_from_dict
from sim.errors import ConfigError
from sim.simulate import simulate

LAYERS = [
    {"name": "conv", "param_count": 300_000, "fwd_flops": 6.0e8, "activation_elems": 200_000},
    {"name": "mid", "param_count": 6_000_000, "fwd_flops": 9.0e8, "activation_elems": 50_000},
    {"name": "fc", "param_count": 2_000_000, "fwd_flops": 4.0e6, "activation_elems": 1000},
]
RAW = {
    "name": "mini",
    "workload": {"model": "mini", "batch_size": 16, "layers": LAYERS},
    "cluster": {"gpus_per_node": 2, "gpu": "v100", "intra_link": "nvlink2"},
    "sweep": {"cluster.gpus": [1, 2, 3, 4, 8, 12], "cluster.inter_link": ["tcp_10gbe", "ib_edr"]},
}


def experiment(**changes):
    raw = copy.deepcopy(RAW)
    raw.update(changes)
    return experiment_from_dict(raw)


def quiet(*_):
    return None


def run(exp, out, **kw):
    return run_experiment(exp, out, progress=False, log=quiet, **{"jobs": 1, **kw})


def test_one_row_per_point_with_config_metrics_and_provenance(tmp_path):
    summary = run(experiment(), tmp_path / "mini")
    df = pd.read_csv(tmp_path / "mini" / "results.csv")
    assert summary.rows == len(df) == 10 and summary.computed == 10
    assert df["point_id"].is_unique and set(df["source"]) == {"sim"}
    first = df.iloc[-1]
    spec = ResultDir(tmp_path / "mini").read_point(first["point_id"])["spec"]
    scenario = scenario_from_dict(spec)
    expected = simulate(scenario)
    assert first["scaling_efficiency"] == pytest.approx(expected.scaling_efficiency, rel=1e-12)
    assert first["iteration_time_s"] == pytest.approx(expected.iteration_time_s, rel=1e-12)
    for column in [*scenario_columns(scenario), *expected.metrics(), "scalebench_version", "git_revision",
                   "cluster.gpus", "cluster.inter_link"]:
        assert column in df.columns
    assert not list((tmp_path / "mini").rglob("*.tmp"))


def test_resume_reuses_finished_points_and_force_recomputes(tmp_path):
    out = tmp_path / "mini"
    run(experiment(), out)
    again = run(experiment(), out)
    assert (again.reused, again.computed) == (10, 0)
    store = ResultDir(out)
    victim = sorted(store.finished_ids())[3]
    store.point_path(victim).unlink()
    third = run(experiment(), out)
    assert (third.reused, third.computed, third.rows) == (9, 1, 10)
    forced = run(experiment(), out, force=True)
    assert forced.computed == 10


def test_interrupt_keeps_finished_points_and_resume_completes(tmp_path, monkeypatch):
    out = tmp_path / "mini"
    real_chunk = experiments.runner.run_sim_chunk
    calls = {"n": 0}

    def flaky(payloads):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return real_chunk(payloads)

    monkeypatch.setattr(experiments.runner, "run_sim_chunk", flaky)
    with pytest.raises(KeyboardInterrupt):
        run(experiment(), out)
    store = ResultDir(out)
    assert len(store.finished_ids()) == 4
    assert len(pd.read_csv(store.csv_path)) == 4  # the CSV is rebuilt on the way out
    assert not list(out.rglob("*.tmp"))
    monkeypatch.setattr(experiments.runner, "run_sim_chunk", real_chunk)
    resumed = run(experiment(), out)
    assert (resumed.reused, resumed.computed) == (4, 6)


def test_process_pool_gives_the_same_rows_as_one_process(tmp_path):
    run(experiment(), tmp_path / "a")
    run(experiment(), tmp_path / "b", jobs=2)
    a = pd.read_csv(tmp_path / "a" / "results.csv").sort_values("point_id").reset_index(drop=True)
    b = pd.read_csv(tmp_path / "b" / "results.csv").sort_values("point_id").reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)


@pytest.mark.parametrize("executor", ["dask", "ray"])
def test_missing_distributed_executor_is_a_clear_error(tmp_path, executor):
    if importlib.util.find_spec(executor) is not None:
        pytest.skip(f"{executor} is installed")
    with pytest.raises(ConfigError, match="not installed"):
        run(experiment(), tmp_path / "x", jobs=2, executor=executor)


def fake_measure(spec, *, iterations, warmup, timeout_s, link, topology):
    """Stands in for real.measure.measure_point: the simulated time, 10 % slower."""
    result = simulate(scenario_from_dict({k: v for k, v in spec.items() if k != "real"}))
    fake_measure.calls.append((spec, iterations, warmup, timeout_s, link, topology))
    return {**result.metrics(), "iteration_time_s": 1.1 * result.iteration_time_s, "source": "real", "fidelity": "real"}


def test_backend_both_measures_through_measure_point(tmp_path):
    fake_measure.calls = []
    # the harness runs only models it has torch definitions of: the zoo's CPU-sized ones
    exp = experiment(backend="both", real={"iterations": 7, "warmup": 2, "link": "1gbit", "strategy": "ddp"},
                     workload={"model": "mlp", "batch_size": 16}, sweep={"cluster.gpus": [1, 2, 4]})
    summary = run(exp, tmp_path / "both", measure=fake_measure)
    df = pd.read_csv(tmp_path / "both" / "results.csv")
    assert summary.rows == 6 and sorted(df["source"]) == ["real"] * 3 + ["sim"] * 3
    spec, iterations, warmup, timeout_s, link, topology = fake_measure.calls[0]
    assert (iterations, warmup, timeout_s, link, topology) == (7, 2, 60.0, "1gbit", "shared")
    assert spec["real"] == {"strategy": "ddp"}
    sim = df[df.source == "sim"].set_index("world_size")["iteration_time_s"]
    real = df[df.source == "real"].set_index("world_size")["iteration_time_s"]
    assert (real / sim).to_numpy() == pytest.approx([1.1] * 3)


def test_real_backend_without_the_harness_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "real.measure", None)  # import fails
    with pytest.raises(ConfigError) as err:
        run(experiment(backend="real"), tmp_path / "r")
    assert err.value.field == "backend" and "\n" not in str(err.value)
    assert not (tmp_path / "r" / "points").exists()


def test_cli_run_plot_report(tmp_path, capsys):
    import yaml

    cfg = tmp_path / "mini.yaml"
    cfg.write_text(yaml.safe_dump(RAW))
    assert main(["run", str(cfg), "--results", str(tmp_path), "--jobs", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "scaling efficiency" in out
    assert "skipped cluster.gpus=3, cluster.inter_link=tcp_10gbe: cluster.gpus: got 3" in out
    assert "stragglers: steps wait for the expected slowest rank" in out and "Sinha et al. SC'22" in out
    plots = tmp_path / "mini" / "plots"
    for stem in ("speedup", "efficiency", "breakdown", "compare_cluster_inter_link", "timeline"):
        for ext in ("png", "svg"):
            assert (plots / f"{stem}.{ext}").stat().st_size > 5000
    assert main(["report", str(tmp_path / "mini")]) == 0
    html = (tmp_path / "mini" / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 5 and "<table id=\"points\">" in html
    assert main(["report", str(tmp_path / "mini"), "--format", "md"]) == 0
    assert "![" in (tmp_path / "mini" / "report.md").read_text()


def test_cli_bad_config_exits_2_before_running(tmp_path, capsys):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("name: bad\nworkload: {model: mlp}\nsweep: {cluster.gpus: []}\n")
    assert main(["run", str(cfg), "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "sweep.cluster.gpus" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "bad").exists()


def test_measured_points_are_drawn_beside_simulated_ones(tmp_path):
    from experiments.plots import plot_results

    fake_measure.calls = []
    exp = experiment(backend="both", workload={"model": "mlp", "batch_size": 16}, sweep={"cluster.gpus": [1, 2, 4]})
    run(exp, tmp_path / "both", measure=fake_measure)
    written = plot_results(tmp_path / "both")
    svg = next(p for p in written if p.name == "efficiency.svg").read_text()
    assert "(measured)" in svg


def test_points_of_an_earlier_config_stay_out_of_the_csv(tmp_path):
    out = tmp_path / "mini"
    run(experiment(), out)
    messages = []
    smaller = experiment(sweep={"cluster.gpus": [1, 2], "cluster.inter_link": ["ib_edr"]})
    summary = run_experiment(smaller, out, jobs=1, progress=False, log=messages.append)
    assert (summary.reused, summary.computed, summary.rows) == (2, 0, 2)
    assert len(pd.read_csv(out / "results.csv")) == 2
    assert any("8 finished points" in m for m in messages)


def test_a_point_another_run_writes_while_this_one_starts_is_not_computed_again(tmp_path, monkeypatch):
    """CI caught two runs into one directory computing a point twice: the other run wrote it after this
    run listed the finished points but before it noted the files it would replace, so the write looked
    like this run's own starting state. The other run's write is driven into that window here."""
    out = tmp_path / "mini"
    first = run(experiment(), out)
    store = ResultDir(out)
    victim = sorted(store.finished_ids())[0]
    saved = store.read_point(victim)
    store.point_path(victim).unlink()
    real_provenance = experiments.runner.provenance

    def other_run_writes_the_point():
        store.write_point(victim, saved["row"], saved["spec"])  # between the listing and the run's work
        return real_provenance()

    monkeypatch.setattr(experiments.runner, "provenance", other_run_writes_the_point)
    again = run(experiment(), out)
    assert (again.computed, again.by_others, again.reused) == (0, 1, first.rows - 1)


def test_dry_run_lists_every_point_it_would_compute_and_writes_nothing(tmp_path, capsys):
    """12 GPUs on 2 per node x 2 links = 12 combinations; 3 GPUs (1.5 nodes) is refused by the
    scenario for both links, so 10 points; after running half of them, those read 'reuse'."""
    import yaml

    config = tmp_path / "mini.yaml"
    config.write_text(yaml.safe_dump(RAW))
    assert main(["run", str(config), "--results", str(tmp_path), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    computed = [line for line in lines if line.startswith("compute ")]
    assert len(computed) == 10 and len([line for line in lines if line.startswith("skip ")]) == 2
    assert any("cluster.gpus=8, cluster.inter_link=ib_edr" in line for line in computed)
    assert lines[-1].startswith("mini: 10 points (0 already done, 10 to run, 2 invalid combinations skipped)")
    assert not (tmp_path / "mini").exists()

    run(experiment(sweep={"cluster.gpus": [1, 2, 4], "cluster.inter_link": ["tcp_10gbe", "ib_edr"]}),
        tmp_path / "mini")
    assert main(["run", str(config), "--results", str(tmp_path), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    reused = [line for line in lines if line.startswith("reuse ")]
    assert len(reused) == 6 and all("cluster.gpus=8" not in line for line in reused)
    assert "(6 already done, 4 to run" in lines[-1]
    assert main(["run", str(config), "--results", str(tmp_path), "--dry-run", "--force"]) == 0
    assert "(0 already done, 10 to run" in capsys.readouterr().out
