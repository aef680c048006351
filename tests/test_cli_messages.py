"""Messages on stderr through `logging` with -v / -q and a progress bar (tqdm) for the long
commands; machine-readable results on stdout with --format json|csv (plan, validate), nothing
else mixed into them."""

from __future__ import annotations

import csv
import io
import json

import pytest

from scalebench.cli import main

SMALL_PLAN = ["plan", "--model", "small_transformer", "--gpus", "8", "--gpus-per-node", "2", "--gpu", "v100",
              "--intra-link", "nvlink2", "--inter-link", "tcp_25gbe", "--backends", "nccl", "--bucket-mib", "25",
              "--top", "3"]


def test_plan_json_is_one_strict_object_and_the_progress_goes_to_stderr(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SCALEBENCH_PROGRESS", "1")  # the bar, as a terminal shows it
    assert main([*SMALL_PLAN, "--out", str(tmp_path), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)  # stdout holds the object and nothing else
    assert doc["winner"]["rank"] == 1 and [r["rank"] for r in doc["top"]] == [1, 2, 3]
    assert doc["search"]["simulated"] + sum(doc["search"]["removed"].values()) == doc["search"]["enumerated"]
    assert doc["request"]["model"] == "small_transformer" and " wins " in doc["why"] and doc["closest"].startswith("The winner")
    with open(tmp_path / "candidates.csv", newline="") as fh:  # the same rows as the file's
        first = next(r for r in csv.DictReader(fh) if r["rank"] == "1")
    assert float(first["iteration_time_s"]) == pytest.approx(doc["winner"]["iteration_time_s"], rel=1e-9)
    for key in ("overlap_slowdown_time_s", "straggler_wait_time_s", "recompute_time_s", "model_comm_time_s"):
        assert float(first[key]) == pytest.approx(doc["winner"][key], rel=1e-9, abs=1e-15)  # the table's columns
    assert doc["winner"]["straggler_wait_time_s"] > 0  # 8 GPUs wait for the slowest (on by default)
    assert "scalebench plan: searched" in err and "plan: simulating" in err
    assert "scalebench plan: scalebench plan" not in err
    assert "NaN" not in out


def test_plan_csv_is_the_top_rows(tmp_path, capsys):
    assert main([*SMALL_PLAN, "--out", str(tmp_path), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["rank"] for r in rows] == ["1", "2", "3"] and rows[0]["status"] == "simulated"


def test_quiet_hides_progress_and_verbose_adds_detail(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SCALEBENCH_PROGRESS", "1")
    assert main([*SMALL_PLAN, "--out", str(tmp_path), "--format", "json", "-q"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["winner"]["rank"] == 1 and err == ""
    assert main(["validate", "--suite", "devset", "-q"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["validate", "--suite", "extrapolate", "-v"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("scalebench validate: ") and all(line.startswith("scalebench validate: ")
                                                            for line in err.strip().splitlines())


def test_validate_devset_json_and_csv_carry_the_verdict_and_every_row(capsys):
    status = main(["validate", "--suite", "devset", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert (doc["verdict"], doc["exit_status"]) == (("PASS", 0) if status == 0 else ("FAIL", 1))
    assert doc["failing"] == [] if status == 0 else doc["failing"]
    groups = {g["group"] for g in doc["groups"]}
    assert {p["group"] for p in doc["predictions"]} == groups
    for p in doc["predictions"]:  # the error is the row's own, by the README's definition
        expected = 100 * (p["predicted"] - p["measured"]) * (1 if p["unit"] == "eff" else 1 / p["measured"])
        assert p["error"] == pytest.approx(expected)
    assert main(["validate", "--suite", "devset", "--format", "csv"]) == status
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == len(doc["predictions"]) and {"group", "case", "measured", "predicted", "error"} <= set(rows[0])


def test_validate_devset_explain_json_carries_the_terms_of_each_explained_row(capsys):
    main(["validate", "--suite", "devset", "--explain", "--format", "json", "-q"])
    doc = json.loads(capsys.readouterr().out)
    assert not {"scenario", "result"} & set(doc["predictions"][0])  # objects, not values
    explained = doc["explained"]
    assert explained and {(r["group"], r["case"]) for r in explained} <= {(p["group"], p["case"])
                                                                         for p in doc["predictions"]}
    terms = ("compute", "compute slowed by overlap", "exposed communication", "coordination",
             "waiting for stragglers", "pipeline bubble", "waiting for input")
    for r in explained:  # the terms add up to the prediction, the residual is measured - predicted
        assert sum(r[t] for t in terms) == pytest.approx(r["predicted_s"], rel=1e-6)
        assert r["residual_s"] == pytest.approx(r["measured_s"] - r["predicted_s"], abs=1e-12)


def test_simgrid_has_no_machine_format(capsys):
    assert main(["validate", "--suite", "simgrid", "--format", "json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("scalebench validate: error: --format: got 'json'") and "\n" not in err


def test_regress_quiet_prints_only_what_is_not_ok(capsys):
    assert main(["regress", "-q"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("scalebench regress: passed")


def test_no_bar_where_stderr_is_not_a_terminal_so_an_error_stays_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SCALEBENCH_PROGRESS", raising=False)
    assert main([*SMALL_PLAN, "--out", str(tmp_path), "--format", "json"]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and "plan: simulating" not in err and "scalebench plan: searched" in err
