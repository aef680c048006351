"""Bad input that has a right result other than exit 2 (issue 20): a sweep skips the points the
simulator refuses and says why, a truncated point file is computed again, ``| head`` ends
quietly, parquet is written where pyarrow is installed, a key given twice is an error."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from scalebench.cli import main
from sim.errors import ConfigError

TD = ("name: td\nworkload: {model: resnet50}\ncluster: {gpus_per_node: 8}\nsimulation: {fidelity: detailed}\n"
      "sweep: {cluster.gpus: [16, 32], strategy.collective: [ring, tree]}\n")
"""Issue 20's sweep: the detailed fidelity has no tree schedule, so two of its four points are invalid."""
MINI = "name: mini\nworkload: mlp\ncluster: {gpus_per_node: 2}\nsweep: {cluster.gpus: [1, 2, 4]}\n"


def test_config_error_survives_a_worker_process():
    err = ConfigError("simulation.fidelity", "detailed", "fast for collective=tree", related=("strategy.collective",))
    back = pickle.loads(pickle.dumps(err))
    assert (back.field, back.value, back.allowed, back.related, str(back)) == \
           (err.field, err.value, err.allowed, err.related, str(err))


def test_a_parallel_sweep_skips_the_points_the_detailed_fidelity_refuses(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("td.yaml").write_text(TD)
    assert main(["run", "td.yaml", "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "td: 2 points (0 already done, 2 to run, 2 invalid combinations skipped)" in dry
    assert dry.count("compute ") == 2 and dry.count("skip ") == 2
    assert not Path("results/td").exists()
    assert main(["run", "td.yaml", "--jobs", "2", "--no-progress", "--no-plot"]) == 0
    out = capsys.readouterr().out
    for gpus in (16, 32):
        assert f"skipped cluster.gpus={gpus}, strategy.collective=tree: simulation.fidelity: got 'detailed'" in out
    df = pd.read_csv("results/td/results.csv")
    assert sorted(df["world_size"]) == [16, 32] and set(df["collective"]) == {"ring"}
    meta = json.loads(Path("results/td/meta.json").read_text())
    assert len(meta["skipped"]) == 2


def test_a_point_the_simulator_refuses_in_a_worker_costs_itself_not_the_sweep(tmp_path, monkeypatch):
    """A refusal only the run itself finds (none is known now: a safety net) is reported as skipped."""
    import experiments.points
    from experiments.config import experiment_from_dict
    from experiments.runner import run_experiment
    from sim.config import read_yaml

    (tmp_path / "mini.yaml").write_text(MINI)
    real_payload = experiments.points.run_sim_payload

    def refuse_four(payload):
        if payload["spec"]["cluster"]["gpus"] == 4:
            raise ConfigError("cluster.gpus", 4, "not today")
        return real_payload(payload)

    monkeypatch.setattr(experiments.points, "run_sim_payload", refuse_four)
    log: list[str] = []
    summary = run_experiment(experiment_from_dict(read_yaml(tmp_path / "mini.yaml")), tmp_path / "out", jobs=1,
                             progress=False, log=log.append)
    assert (summary.computed, summary.rows) == (2, 2)
    assert any(line == "skipped cluster.gpus=4: cluster.gpus: got 4; allowed: not today" for line in log)
    assert json.loads((tmp_path / "out" / "meta.json").read_text())["skipped"][0]["reason"].startswith("cluster.gpus")


def test_run_sim_chunk_returns_a_refusal_instead_of_raising():
    from experiments.points import run_sim_chunk

    ((pid, result),) = run_sim_chunk([{"point_id": "p", "spec": {"workload": {"model": "zz"}}, "calibration": None}])
    assert pid == "p" and isinstance(result, ConfigError) and result.field == "workload.model"


def test_a_truncated_point_file_is_computed_again_and_said_so(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("mini.yaml").write_text(MINI)
    argv = ["run", "mini.yaml", "--jobs", "1", "--no-progress", "--no-plot"]
    assert main(argv) == 0
    capsys.readouterr()
    victim = sorted(Path("results/mini/points").glob("*.json"))[1]
    victim.write_text(victim.read_text()[:100])  # a run killed mid-write on a filesystem without atomic rename
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"1 point files are unreadable (truncated or corrupt, e.g. {victim}): computing them again" in out
    assert "3 rows (1 computed, 2 reused)" in out
    assert json.loads(victim.read_text())["row"]["point_id"] == victim.stem
    assert len(pd.read_csv("results/mini/results.csv")) == 3


def test_a_closed_pipe_ends_the_command_quietly():
    """``scalebench simulate | head``: the reader goes away, the command exits 141 (128 + SIGPIPE,
    as Unix tools do) and prints nothing, no traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "scalebench", "simulate", "--format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the command writes anything
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141
    assert err == b""


def test_parquet_is_written_where_pyarrow_is_installed(tmp_path):
    pytest.importorskip("pyarrow")
    from real.results import check_row_path, write_rows

    path = check_row_path("--out", tmp_path / "rows.parquet")
    write_rows(path, [{"model": "mlp", "iteration_time_s": 0.5}])
    assert pd.read_parquet(path).to_dict("records") == [{"model": "mlp", "iteration_time_s": 0.5}]


def test_a_key_given_twice_is_an_error_naming_the_key_and_both_lines():
    from sim.yamlio import DuplicateKeyError, load_yaml_text

    with pytest.raises(DuplicateKeyError) as err:
        load_yaml_text("cluster:\n  gpus: 8\n  gpu: v100\n  gpus: 16\n")
    assert (err.value.key, err.value.first_line, err.value.problem_mark.line + 1) == ("gpus", 2, 4)
    with pytest.raises(DuplicateKeyError):
        load_yaml_text("sweep: {cluster.gpus: [1], cluster.gpus: [2]}\n")
    # YAML's merge key may be overridden by an explicit key: not a duplicate
    assert load_yaml_text("base: &b {gpus: 8}\nc: {<<: *b, gpus: 16}\n")["c"] == {"gpus": 16}


def test_measured_rows_are_labelled_with_what_ran():
    from real.config import measured_labels

    assert measured_labels("gloo", None) == {"gpu": "cpu", "intra_link": "loopback", "inter_link": "loopback"}
    assert measured_labels("gloo", "1gbit")["inter_link"] == "1gbit"
    nccl = measured_labels("nccl", None, "NVIDIA H100 80GB HBM3", one_machine=False)
    assert nccl["gpu"] == "NVIDIA H100 80GB HBM3" and nccl["inter_link"] == "nccl over the machines' network"


@pytest.mark.parametrize(("raised", "status", "message"), [
    (KeyboardInterrupt(), 130, "scalebench simulate: interrupted"),
    (OSError(28, "No space left on device"), 1, "scalebench simulate: error: No space left on device (ENOSPC)"),
    (OSError(28, "No space left on device", "t.json"), 1, "scalebench simulate: error: t.json: No space left on device"),
    (ConfigError("cluster.gpus", 3, "a multiple of 2"), 2, "scalebench simulate: error: cluster.gpus: got 3"),
])
def test_exit_status_of_each_kind_of_ending(raised, status, message, monkeypatch, capsys):
    import scalebench.commands.simulate

    def fail(args):
        raise raised

    monkeypatch.setattr(scalebench.commands.simulate, "run", fail)
    assert main(["simulate"]) == status
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith(message)


def test_the_readme_states_every_exit_status_the_cli_returns():
    import re

    from scalebench import cli

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Exit status", 1)[1].split("\n## ", 1)[0]
    stated = {int(m) for m in re.findall(r"^\| (\d+) \|", section, flags=re.M)}
    assert stated == {cli.EXIT_OK, cli.EXIT_FAILED, cli.EXIT_BAD_INPUT, cli.EXIT_INTERRUPTED, cli.EXIT_BROKEN_PIPE,
                      cli.EXIT_INCONCLUSIVE, cli.EXIT_TERMINATED, cli.EXIT_HANGUP}
    from validation.noise import EXIT_STATUS

    assert EXIT_STATUS == {"PASS": cli.EXIT_OK, "FAIL": cli.EXIT_FAILED, "INCONCLUSIVE": cli.EXIT_INCONCLUSIVE}
