"""Layer tables and sweeps that went wrong silently or aborted the sweep (issue 29): layers files
with negative, unknown or misaligned cells, inline layers without FLOPs, a point that fails at run
time (recorded as failed with its reason; the parallel sweep goes on, and the rerun too)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from scalebench.cli import main
from tests.test_bad_input import check_one_line_error

HEAD = "layer,kind,param_count,fwd_flops,bwd_flops,activation_elems"
ROW = "l0,linear,1000,1e9,2e9,10"
CONFIG = {"c.yaml": "workload: {layers_file: t.csv, batch_size: 8}\n"}

TABLES = {
    # issue 29: param_count -1000 ended in 'ValueError: Negative delay' (and aborted a parallel sweep);
    # other negative cells ran at 100 % efficiency
    "negative-param-count": (f"{HEAD}\nl0,linear,-1000,1e9,2e9,10\n", "t.csv row 1.param_count: got -1000"),
    "negative-fwd-flops": (f"{HEAD}\nl0,linear,10,-1e9,2e9,10\n", "t.csv row 1.fwd_flops: got -1000000000.0"),
    "negative-activations": (f"{HEAD}\nl0,linear,10,1e9,2e9,-10\n", "t.csv row 1.activation_elems: got -10.0"),
    "nan-bwd-flops": (f"{HEAD}\nl0,linear,10,1e9,nan,10\n", "t.csv row 1.bwd_flops: got nan"),
    "inf-flops": (f"{HEAD}\nl0,linear,10,inf,2e9,10\n", "t.csv row 1.fwd_flops: got inf"),
    "fractional-param-count": (f"{HEAD}\nl0,linear,10.5,1e9,2e9,10\n", "t.csv row 1.param_count: got '10.5'"),
    # a misspelt time column was dropped, and the roofline used instead of the measured times
    "misspelt-time-column": (f"{HEAD},fwd_time\n{ROW},0.1\n", "t.csv column 'fwd_time': got 'fwd_time'"),
    "one-time-column": (f"{HEAD},fwd_time_s\n{ROW},0.1\n", "t.csv column 'bwd_time_s': got None"),
    "one-time-cell": (f"{HEAD},fwd_time_s,bwd_time_s\n{ROW},0.1,\n", "t.csv row 1.bwd_time_s: got None"),
    "negative-time": (f"{HEAD},fwd_time_s,bwd_time_s\n{ROW},0.1,-1\n", "t.csv row 1.bwd_time_s: got -1.0"),
    # a row with more cells than the header: its extra cell was dropped
    "more-cells": (f"{HEAD}\n{ROW},99\n", "t.csv row 1: got 'l0,linear,1000,1e9,2e9,10,99'; allowed: 6 cells"),
    "fewer-cells": (f"{HEAD}\nl0,linear,1000\n", "t.csv row 1: got 'l0,linear,1000'; allowed: 6 cells"),
    "column-twice": (f"{HEAD},fwd_flops\n{ROW},1\n", "t.csv column 'fwd_flops': got 'given twice'"),
    "header-only": (f"{HEAD}\n", "t.csv: got 'empty layer table'"),
    # a negative batch in the file's meta line became batch 1 without a word
    "negative-meta-batch": (f'# meta: {{"batch_size": -8}}\n{HEAD}\n{ROW}\n', "t.csv meta batch_size: got -8"),
    "text-meta-times-batch": (f'# meta: {{"times_batch_size": "8"}}\n{HEAD}\n{ROW}\n', "t.csv meta times_batch_size"),
}


@pytest.mark.parametrize("case", TABLES, ids=list(TABLES))
def test_a_layers_file_is_checked_row_by_row_on_load(case, tmp_path, monkeypatch, capsys):
    table, expected = TABLES[case]
    line = check_one_line_error(tmp_path, monkeypatch, capsys, {**CONFIG, "t.csv": table}, ["simulate", "c.yaml"],
                                expected)
    assert "allowed: " in line


def test_the_negative_meta_batch_is_refused_when_the_config_gives_none(tmp_path, monkeypatch, capsys):
    check_one_line_error(tmp_path, monkeypatch, capsys, {"c.yaml": "workload: {layers_file: t.csv}\n",
                                                         "t.csv": f'# meta: {{"batch_size": -8}}\n{HEAD}\n{ROW}\n'},
                         ["simulate", "c.yaml"], "t.csv meta batch_size: got -8; allowed: a positive integer")


def test_a_good_table_with_measured_times_still_loads(tmp_path):
    from sim.workload import read_layers_file

    (tmp_path / "t.csv").write_text(f'# meta: {{"batch_size": 8, "times_batch_size": 8}}\n{HEAD},fwd_time_s,bwd_time_s\n'
                                    f"{ROW},0.001,0.002\nl1,relu,0,0,0,10,,\n")
    layers, meta = read_layers_file(tmp_path / "t.csv")
    assert [(la.param_count, la.fwd_time_s, la.bwd_time_s) for la in layers] == [(1000, 0.001, 0.002), (0, None, None)]
    assert meta == {"batch_size": 8, "times_batch_size": 8}


@pytest.mark.parametrize("rows, field", [
    ("[{param_count: 1000}]", "workload.layers[0].fwd_flops: got None"),  # issue 29: ran as a layer of no time
    ("[{fwd_flops: 1e9, param_count: -5}]", "workload.layers[0].param_count: got -5"),
    ("[{fwd_flops: 1e9, fwd_time: 1}]", "workload.layers[0].fwd_time: got 1"),
])
def test_inline_layers_need_their_flops(rows, field, tmp_path, monkeypatch, capsys):
    check_one_line_error(tmp_path, monkeypatch, capsys, {"c.yaml": f"workload: {{layers: {rows}}}\n"},
                         ["simulate", "c.yaml"], field)


def test_an_inline_layer_of_measured_times_needs_no_flops(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("c.yaml").write_text("workload: {layers: [{param_count: 1000, fwd_time_s: 0.01, bwd_time_s: 0.02}]}\n"
                              "cluster: {gpus: 1}\n")
    assert main(["simulate", "c.yaml", "--format", "json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["forward_time_s"] == pytest.approx(0.01) and row["backward_time_s"] == pytest.approx(0.02)


SWEEP = ("name: fails\nworkload: mlp\ncluster: {gpus_per_node: 2}\n"
         "sweep: {cluster.gpus: [1, 2, 4, 8], strategy.bucket_mib: [1, 25]}\n")


def test_a_point_that_fails_at_run_time_is_recorded_and_the_parallel_sweep_goes_on(tmp_path, monkeypatch, capsys):
    """Issue 29: one failing point aborted the whole parallel sweep with a traceback, and every rerun
    died at the same point. Now it is failed with its reason; the other 7 are written; the rerun
    computes only it, fails it again the same way, and keeps the 7."""
    import experiments.points

    real_payload = experiments.points.run_sim_payload

    def break_one(payload):  # a defect in the simulator for one point (the workers are forked: they see this)
        if payload["spec"]["cluster"]["gpus"] == 4 and payload["spec"]["strategy"]["bucket_mib"] == 25:
            raise ValueError("Negative delay -0.001")
        return real_payload(payload)

    monkeypatch.setattr(experiments.points, "run_sim_payload", break_one)
    monkeypatch.chdir(tmp_path)
    Path("s.yaml").write_text(SWEEP)
    for attempt in range(2):
        assert main(["run", "s.yaml", "--jobs", "2", "--no-progress", "--no-plot"]) == 1
        out, err = capsys.readouterr()
        assert "failed cluster.gpus=4, strategy.bucket_mib=25 (point " in out
        assert "): ValueError: Negative delay -0.001" in out
        assert err.strip() == ("scalebench run: 1 of 8 points failed (each with its reason above and in "
                               "results/fails/meta.json); the others are in results.csv, and the same command tries "
                               "the failed ones again")
        assert f"({7 if attempt == 0 else 0} computed, {0 if attempt == 0 else 7} reused)" in out
        assert "Traceback" not in out + err
        df = pd.read_csv("results/fails/results.csv")
        assert len(df) == 7 and not ((df["world_size"] == 4) & (df["bucket_mib"] == 25)).any()
        failed = json.loads(Path("results/fails/meta.json").read_text())["failed"]
        assert [f["reason"] for f in failed] == ["ValueError: Negative delay -0.001"]
    monkeypatch.setattr(experiments.points, "run_sim_payload", real_payload)  # the defect mended: the rerun completes
    assert main(["run", "s.yaml", "--jobs", "2", "--no-progress", "--no-plot"]) == 0
    assert "(1 computed, 7 reused)" in capsys.readouterr().out
    assert json.loads(Path("results/fails/meta.json").read_text())["failed"] == []


# -- sweeps whose rows would be labelled wrongly ---------------------------------------------

def _readme_sweep() -> str:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    block = readme.split("```yaml\nname: my_sweep", 1)[1].split("```", 1)[0]
    return "name: my_sweep" + block


def test_the_readme_sweep_runs_as_it_reads(tmp_path):
    """Issue 29: the README's example swept cluster.inter_link while its cases set it, so 18 points
    ran once and rows labelled 'ib_edr, PS over TCP' ran over tcp_10gbe. Every point of it now runs
    what its labels say."""
    from experiments.config import expand, experiment_from_dict
    from sim.yamlio import load_yaml_text

    experiment = experiment_from_dict(load_yaml_text(_readme_sweep()))
    points, skipped = expand(experiment)
    assert (len(points), skipped) == (9 * 2 * 2, [])  # 1..256 GPUs x 2 bucket sizes x 2 cases
    cases = {c["label"]: c for c in experiment.axes["case"]}
    for p in points:
        case = cases[p.axes["case"]]
        assert p.spec["cluster"]["inter_link"] == case["cluster.inter_link"]
        assert p.spec["strategy"]["collective"] == case["strategy.collective"]
        assert p.spec["strategy"]["bucket_mib"] == p.axes["strategy.bucket_mib"]
        assert p.spec["cluster"]["gpus"] == p.axes["cluster.gpus"]
    assert len({json.dumps(p.spec, sort_keys=True) for p in points}) == len(points)  # no two share a point


AXES = "name: e\nworkload: mlp\ncluster: {gpus_per_node: 2}\nsweep:\n  cluster.gpus: [2, 4]\n"
SWEEPS = {
    "case-and-axis-set-one-field": (
        AXES + "  cluster.inter_link: [tcp_10gbe, ib_edr]\n  case:\n    - {label: a, cluster.inter_link: tcp_10gbe}\n"
               "    - {label: b, cluster.inter_link: ib_edr}\n",
        "sweep.case[0].cluster.inter_link: got 'tcp_10gbe'; allowed: a field no other axis sets (sweep.cluster.inter_link "
        "sets cluster.inter_link too"),
    "two-cases-one-label": (
        AXES + "  case:\n    - {label: a, strategy.collective: ring}\n    - {label: a, strategy.collective: tree}\n",
        "sweep.case[1].label: got 'a'; allowed: a label no other case has (case [0] has it"),
    "two-cases-one-setting": (
        AXES + "  case:\n    - {label: a, strategy.collective: ring}\n    - {label: b, strategy.collective: ring}\n",
        "sweep.case[1]: got {'strategy.collective': 'ring'}; allowed: settings no other case has (case [0]"),
    "a-value-twice": (AXES.replace("[2, 4]", "[2, 4, 2]"), "sweep.cluster.gpus[2]: got 2; allowed: each value once"),
    "axis-inside-an-axis": (AXES + "  cluster: [{gpus: 2}]\n", "sweep.cluster: got [{'gpus': 2}]; allowed: a field no "
                            "other axis sets (sweep.cluster.gpus sets cluster.gpus too"),
    "one-field-twice-in-a-case": (AXES.replace("  cluster.gpus: [2, 4]\n", "") + "  case:\n"
                                  "    - {label: a, cluster: {gpus: 2}, cluster.gpus: 4}\n",
                                  "sweep.case[0].cluster.gpus: got 4; allowed: a field not set again inside the case"),
    "name-with-a-newline": ('name: "a\\nb"\nworkload: mlp\n', "name: got 'a\\nb'; allowed: a non-empty name without"),
    "name-with-a-tab": ('name: "a\\tb"\nworkload: mlp\n', "name: got 'a\\tb'"),
    "name-with-a-bell": ('name: "a\\ab"\nworkload: mlp\n', "name: got 'a\\x07b'"),
}


@pytest.mark.parametrize("case", SWEEPS, ids=list(SWEEPS))
def test_sweeps_that_would_label_rows_wrongly_are_refused(case, tmp_path, monkeypatch, capsys):
    text, expected = SWEEPS[case]
    check_one_line_error(tmp_path, monkeypatch, capsys, {"e.yaml": text}, ["run", "e.yaml", "--dry-run"], expected)


def test_cases_that_share_fields_with_each_other_are_what_cases_are(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("e.yaml").write_text(AXES + "  case:\n    - {label: a, strategy.collective: ring, cluster.inter_link: ib_edr}\n"
                              "    - {label: b, strategy.collective: tree, cluster.inter_link: ib_edr}\n")
    assert main(["run", "e.yaml", "--dry-run"]) == 0
    assert "e: 4 points (0 already done, 4 to run, 0 invalid combinations skipped)" in capsys.readouterr().out


def test_a_sweep_over_a_bad_layers_file_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    """Issue 29's parallel sweep over a layers file with param_count -1000: refused on load now."""
    files = {"e.yaml": "name: e\nworkload: {layers_file: t.csv, batch_size: 8}\nsweep: {cluster.gpus: [1, 2, 4, 8]}\n",
             "t.csv": f"{HEAD}\nl0,linear,-1000,1e9,2e9,10\n"}
    check_one_line_error(tmp_path, monkeypatch, capsys, files, ["run", "e.yaml", "--jobs", "2", "--no-progress"],
                         "t.csv row 1.param_count: got -1000; allowed: a non-negative integer")


def test_a_million_transformer_layers_are_refused_at_once(tmp_path, monkeypatch, capsys):
    """Found beside the driver: a decoder of 1,000,000 layers ran for over a minute in 3.5 GB."""
    import time

    text = "workload: {model: decoder, architecture: {layers: 1000000, hidden: 64, heads: 4, seq_len: 16, vocab: 100}}\n"
    start = time.monotonic()
    check_one_line_error(tmp_path, monkeypatch, capsys, {"c.yaml": text}, ["simulate", "c.yaml"],
                         "workload.architecture.layers: got 1000000; allowed: a positive integer at most 1,024")
    assert time.monotonic() - start < 10


def test_a_layer_table_of_more_rows_than_any_model_is_refused(tmp_path, monkeypatch, capsys):
    rows = "".join(f"l{i},linear,10,1e6,2e6,10\n" for i in range(100_001))
    check_one_line_error(tmp_path, monkeypatch, capsys, {**CONFIG, "t.csv": f"{HEAD}\n{rows}"}, ["simulate", "c.yaml"],
                         "t.csv: got 'more than 100,000 layer rows'; allowed: at most 100,000 rows")
