"""The command line: exit status, one-line errors, machine-readable output, no partial files."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import pytest

from scalebench.cli import main


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scalebench", *args], capture_output=True, text=True)


@pytest.mark.parametrize("args,field", [
    (["simulate", "--model", "nope"], "workload.model"),
    (["simulate", "--model", "mlp", "--gpus", "12", "--gpus-per-node", "8"], "cluster.gpus"),
    (["simulate", "--model", "mlp", "--bucket-mib", "0"], "strategy.bucket_mib"),
    (["simulate", "--model", "mlp", "--inter-link", "carrier-pigeon"], "cluster.inter_link"),
])
def test_bad_input_exits_2_with_one_line(args, field, tmp_path):
    trace = tmp_path / "trace.json"
    proc = run_cli(*args, "--trace", str(trace))
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in proc.stderr
    assert not trace.exists()
    assert list(tmp_path.iterdir()) == []


def test_malformed_yaml_is_a_one_line_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("workload: {model: mlp\ncluster: [\n")
    proc = run_cli("simulate", str(bad))
    assert proc.returncode == 2 and "bad.yaml" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_missing_config_file(tmp_path):
    proc = run_cli("simulate", str(tmp_path / "absent.yaml"))
    assert proc.returncode == 2 and "absent.yaml" in proc.stderr


def test_csv_has_the_documented_columns(capsys):
    assert main(["simulate", "--model", "mlp", "--gpus", "16", "--gpus-per-node", "4", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 1
    for column in ("world_size", "iteration_time_s", "compute_time_s", "exposed_comm_time_s",
                   "throughput_samples_per_s", "speedup", "scaling_efficiency", "source"):
        assert column in rows[0]
    assert rows[0]["world_size"] == "16" and rows[0]["source"] == "sim"


def test_simulate_without_a_collective_lets_the_library_choose(capsys):
    """No --collective: the strategy's default, NCCL's tuner (auto), not a forced flat ring: at
    16,384 GPUs over HDR the library's choice beats the ring that scalebench once defaulted to."""
    args = ["simulate", "--gpus", "16384", "--inter-link", "ib_hdr", "--format", "csv"]
    assert main(args) == 0
    auto = next(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert main([*args, "--collective", "ring"]) == 0
    ring = next(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert auto["collective"] == "auto" and ring["collective"] == "ring"
    assert float(auto["iteration_time_s"]) < float(ring["iteration_time_s"])


def test_trace_is_chrome_trace_event_format(tmp_path, capsys):
    trace = tmp_path / "t.json"
    assert main(["simulate", "--model", "mlp", "--gpus", "4", "--gpus-per-node", "4", "--trace", str(trace)]) == 0
    data = json.loads(trace.read_text())
    spans = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert {e["cat"] for e in spans} == {"compute", "comm"}
    assert all(e["dur"] >= 0 for e in spans)
    # the last span ends at the iteration time
    end_us = max(e["ts"] + e["dur"] for e in spans)
    assert end_us == pytest.approx(data["otherData"]["iteration_time_s"] * 1e6)


def test_config_file_and_flags_compose(tmp_path, capsys):
    cfg = tmp_path / "s.yaml"
    cfg.write_text("workload: {model: mlp}\ncluster: {gpus: 8, gpus_per_node: 8, inter_link: tcp_1gbe}\n")
    assert main(["simulate", str(cfg), "--gpus", "16", "--format", "json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert (row["world_size"], row["nodes"], row["inter_link"]) == (16, 2, "tcp_1gbe")
