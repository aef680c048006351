"""Timelines: the simulated trace's processes, args and flows; the measured one in the same format;
the two drawn one above the other."""

from __future__ import annotations

import json

import pytest

from scalebench.cli import main
from sim.config import scenario_from_dict
from sim.simulate import simulate
from sim.trace import LANE_TIDS, chrome_trace


def _trace(spec: dict) -> tuple[dict, object, object]:
    scenario = scenario_from_dict(spec)
    result = simulate(scenario)
    doc = chrome_trace(result, scenario)
    json.dumps(doc, allow_nan=False)  # strict JSON
    return doc, result, scenario


def _x(doc):
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


def _process_names(doc):
    return {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}


RESNET_16 = {"name": "my-run", "workload": {"model": "resnet50"},
             "cluster": {"gpus": 16, "gpus_per_node": 8, "gpu": "v100", "intra_link": "nvlink2", "inter_link": "ib_edr"}}


def test_fast_trace_has_rank_processes_args_on_every_span_and_flows_per_bucket():
    doc, result, scenario = _trace(RESNET_16)
    assert _process_names(doc) == {1: "my-run: rank 0 (stands for all 16 identical ranks)"}
    assert doc["otherData"]["scenario"] == "my-run" and "16 identical ranks" in doc["otherData"]["limits"]
    spans = _x(doc)
    assert all(e["pid"] == 1 and e["tid"] == LANE_TIDS[e["cat"]] for e in spans)
    assert all(set(e["args"]) - {"lane"} for e in spans)  # something beyond the lane on every span
    layer = next(e for e in spans if e["name"] == "fwd stem.conv1")
    assert layer["args"]["flops"] == 32 * 236027904 and layer["args"]["params"] == 9408
    buckets = [e for e in spans if e["cat"] == "comm"]
    assert len(buckets) == len(result.buckets) and all(e["name"].startswith("allreduce bucket") for e in buckets)
    assert sum(e["args"]["bytes"] for e in buckets) == 4 * scenario.workload.param_count
    assert sum(e["args"]["layers"] for e in buckets) == len(scenario.workload.layers)
    assert {e["args"]["link"] for e in buckets} == {"ib_edr"}
    assert {e["args"]["algorithm"] for e in buckets} == {f"{scenario.strategy.backend} {scenario.strategy.collective} allreduce"}
    starts = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "s"}
    ends = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "f"}
    assert starts.keys() == ends.keys() and len(starts) == len(result.buckets)
    for b, i in zip(result.buckets, sorted(starts), strict=True):
        assert starts[i]["ts"] == pytest.approx(b.ready_s * 1e6, abs=0.01) and starts[i]["tid"] == LANE_TIDS["compute"]
        assert ends[i]["ts"] == pytest.approx(b.start_s * 1e6, abs=0.01) and ends[i]["bp"] == "e"
    assert max(e["ts"] + e["dur"] for e in spans) == pytest.approx(result.iteration_time_s * 1e6)


def test_detailed_trace_has_one_process_per_rank_and_names_parameter_servers():
    spec = {**RESNET_16, "cluster": {**RESNET_16["cluster"], "gpus": 4, "gpus_per_node": 2},
            "strategy": {"collective": "ps", "ps_servers": 2}, "simulation": {"fidelity": "detailed"}}
    doc, _, _ = _trace(spec)
    assert _process_names(doc) == {r + 1: f"my-run: rank {r}" for r in range(4)}
    buckets = [e for e in _x(doc) if e["name"].startswith(("PS push/pull", "allreduce"))]
    assert buckets and all(e["name"].startswith("PS push/pull bucket") for e in buckets)
    assert {e["args"]["algorithm"] for e in buckets} == {"parameter server (2 servers, sync)"}


def test_pipeline_trace_has_a_process_per_stage():
    spec = {**RESNET_16, "cluster": {**RESNET_16["cluster"], "gpus": 4, "gpus_per_node": 4},
            "strategy": {"kind": "pipeline", "pp": 4, "micro_batches": 4}}
    doc, _, _ = _trace(spec)
    assert sorted(_process_names(doc)) == [1, 2, 3, 4] and "pipeline stage 3" in _process_names(doc)[4]
    passes = [e for e in _x(doc) if e["name"][0] in "FB" and e["name"][1:].isdigit()]
    assert len(passes) == 4 * 2 * 4 and all(e["args"]["micro_batches"] == 4 for e in passes)


def test_simulate_names_the_default_scenario_after_its_flags(tmp_path, capsys):
    trace = tmp_path / "t.json"
    assert main(["simulate", "--model", "mlp", "--gpus", "4", "--gpus-per-node", "2", "--inter-link", "tcp_10gbe",
                 "--trace", str(trace)]) == 0
    assert json.loads(trace.read_text())["otherData"]["scenario"] == "mlp-4xv100-tcp_10gbe"


@pytest.mark.torch
def test_real_trace_has_every_ranks_phases_and_ddp_buckets(tmp_path):
    pytest.importorskip("torch")
    from real.measure import measure_point
    from real.seed_mlp import SEED_SPEC

    path = tmp_path / "real.json"
    row = measure_point(SEED_SPEC, iterations=2, warmup=1, timeout_s=30, trace_path=str(path))
    doc = json.loads(path.read_text())
    assert doc["otherData"]["source"] == "real" and doc["otherData"]["world_size"] == 2
    assert sorted(_process_names(doc)) == [1, 2]
    for pid in (1, 2):
        spans = [e for e in _x(doc) if e["pid"] == pid]
        names = [e["name"] for e in spans if e["cat"] == "compute"]
        assert names == ["forward", "backward", "optimizer step"]
        (bucket,) = [e for e in spans if e["cat"] == "comm"]
        assert bucket["args"]["bytes"] == 4 * 609  # the seeds' MLP: 609 fp32 parameters, one bucket
        forward, backward, step = (e for e in spans if e["cat"] == "compute")
        assert forward["ts"] + forward["dur"] <= backward["ts"] + 1 and backward["ts"] + backward["dur"] <= step["ts"] + 1
        assert backward["ts"] <= bucket["ts"] and bucket["ts"] + bucket["dur"] <= step["ts"] + 1  # DDP waits for it
    assert [e for e in doc["traceEvents"] if e["ph"] == "s"]  # a flow per rank's bucket
    assert row["iteration_time_s"] > 0
    out = tmp_path / "both.png"
    sim = tmp_path / "sim.json"
    assert main(["simulate", "--model", "mlp", "--gpus", "2", "--gpus-per-node", "2", "--trace", str(sim)]) == 0
    assert main(["plot", "--timeline", str(sim), str(path), "-o", str(out)]) == 0
    assert out.stat().st_size > 10_000 and out.with_suffix(".svg").exists()


def test_plot_timeline_refuses_what_is_not_a_timeline(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    assert main(["plot", "--timeline", str(bad), "-o", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--timeline" in err[0]
    assert not (tmp_path / "x.png").exists()


def _kineto_doc():
    """A torch.profiler trace as Kineto writes it (torch 2.13.0, read off one here): integer pid and
    tid for the CPU thread, 'Spans' / 'PyTorch Profiler' beside them, absolute microseconds, python
    frames, two ProfilerStep ranges; a GPU stream's kernel linked by External id."""
    t0, pid, tid = 4838179938054.0, 29585, 29585
    op = {"ph": "X", "pid": pid, "tid": tid, "cat": "cpu_op"}
    events = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": "thread 29585 (python)"}},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": t0 - 500, "dur": 10_000},
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": t0 + 9000},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": pid, "tid": tid, "ts": t0, "dur": 1000},
        {**op, "name": "aten::linear", "ts": t0 + 10, "dur": 100},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": pid, "tid": tid, "ts": t0 + 2000,
         "dur": 1000},
        {"ph": "X", "cat": "python_function", "name": "nn.Module: Linear_0", "pid": pid, "tid": tid,
         "ts": t0 + 2005, "dur": 200},
        {**op, "name": "aten::linear", "ts": t0 + 2010, "dur": 150, "args": {"External id": 7, "Sequence number": 3}},
        {**op, "name": "aten::t", "ts": t0 + 2012, "dur": 5},  # inside aten::linear: not drawn
        {**op, "name": "aten::cross_entropy_loss", "ts": t0 + 2200, "dur": 50},
        {**op, "name": "autograd::engine::evaluate_function: AddmmBackward0", "ts": t0 + 2300, "dur": 300},
        {**op, "name": "gloo:all_reduce", "ts": t0 + 2620, "dur": 200},
        {"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#SGD.step", "pid": pid, "tid": tid,
         "ts": t0 + 2850, "dur": 100},
        {"ph": "X", "cat": "kernel", "name": "sgemm_kernel", "pid": 0, "tid": "stream 7", "ts": t0 + 2050, "dur": 80,
         "args": {"External id": 7}},
    ]
    return {"schemaVersion": 1, "traceName": "step.json", "traceEvents": events}


def test_a_torch_profiler_trace_is_one_iteration_of_phases():
    """The last profiler step (ProfilerStep#1, 1,000 us from t0 + 2,000), its top-level ops and
    kernels from its start, each with its phase by torch's names; ids become small integers."""
    from real.kineto import is_profiler_trace, profiler_timeline

    doc = _kineto_doc()
    assert is_profiler_trace(doc)
    timeline = profiler_timeline(doc, "step.json")
    assert timeline["otherData"]["iteration_time_s"] == pytest.approx(1000e-6)
    assert "ProfilerStep#1 (the last of 2" in timeline["otherData"]["title"]
    spans = sorted(((e["name"], e["ts"], e["dur"], e["args"]["phase"]) for e in _x(timeline)), key=lambda s: s[1])
    assert spans == [
        ("aten::linear", pytest.approx(10), 150, "forward"),
        ("sgemm_kernel", pytest.approx(50), 80, "forward"),  # its op's phase, through the External id
        ("aten::cross_entropy_loss", pytest.approx(200), 50, "forward"),
        ("autograd::engine::evaluate_function: AddmmBackward0", pytest.approx(300), 300, "backward"),
        ("gloo:all_reduce", pytest.approx(620), 200, "gradient allreduce"),
        ("Optimizer.step#SGD.step", pytest.approx(850), 100, "optimizer step"),
    ]
    assert all(isinstance(e["pid"], int) and isinstance(e["tid"], int) for e in timeline["traceEvents"])
    assert not is_profiler_trace(_trace({"workload": {"model": "mlp"}, "cluster": {"gpus": 2}})[0])


def test_plot_timeline_draws_a_simulated_and_a_profiler_trace_together(tmp_path):
    """Kineto's mixed integer and string ids made the plot fail (TypeError sorting them)."""
    sim = tmp_path / "sim.json"
    kineto = tmp_path / "kineto.json"
    kineto.write_text(json.dumps(_kineto_doc()))
    assert main(["simulate", "--model", "mlp", "--gpus", "2", "--gpus-per-node", "2", "--trace", str(sim)]) == 0
    out = tmp_path / "both.png"
    assert main(["plot", "--timeline", str(sim), str(kineto), "-o", str(out)]) == 0
    assert out.stat().st_size > 10_000
    svg = out.with_suffix(".svg").read_text()
    assert "ProfilerStep#1" in svg and "backward" in svg and "gradient allreduce" in svg
