"""Measured layer times from a torch.profiler trace: a real CPU trace made here, and a hand-built
GPU trace whose attribution is known exactly."""

from __future__ import annotations

import json

import pytest

from sim.errors import ConfigError

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from real.derive import Derived, Row, derive  # noqa: E402
from real.kineto import layer_times_from_trace  # noqa: E402

pytestmark = pytest.mark.torch
STEPS = 3


class Wide(nn.Module):
    """A heavy layer between two light ones: 512x4096 multiply-accumulates per sample vs 16x512 and 4096x4."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(16, 512)
        self.block = nn.Sequential(nn.Linear(512, 4096), nn.ReLU())
        self.out = nn.Linear(4096, 4)

    def forward(self, x):
        return self.out(torch.tanh(self.block(self.inp(x))))


def _derived(model: nn.Module) -> Derived:
    def batch_of(n):
        return (torch.randn(n, 16),), lambda out: out.sum()

    return derive(model, batch_of, "wide")


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory):
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    model = Wide()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(512, 16), torch.randn(512, 4)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: no pool wake-ups in the ops' times

    def step():
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    step()
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        for _ in range(STEPS):
            step()
    torch.set_num_threads(threads)
    path = tmp_path_factory.mktemp("trace") / "step.json"
    prof.export_chrome_trace(str(path))
    return path, _derived(model)


def test_a_real_cpu_trace_gives_every_layer_its_time_and_conserves_the_step(cpu_trace):
    path, derived = cpu_trace
    times = layer_times_from_trace(path, derived)
    assert times.steps == STEPS and times.source == "CPU ops"
    assert [r.layer for r in derived.rows] == ["inp", "block.0", "out"]
    assert all(f > 0 and b > 0 for f, b in times.times_s)
    (inp_f, inp_b), (heavy_f, heavy_b), (out_f, out_b) = times.times_s
    # 256x and 128x the multiply-accumulates of the light layers; a shared machine's noise is a few ms per op
    assert heavy_f > 2 * max(inp_f, out_f) and heavy_b > 2 * max(inp_b, out_b)

    # Conservation, counted independently from the raw events: every top-level op inside a call of the
    # model is some layer's forward, and layers + everything else = all top-level ops of the trace.
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    roots = [e for e in events if e.get("name") == f"nn.Module: {derived.root}"]
    ops = sorted((e for e in events if e.get("cat") == "cpu_op"), key=lambda e: (e["ts"], -e["dur"]))
    top, end = [], -1.0
    for e in ops:
        if e["ts"] >= end:
            top.append(e)
            end = e["ts"] + e["dur"]
    inside = sum(e["dur"] for e in top if any(r["ts"] <= e["ts"] and e["ts"] + e["dur"] <= r["ts"] + r["dur"] for r in roots))
    fwd = sum(f for f, _ in times.times_s)
    bwd = sum(b for _, b in times.times_s)
    assert fwd * STEPS == pytest.approx(inside * 1e-6, rel=1e-9)
    assert (fwd + bwd + times.other_s) * STEPS == pytest.approx(sum(e["dur"] for e in top) * 1e-6, rel=1e-9)
    # the forward's ops take most of the model's call (the rest is Python between them)
    calls = sum(r["dur"] for r in roots) * 1e-6 / STEPS
    assert 0.5 * calls < fwd <= calls


def test_times_go_into_the_table_and_the_simulation(cpu_trace, tmp_path):
    from real.derive import render_csv
    from sim.config import scenario_from_dict
    from sim.simulate import simulate

    path, derived = cpu_trace
    times = layer_times_from_trace(path, derived)
    table = tmp_path / "t.csv"
    meta = {"name": "wide", "batch_size": 512, "times_batch_size": 512}
    table.write_text(render_csv(derived.rows, ["meta: " + json.dumps(meta)], times.times_s))
    scenario = scenario_from_dict({"workload": {"layers_file": str(table)}, "cluster": {"gpus": 1, "gpu": "cpu"}})
    result = simulate(scenario).metrics()
    assert result["forward_time_s"] == pytest.approx(sum(f for f, _ in times.times_s), rel=1e-5)
    assert result["backward_time_s"] == pytest.approx(sum(b for _, b in times.times_s), rel=1e-5)


def _x(name, ts, dur, cat="cpu_op", tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": args}


def test_a_gpu_trace_attributes_kernels_by_external_id_and_correlation(tmp_path):
    """Two layers in a root call, a residual add between them, the loss outside; backward on its
    own thread with AccumulateGrad; kernels linked both ways Kineto links them."""
    derived = Derived([Row(layer=n, kind="Linear", param_count=1, fwd_flops=1, bwd_flops=1, activation_elems=1)
                       for n in ("a", "b")], {"Linear_0": 0, "Linear_1": 1, "a": 0, "b": 1}, "Net_0")
    events = [
        _x("nn.Module: Net_0", 0, 100, cat="python_function"),
        _x("nn.Module: Linear_0", 10, 20, cat="python_function"),
        _x("aten::linear", 12, 15, **{"External id": 1, "Sequence number": 7}),
        _x("aten::addmm", 13, 10, **{"External id": 2, "Sequence number": 8}),
        _x("aten::add", 35, 5, **{"External id": 3, "Sequence number": 9}),  # between the layers: layer a's
        _x("nn.Module: Linear_1", 50, 30, cat="python_function"),
        _x("aten::linear", 52, 20, **{"External id": 4, "Sequence number": 10}),
        _x("cudaLaunchKernel", 60, 2, cat="cuda_runtime", correlation=99),
        _x("aten::mse_loss", 120, 5, **{"External id": 5, "Sequence number": 11}),  # outside the model
        _x(f"autograd::engine::evaluate_function: {'MseLossBackward0'}", 200, 9, tid=2, **{"Sequence number": 11}),
        _x("autograd::engine::evaluate_function: AddmmBackward0", 210, 20, tid=2, **{"Sequence number": 10}),
        _x("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 231, 3, tid=2),
        _x("autograd::engine::evaluate_function: AddBackward0", 240, 4, tid=2, **{"Sequence number": 9}),
        _x("autograd::engine::evaluate_function: AddmmBackward0", 250, 30, tid=2, **{"Sequence number": 8}),
        _x("cudaLaunchKernel", 252, 1, cat="cuda_runtime", tid=2, correlation=98),
        _x("gemm_fwd_a", 400, 7, cat="kernel", tid=7, **{"External id": 2, "correlation": 1}),
        _x("add_kernel", 410, 1, cat="kernel", tid=7, **{"External id": 3, "correlation": 2}),
        _x("gemm_fwd_b", 420, 11, cat="kernel", tid=7, correlation=99),  # via its launch inside layer b's op
        _x("loss_kernel", 440, 2, cat="kernel", tid=7, **{"External id": 5}),
        _x("gemm_bwd_a", 450, 13, cat="kernel", tid=7, correlation=98),
    ]
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"traceEvents": events}))
    times = layer_times_from_trace(path, derived)
    assert times.source == "GPU kernels" and times.steps == 1
    (fa, ba), (fb, bb) = times.times_s
    assert fa == pytest.approx(8e-6) and fb == pytest.approx(11e-6)  # 7 + 1 (the add) and 11
    assert ba == pytest.approx(13e-6) and bb == pytest.approx(0.0)  # only kernels count; none ran for b's backward
    assert times.other_s == pytest.approx(2e-6)  # the loss kernel


def test_a_cpu_trace_with_accumulate_grad_and_ops_between_layers(tmp_path):
    derived = Derived([Row(layer=n, kind="Linear", param_count=1, fwd_flops=1, bwd_flops=1, activation_elems=1)
                       for n in ("a", "b")], {"Linear_0": 0, "Linear_1": 1}, "Net_0")
    events = [
        _x("nn.Module: Net_0", 0, 100, cat="python_function"),
        _x("aten::to", 2, 3),  # before any layer: the first layer's
        _x("nn.Module: Linear_0", 10, 20, cat="python_function"),
        _x("aten::linear", 12, 15, **{"Sequence number": 1}),
        _x("aten::relu", 35, 5, **{"Sequence number": 2}),
        _x("nn.Module: Linear_1", 50, 30, cat="python_function"),
        _x("aten::linear", 52, 20, **{"Sequence number": 3}),
        _x("autograd::engine::evaluate_function: AddmmBackward0", 200, 20, **{"Sequence number": 3}),
        _x("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 221, 3),
        _x("autograd::engine::evaluate_function: ReluBackward0", 230, 4, **{"Sequence number": 2}),
        _x("autograd::engine::evaluate_function: AddmmBackward0", 240, 10, **{"Sequence number": 1}),
        _x("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 251, 2),
        _x("Optimizer.step#SGD.step", 300, 50),
    ]
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(events))  # a bare list of events is a trace too
    times = layer_times_from_trace(path, derived)
    (fa, ba), (fb, bb) = times.times_s
    assert (fa, fb) == (pytest.approx(23e-6), pytest.approx(20e-6))  # 3 + 15 + 5, and 20
    assert (ba, bb) == (pytest.approx(16e-6), pytest.approx(23e-6))  # 4 + 10 + 2, and 20 + 3
    assert times.other_s == pytest.approx(50e-6)


@pytest.mark.parametrize("text,words", [
    ("not json", "Chrome trace JSON"),
    (json.dumps({"traceEvents": [_x("aten::mm", 0, 1)]}), "with_stack=True"),
    (json.dumps({"traceEvents": [_x("nn.Module: Net_0", 0, 10, cat="python_function")]}), "no op ran"),
])
def test_traces_that_cannot_be_used_are_one_line_errors(tmp_path, text, words):
    path = tmp_path / "t.json"
    path.write_text(text)
    derived = Derived([Row(layer="a", kind="Linear", param_count=1, fwd_flops=1, bwd_flops=1, activation_elems=1)],
                      {"Linear_0": 0}, "Net_0")
    with pytest.raises(ConfigError, match=words) as err:
        layer_times_from_trace(path, derived)
    assert err.value.field == "--profile" and "\n" not in str(err.value)
