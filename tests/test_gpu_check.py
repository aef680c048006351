"""scripts/gpu_check.py: its dry run on the CPU (every section, the files a lent GPU would return,
the report's tables), and the comparison's predictions against hand-computed figures."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from real.gpucheck.plan import DRY_PLAN, GPU_PLAN, LLAMA_STACK, estimated_compute_s
from validation.gpu_report import (
    COMPARISON_COLUMNS,
    catalog_gpu,
    predict_compute,
    predict_memory,
    predicted_slowdown,
    rel_error,
)

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    """The whole dry run, once: what CI exercises of the GPU check (torch, gloo; no CUDA)."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("gpu_check") / "out"
    done = _run("run", "--dry-run", "--out", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out, done, json.loads((out / "gpu_check.json").read_text())


@pytest.mark.torch
def test_the_dry_run_writes_the_four_files_and_nothing_else(dry):
    out, done, data = dry
    assert sorted(p.name for p in out.iterdir()) == sorted(["gpu_check.json", "report.md", "comparison.csv",
                                                           "artifacts.tar.gz"])
    assert data["format"] == "scalebench gpu_check 1" and data["meta"]["dry_run"] is True
    assert {name: s["status"] for name, s in data["sections"].items()} == {
        "compute": "done", "memory": "done", "interference": "done", "harness": "done"}
    assert "every section ran" in done.stdout
    with tarfile.open(out / "artifacts.tar.gz") as tar:
        names = set(tar.getnames())
    # the harness' row, its profiler trace and the layer table made from it; one compute trace per model
    assert {"harness/real_nccl.csv", "harness/real_profile.json", "harness/real_profile_layers.csv",
            "harness/hooks_nccl_1rank.json"} <= names
    assert {f"traces/compute_{m.name}_bf16_b{max(m.compute_batches)}.json" for m in DRY_PLAN.models} <= names


@pytest.mark.torch
def test_every_compute_case_has_its_step_units_and_layers(dry):
    _, _, data = dry
    cases = {(c["model"], c["dtype"], c["batch_size"]): c for c in data["sections"]["compute"]["cases"]}
    expected = {(m.name, d, b) for m in DRY_PLAN.models for d in DRY_PLAN.dtypes for b in m.compute_batches}
    assert set(cases) == expected
    from sim.workload import workload_from_dict

    for (_model, _dtype, batch), case in cases.items():
        assert "error" not in case, case.get("error")
        step = case["step"]
        assert step["steps"] == DRY_PLAN.steps and step["total_s"] > 0
        assert step["total_s"] == pytest.approx(step["forward_s"] + step["backward_s"] + step["optimizer_s"], rel=1e-6)
        table = workload_from_dict(case["workload"])
        # the profiler's rows are the simulator's rows, one for one, each with a forward time
        assert [r["layer"] for r in case["layers"]["rows"]] == [layer.name for layer in table.layers]
        assert all(r["fwd_s"] >= 0 and r["bwd_s"] >= 0 for r in case["layers"]["rows"])
        assert sum(r["fwd_s"] for r in case["layers"]["rows"]) > 0
        # units are the top-level children, and every table row belongs to one of them
        units = [u["unit"] for u in case["units"]]
        assert {layer.name.split(".")[0] for layer in table.layers} <= set(units)
        assert case["flops"] == pytest.approx(batch * (table.fwd_flops_per_sample + table.bwd_flops_per_sample))


@pytest.mark.torch
def test_memory_static_bytes_are_16_per_parameter_and_checkpointing_saves_less(dry):
    """Adam in fp32 and under autocast keeps fp32 parameters, gradients and two moments: 16 bytes
    per parameter (plus Adam's 4-byte step count per parameter tensor); checkpointing every block
    keeps less than the whole forward does, and more samples keep more."""
    from real.gpucheck import models as M

    _, _, data = dry
    cases = data["sections"]["memory"]["cases"]
    assert len(cases) == sum(len(m.memory_batches) for m in DRY_PLAN.models) * 2 * len(DRY_PLAN.memory_precisions)
    by_key = {(c["model"], c["precision"], c["batch_size"], c["checkpointing"]): c for c in cases}
    for (model, precision, batch, ckpt), case in by_key.items():
        assert "error" not in case, case["error"]
        spec = next(m for m in DRY_PLAN.models if m.name == model)
        torch_model = M.build(spec, "meta")
        tensors = len({id(p) for p in torch_model.parameters()})
        params = sum(p.numel() for p in torch_model.parameters())
        assert case["static_bytes"] == 16 * params + 4 * tensors
        if ckpt:
            assert case["saved_activation_bytes"] < by_key[(model, precision, batch, False)]["saved_activation_bytes"]
        if batch > 1:
            assert case["saved_activation_bytes"] > by_key[(model, precision, 1, ckpt)]["saved_activation_bytes"]
        assert "peak_allocated_bytes" not in case  # CUDA only


@pytest.mark.torch
def test_the_harness_steps_ran_on_the_cpu_or_are_cuda_only(dry):
    _, _, data = dry
    steps = {s["name"]: s for s in data["sections"]["harness"]["steps"]}
    assert list(steps) == [s.name for s in DRY_PLAN.harness]
    for step in DRY_PLAN.harness:
        got = steps[step.name]
        if step.dry_argv is None:
            assert got["status"] == "skipped" and got["summary"] == "CUDA only"
        else:
            assert got["status"] == "ok", got
    hooks = steps["hooks_nccl_1rank"]["hooks"]
    assert hooks["ok"] and set(hooks["formats"]) == {"none", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8"}
    assert steps["nccl_1rank_resnet50"]["iteration_time_s"] > 0 and "predict" in steps["nccl_1rank_resnet50"]
    assert steps["layers_from_profile"]["summary"].startswith("5 layers with measured times")


@pytest.mark.torch
def test_the_report_has_every_table_and_the_csv_its_columns(dry):
    out, _, data = dry
    report = (out / "report.md").read_text()
    for heading in ("## Compute: measured steps against the roofline", "## Which layer kinds the roofline gets wrong",
                    "## Memory: a training step against sim/memory.py",
                    "## Interference: compute beside communication kernels", "## The harness on CUDA"):
        assert heading in report
    for header in ("| model | dtype | batch | measured fwd / bwd / opt (ms) | predicted fwd / bwd / opt (ms) |",
                   "| kind | dtype | rows | models | measured (ms) | predicted (ms) | error | share |",
                   "| model | precision | batch | checkpointing | static measured / predicted |",
                   "| interferer | blocks | loop | measured | predicted |",
                   "| step | status | seconds | what it gave |"):
        assert header in report
    assert "**Dry run on the CPU**" in report
    rows = list(csv.DictReader(io.StringIO((out / "comparison.csv").read_text())))
    assert tuple(rows[0]) == COMPARISON_COLUMNS
    assert {r["section"] for r in rows} == {"compute", "compute kind", "compute layer", "memory", "interference",
                                            "harness"}
    assert sum(r["section"] == "compute" for r in rows) == 3 * len(data["sections"]["compute"]["cases"])


@pytest.mark.torch
def test_report_and_collect_predict_a_returned_run_anew(dry, tmp_path):
    out, _, data = dry
    run = tmp_path / "returned"
    run.mkdir()
    for name in ("gpu_check.json", "artifacts.tar.gz"):
        (run / name).write_bytes((out / name).read_bytes())
    done = _run("report", str(run))
    assert done.returncode == 0, done.stderr
    assert (run / "report.md").read_text() == (out / "report.md").read_text()
    done = _run("collect", str(run), "--dest", str(tmp_path / "gpu"))
    assert done.returncode == 0, done.stderr
    filed = tmp_path / "gpu" / "cpu" / data["meta"]["date"]
    assert sorted(p.name for p in filed.iterdir()) == ["artifacts.tar.gz", "comparison.csv", "gpu_check.json", "report.md"]
    again = _run("collect", str(run), "--dest", str(tmp_path / "gpu"))
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "--replace" in again.stderr


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    for args, field in ((["run", "--dry-run", "--out", str(tmp_path / "o"), "--sections", "bogus"], "--sections"),
                        (["run", "--dry-run", "--out", str(tmp_path / "o"), "--budget-s", "0"], "--budget-s"),
                        (["report", str(tmp_path)], "DIR")):
        done = _run(*args)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and field in done.stderr and "Traceback" not in done.stderr


def test_without_cuda_the_gpu_run_is_refused():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = _run("run", "--out", "/tmp/unused-gpu-check")
    assert done.returncode == 2 and "--dry-run" in done.stderr and done.stderr.count("\n") == 1


@pytest.mark.torch
def test_past_the_budget_cases_are_skipped_and_the_files_still_written(tmp_path):
    done = _run("run", "--dry-run", "--out", str(tmp_path), "--budget-s", "0.001", "--sections", "compute")
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    cases = data["sections"]["compute"]["cases"]
    assert cases and all(c["error"] == "skipped: the section's time ran out" for c in cases)
    assert (tmp_path / "report.md").exists() and (tmp_path / "artifacts.tar.gz").exists()


# -- the comparison, by hand -----------------------------------------------------------------------

def test_catalog_names_from_cuda_device_names():
    assert catalog_gpu("NVIDIA H100 80GB HBM3") == "h100"
    assert catalog_gpu("NVIDIA H200") == "h200"
    assert catalog_gpu("NVIDIA A100-SXM4-80GB") == "a100"
    assert catalog_gpu("Tesla V100-SXM2-32GB") == "v100"
    assert catalog_gpu("NVIDIA GeForce RTX 4090") is None


def test_predicted_rows_are_the_roofline_by_hand():
    """One Linear of 4096 x 4096 at 2048 tokens, bf16, batch 2, on the catalog's H100 (989.4 TFLOP/s
    x 0.5, 3.35 TB/s, 5 us a pass): forward 2 x 2048 x 4096^2 x 2 FLOPs = 137.4 GFLOP -> 277.8 us
    compute-bound, bytes 2 x (16.8 M + 2 x (0 + 8.4 M)) = 67.1 MB -> 20.0 us; backward twice both."""
    layer = {"layer": "fc", "kind": "Linear", "param_count": 4096 * 4096, "fwd_flops": 2 * 2048 * 4096 * 4096,
             "bwd_flops": 4 * 2048 * 4096 * 4096, "activation_elems": 2048 * 4096}
    pred = predict_compute({"model": "one", "layers": [layer], "batch_size": 2, "optimizer": "adam"}, "h100", "bf16")
    peak = 989.4e12 * 0.5
    fwd = 5e-6 + max(2 * 2 * 2048 * 4096**2 / peak, 2 * (4096**2 + 2 * 2048 * 4096) / 3350e9)
    bwd = 5e-6 + max(2 * 4 * 2048 * 4096**2 / peak, 2 * 2 * (4096**2 + 2 * 2048 * 4096) / 3350e9)
    assert pred["rows"][0]["fwd_s"] == pytest.approx(fwd, rel=1e-9)
    assert pred["rows"][0]["bwd_s"] == pytest.approx(bwd, rel=1e-9)
    assert pred["optimizer_s"] == pytest.approx(7 * 4096**2 * 2 / 3350e9, rel=1e-9)  # Adam: 7 arrays of 2 bytes


def test_predicted_static_memory_is_16_bytes_per_published_parameter():
    """GPT-2 medium, fp32 Adam: 4 + 4 + 8 bytes per parameter, 354,823,168 of them (KerasHub's
    gpt2_medium_en, as the zoo cites); mixed precision Adam: 2 + 2 + 8 + 4 (master copy), the same 16."""
    for precision in ("fp32", "bf16"):
        pred = predict_memory({"model": "gpt2_medium", "batch_size": 1}, "h100", precision, False)
        assert pred["static_bytes"] == 16 * 354_823_168


def test_interference_prediction_is_the_wave_count_and_the_bandwidth_left_by_hand():
    """sim.costs.contention's model of the check's loops on the catalog's H100 (132 SMs, 3.35 TB/s,
    989.4 TFLOP/s bf16 x 0.5), by hand. The GEMM loop (8192^3 bf16) is compute-bound (89 ms of
    arithmetic against 16 ms of operands) and runs 128x256 tensor-core tiles, one per SM:
    8192^2 / 32,768 = 2,048 blocks, ceil(2048 / 132) = 16 waves alone; with c SMs held
    ceil(2048 / (132 - c)): c = 8 -> 17, 16 -> 18, 24 -> 19, 32 -> 21, 66 -> 32 waves. The stream
    loop is memory-bound: beside 1 TB/s of copies it keeps 3.35 - 1 TB/s (+42.6 %); beside 2.5
    TB/s the compute stream keeps half (+100 %); holding SMs costs it nothing, copies cost the
    compute-bound GEMM nothing."""
    result = {"sms": 132, "gemm": {"dim": 8192, "reps": 40, "dtype": "bf16", "flops": 2.0 * 8192**3 * 40},
              "stream": {"bytes": 3.0 * 2**26 * 2 * 200}}
    for held, waves in ((8, 17), (16, 18), (24, 19), (32, 21), (66, 32)):
        got, model = predicted_slowdown("gemm", "hold", held, None, result, "h100")
        assert got == pytest.approx(waves / 16 - 1, rel=1e-12), held
        assert predicted_slowdown("stream", "hold", held, None, result, "h100")[0] == 0.0
    assert predicted_slowdown("gemm", "copies", 0, 1e12, result, "h100")[0] == 0.0
    assert predicted_slowdown("stream", "copies", 0, 1e12, result, "h100")[0] == pytest.approx(3.35 / 2.35 - 1)
    assert predicted_slowdown("stream", "copies", 0, 2.5e12, result, "h100")[0] == pytest.approx(1.0)
    # reduce-copy kernels both hold SMs and move bytes: each loop loses what its roofline needs
    assert predicted_slowdown("gemm", "reduce_copy", 24, 1e12, result, "h100")[0] == pytest.approx(19 / 16 - 1)
    assert predicted_slowdown("stream", "reduce_copy", 24, 1e12, result, "h100")[0] == pytest.approx(3.35 / 2.35 - 1)


def test_the_models_channels_on_an_h100_node():
    """The report's headline: NCCL's ring channels on 8 H100s over NVLink 4 and a many-wave
    kernel's slowdown beside them, S / (S - c) - 1 on 132 SMs."""
    from validation.gpu_report import model_channels

    got = model_channels("h100")
    assert got["sms"] == 132 and 0 < got["channels"] < 132
    assert got["slowdown"] == pytest.approx(132 / (132 - got["channels"]) - 1)


def test_relative_error_is_predicted_minus_measured_over_measured():
    assert rel_error(1.5, 1.0) == pytest.approx(0.5)
    assert rel_error(None, 1.0) is None and rel_error(1.0, 0.0) is None and rel_error(math.inf, 1.0) is None


def test_the_gpu_run_fits_its_budget_by_flop_count():
    """The arithmetic of the GPU plan at the assumed rates (real/gpucheck/plan.py) leaves most of
    the 420 s budget to start-up, launches and the profiler; the Llama stack is Llama 2 7B's block."""
    est = estimated_compute_s(GPU_PLAN)
    assert est["total"] < 120
    assert LLAMA_STACK["hidden"] == 4096 and LLAMA_STACK["heads"] == 32
