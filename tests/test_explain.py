"""scalebench explain and validate --suite devset --explain: the terms add up to the prediction,
the residual is measured - predicted, and the devset rows are explained and grouped."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sim.config import scenario_from_dict
from sim.explain import CATEGORIES, explain
from sim.simulate import simulate

CASES = {
    "data parallel, horovod": {"workload": {"model": "resnet50"},
                               "cluster": {"gpus": 32, "gpus_per_node": 4, "gpu": "p100_pcie", "intra_link": "pcie3",
                                           "inter_link": "tcp_25gbe"}, "strategy": {"framework": "horovod"}},
    "pipeline x tensor": {"workload": {"model": "gpt2_small", "batch_size": 8},
                          "cluster": {"gpus": 16, "gpus_per_node": 8, "gpu": "a100", "intra_link": "nvlink3",
                                      "inter_link": "ib_hdr"},
                          "strategy": {"kind": "hybrid", "pp": 2, "tp": 2, "micro_batches": 4, "precision": "bf16"}},
    "detailed, no overlap": {"workload": {"model": "resnet50"},
                             "cluster": {"gpus": 16, "gpus_per_node": 8, "gpu": "v100", "intra_link": "nvlink2",
                                         "inter_link": "tcp_10gbe"},
                             "strategy": {"overlap": False, "collective": "ring"}, "simulation": {"fidelity": "detailed"}},
    "real images a host cannot feed": {"workload": {"model": "resnet50", "batch_size": 256, "data": "imagenet_jpeg"},
                                       "cluster": {"gpus": 16, "gpus_per_node": 8, "gpu": "a100", "intra_link": "nvlink3",
                                                   "inter_link": "ib_hdr"},
                                       "strategy": {"framework": "pytorch_ddp", "precision": "bf16"}},
    "codec, iteration overhead": {"workload": {"model": "resnet50"},
                                  "cluster": {"gpus": 16, "gpus_per_node": 8, "gpu": "v100", "intra_link": "nvlink2",
                                              "inter_link": "tcp_10gbe"},
                                  "strategy": {"codec": "fp16", "iteration_overhead_ms": 2.0}},
}


@pytest.mark.parametrize("name", list(CASES))
def test_terms_add_up_to_the_prediction(name):
    result = simulate(scenario_from_dict(CASES[name]))
    e = explain(result, measured_s=1.0)
    assert sum(t.seconds for t in e.terms) == pytest.approx(result.iteration_time_s, rel=1e-9)
    assert sum(e.totals().values()) == pytest.approx(result.iteration_time_s, rel=1e-9)
    assert e.residual_s == pytest.approx(1.0 - result.iteration_time_s)
    assert e.residual_percent == pytest.approx(100 * (1.0 - result.iteration_time_s))
    assert all(t.seconds >= 0 for t in e.terms)
    if name == "real images a host cannot feed":  # the input pipeline bounds this step: its wait is a term
        assert result.data_wait_time_s > 0 and e.totals()["waiting for input"] == result.data_wait_time_s


def test_exposed_communication_split_by_term():
    r = simulate(scenario_from_dict(CASES["codec, iteration overhead"]))
    e = explain(r)
    names = {t.name: t for t in e.terms}
    assert names["bandwidth"].category == "exposed communication" and names["bandwidth"].seconds > 0
    assert names["codec"].seconds > 0
    assert names["framework per-iteration overhead"].category == "coordination"
    assert names["framework per-iteration overhead"].seconds == pytest.approx(2e-3)
    assert e.totals()["exposed communication"] == pytest.approx(r.exposed_comm_time_s)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scalebench", *args], capture_output=True, text=True, timeout=120)


HOROVOD = ["--model", "inception_v3", "--batch-size", "64", "--gpus", "128", "--gpus-per-node", "4", "--gpu", "p100_pcie",
           "--intra-link", "pcie3", "--inter-link", "tcp_25gbe", "--framework", "horovod",
           "--single-gpu-samples-per-s", "133"]


def test_explain_text_beside_a_measured_throughput():
    """The Horovod devset row (InceptionV3, 128 GPUs, TCP: 14,964 images/s measured): the measured
    iteration is 128 x 64 / 14964 = 547.5 ms; the residual is that minus the prediction."""
    out = _cli("explain", *HOROVOD, "--measured-samples-per-s", "14964")
    assert out.returncode == 0, out.stderr
    for category in CATEGORIES[:5]:
        if category != "coordination":
            assert category in out.stdout
    assert "measured iteration" in out.stdout and "547.45 ms" in out.stdout
    assert "residual (measured - predicted)" in out.stdout and "Sinha et al." in out.stdout


def test_explain_json_and_csv_agree_with_the_text():
    js = _cli("explain", *HOROVOD, "--measured-iteration-s", "0.5", "--format", "json")
    assert js.returncode == 0, js.stderr
    data = json.loads(js.stdout)
    assert data["measured_iteration_s"] == 0.5
    assert data["residual_s"] == pytest.approx(0.5 - data["predicted_iteration_s"])
    assert sum(t["seconds"] for t in data["terms"]) == pytest.approx(data["predicted_iteration_s"])
    assert data["scenario"]["framework"] == "horovod"
    csv = _cli("explain", *HOROVOD, "--measured-iteration-s", "0.5", "--format", "csv")
    assert csv.returncode == 0, csv.stderr
    lines = csv.stdout.splitlines()
    assert lines[0] == "category,term,seconds,share_of_predicted"
    assert any(line.startswith("total,residual (measured - predicted)") for line in lines)


@pytest.mark.parametrize("flags,field", [
    (["--measured-iteration-s", "-1"], "--measured-iteration-s"),
    (["--measured-iteration-s", "1", "--measured-samples-per-s", "5"], "--measured-iteration-s"),
    (["--measured-samples-per-s", "inf"], "--measured-samples-per-s"),
])
def test_explain_bad_measurement_is_one_line(flags, field):
    out = _cli("explain", "--model", "resnet50", "--gpus", "8", *flags)
    assert out.returncode == 2
    assert field in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_devset_explain_breaks_down_every_horovod_row_and_groups_residuals():
    out = _cli("validate", "--suite", "devset", "--explain")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("| horovod InceptionV3 |") == 10 + 1  # 10 rows + the group table's line
    for grouping in ("Residuals by GPUs", "Residuals by link kind", "Residuals by framework"):
        assert grouping in out.stdout
    bad = _cli("validate", "--explain")
    assert bad.returncode == 2 and "--suite devset" in bad.stderr
