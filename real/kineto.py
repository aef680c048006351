"""Measured per-layer times from a torch.profiler (Kineto) trace in Chrome JSON.

Profile training steps with ``torch.profiler.profile(..., with_stack=True)`` (CPU and, on a GPU,
CUDA activities) and ``prof.export_chrome_trace("step.json")``; ``scalebench layers ... --profile
step.json`` turns the trace into the table's ``fwd_time_s`` and ``bwd_time_s`` (the mean over the
steps in the trace, at the batch the steps ran). How events become layer times:
- the model's module calls are the trace's ``nn.Module: <Class>_<k>`` python events (torch names a
  class's instances by first call, as real.derive numbers them); ``record_function`` ranges named
  after a row's module (its qualified name) and one named after the root's label work as well
  (real/gpucheck/compute.py profiles so, without with_stack). A step is one call of the root module;
- a forward op (a top-level ``cpu_op`` inside a root call) belongs to the innermost row module
  around it; ops a row's parent runs between rows (a residual add, an activation, pooling) belong
  to the row that ran last before them, the first ones to the first row;
- a backward op (``autograd::engine::evaluate_function: ...``) belongs to the row of the forward op
  with the same ``Sequence number``; ``AccumulateGrad`` (no sequence number) to the row of the
  backward op before it on its thread;
- an op's time is its device kernels' time where the trace has kernels (linked by ``External id``,
  or by ``correlation`` through the CUDA launch the op made), else the op's own CPU duration.
Not layers, and reported apart: the loss, the optimizer, and anything outside the root's calls.
Limits: a model called more than once per step, or a second instance of the root's class called
before it, breaks the numbering; ops on other threads than the forward's are not forward ops.

``profiler_timeline`` turns such a trace into one iteration in sim/trace.py's layout, for
``scalebench plot --timeline SIM.json MEASURED.json`` (module docstring of the function).
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.errors import ConfigError

if TYPE_CHECKING:  # torch-free at run time: the timeline plot reads traces without torch
    from real.derive import Derived

MODULE_PREFIX = "nn.Module: "
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "
KERNEL_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "runtime")


@dataclass(frozen=True)
class _Op:
    tid: Any
    start: float
    end: float
    dur: float
    """Seconds, as the trace gives it (end - start loses digits at the trace's absolute clock)."""
    name: str
    args: dict


@dataclass
class ProfileTimes:
    times_s: list[tuple[float, float]]
    """(forward, backward) seconds per row, the mean over ``steps``."""
    steps: int
    source: str
    """'GPU kernels' or 'CPU ops'."""
    other_s: float
    """Per step: time of ops outside the layers (loss, optimizer, data movement)."""

    def summary_line(self, path: str) -> str:
        fwd, bwd = (sum(t[i] for t in self.times_s) for i in (0, 1))
        return (f"fwd_time_s / bwd_time_s: mean of {self.steps} step(s) of torch.profiler trace {Path(path).name} "
                f"({self.source}): forward {fwd * 1e3:.4g} ms, backward {bwd * 1e3:.4g} ms, outside the layers "
                f"(loss, optimizer, ...) {self.other_s * 1e3:.4g} ms per step")


TRACE_MAX_BYTES = 2 * 2**30
"""A profiler trace of a few steps is MiB to hundreds of MiB; past 2 GiB it is not one (a device, a dump)."""


def _load(path: str | Path) -> Any:
    from sim.fileio import read_input_text

    text = read_input_text("--profile", path, what="a Chrome trace JSON written by torch.profiler",
                           limit_bytes=TRACE_MAX_BYTES)
    try:
        return json.loads(text)
    except ValueError as err:
        raise ConfigError("--profile", str(path), f"a Chrome trace JSON written by torch.profiler "
                          f"({getattr(err, 'strerror', None) or type(err).__name__})") from None


def trace_metadata(path: str | Path) -> dict[str, Any]:
    """What ``scalebench real --profile`` wrote beside the events (real/profiled.py: model,
    batch_size, steps, world_size, device); empty for a trace made elsewhere."""
    data = _load(path)
    meta = data.get("scalebench") if isinstance(data, dict) else None
    return meta if isinstance(meta, dict) else {}


def _events(path: str | Path) -> list[dict]:
    data = _load(path)
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ConfigError("--profile", str(path), "a Chrome trace JSON (an object with traceEvents, or a list)")
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]


def _span(e: dict) -> _Op:
    start, dur = float(e["ts"]) * 1e-6, float(e.get("dur") or 0) * 1e-6
    return _Op(e.get("tid"), start, start + dur, dur, str(e.get("name", "")), e.get("args") or {})


def _top_level(ops: list[_Op]) -> tuple[list[_Op], dict[int, _Op]]:
    """Ops not inside another op on their thread, and each op's top-level ancestor (by id)."""
    top, owner = [], {}
    by_tid: dict[Any, list[_Op]] = defaultdict(list)
    for op in ops:
        by_tid[op.tid].append(op)
    for spans in by_tid.values():
        spans.sort(key=lambda o: (o.start, -o.end))
        current = None
        for op in spans:
            if current is None or op.start >= current.end:
                current = op
                top.append(op)
            owner[id(op)] = current
    return top, owner


def layer_times_from_trace(path: str | Path, derived: Derived) -> ProfileTimes:
    """Per-row (forward, backward) seconds of ``derived``'s table from the trace (module docstring)."""
    events = _events(path)
    modules, ops, launches, kernels = [], [], [], []
    for e in events:
        cat, name = e.get("cat"), str(e.get("name", ""))
        if cat == "python_function" and name.startswith(MODULE_PREFIX):
            modules.append((_span(e), name[len(MODULE_PREFIX):]))
        elif cat == "user_annotation" and (name in derived.modules or name == derived.root):
            modules.append((_span(e), name))
        elif cat == "cpu_op":
            ops.append(_span(e))
        elif cat in RUNTIME_CATS:
            launches.append(_span(e))
        elif cat in KERNEL_CATS:
            kernels.append(_span(e))
    roots = sorted((span for span, label in modules if label == derived.root), key=lambda s: s.start)
    if not roots:
        raise ConfigError("--profile", str(path), f"a trace with the model's module calls ('{MODULE_PREFIX}{derived.root}'): "
                          "profile with torch.profiler.profile(..., with_stack=True)")
    top, owner = _top_level(ops)
    device_s = _device_time(top, owner, ops, launches, kernels)
    duration = (lambda op: device_s.get(id(op), 0.0)) if kernels else (lambda op: op.dur)

    row_of_op = _forward_rows(roots, modules, top, derived)
    fwd, bwd = [0.0] * len(derived.rows), [0.0] * len(derived.rows)
    row_of_seq = {}
    for op in ops:
        row = row_of_op.get(id(owner[id(op)]))
        if row is not None and "Sequence number" in op.args:
            row_of_seq[op.args["Sequence number"]] = row
    attributed = 0.0
    for op in top:
        if id(op) in row_of_op:
            fwd[row_of_op[id(op)]] += duration(op)
            attributed += duration(op)
    previous: dict[Any, int | None] = {}
    for op in sorted((o for o in top if o.name.startswith(BACKWARD_PREFIX)), key=lambda o: o.start):
        seq = op.args.get("Sequence number")
        row = row_of_seq.get(seq) if seq is not None else previous.get(op.tid)
        if seq is not None:
            previous[op.tid] = row
        if row is not None:
            bwd[row] += duration(op)
            attributed += duration(op)
    if not attributed:
        raise ConfigError("--profile", str(path), f"a trace of this model: no op ran inside its layers "
                          f"({len(roots)} call(s) of {derived.root} found)")
    total = sum(duration(op) for op in top)
    steps = len(roots)
    return ProfileTimes([(f / steps, b / steps) for f, b in zip(fwd, bwd, strict=True)], steps,
                        "GPU kernels" if kernels else "CPU ops", (total - attributed) / steps)


def _forward_rows(roots: list[_Op], modules: list[tuple[_Op, str]], top: list[_Op], derived: Derived) -> dict[int, int]:
    """Top-level forward op (by id) -> row: the innermost row module around it, else the last row
    module started before it in the same root call, else the first row."""
    row_spans = sorted(((span, derived.modules[label]) for span, label in modules if label in derived.modules),
                       key=lambda item: (item[0].start, -item[0].end))
    starts = [span.start for span, _ in row_spans]
    out = {}
    for root in roots:
        inside = [op for op in top if op.tid == root.tid and root.start <= op.start and op.end <= root.end]
        for op in inside:
            i = bisect.bisect_right(starts, op.start)
            row, last = None, None
            for span, r in reversed(row_spans[:i]):
                if span.start < root.start:
                    break
                if span.tid != op.tid:
                    continue
                if last is None:
                    last = r
                if span.end >= op.end:
                    row = r
                    break
            out[id(op)] = row if row is not None else (last if last is not None else 0)
    return out


def _device_time(top: list[_Op], owner: dict[int, _Op], ops: list[_Op], launches: list[_Op],
                 kernels: list[_Op]) -> dict[int, float]:
    """Kernel seconds per top-level op (by id): a kernel's ``External id`` names its op; else its
    ``correlation`` names a CUDA launch, which lies inside its op on the CPU thread."""
    if not kernels:
        return {}
    by_external = {op.args["External id"]: owner[id(op)] for op in ops if "External id" in op.args}
    by_tid: dict[Any, list[_Op]] = defaultdict(list)
    for op in top:
        by_tid[op.tid].append(op)
    starts = {}
    for tid, spans in by_tid.items():
        spans.sort(key=lambda o: o.start)
        starts[tid] = [o.start for o in spans]
    by_correlation = {}
    for launch in launches:
        spans = by_tid.get(launch.tid, [])
        i = bisect.bisect_right(starts.get(launch.tid, []), launch.start) - 1
        if i >= 0 and spans[i].end >= launch.end and "correlation" in launch.args:
            by_correlation[launch.args["correlation"]] = spans[i]
    out: dict[int, float] = defaultdict(float)
    for kernel in kernels:
        op = by_external.get(kernel.args.get("External id")) or by_correlation.get(kernel.args.get("correlation"))
        if op is not None:
            out[id(op)] += kernel.dur
    return out


PROFILER_CATS = ("cpu_op", "user_annotation", "python_function", *KERNEL_CATS, *RUNTIME_CATS)
STEP_PREFIX = "ProfilerStep#"
OPTIMIZER_STEP = "Optimizer.step"
COLLECTIVE_MARKS = ("all_reduce", "allreduce", "reduce_scatter", "all_gather", "allgather", "record_param_comms")


def is_profiler_trace(doc: Any) -> bool:
    """A torch.profiler (Kineto) Chrome trace, as opposed to one of sim/trace.py's (which carry
    ``otherData.source``): its events carry Kineto's categories."""
    if isinstance(doc, dict) and isinstance(doc.get("otherData"), dict) and "source" in doc["otherData"]:
        return False
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    return isinstance(events, list) and any(isinstance(e, dict) and e.get("cat") in PROFILER_CATS for e in events[:5000])


def _phase(op: _Op, first_backward_s: float | None) -> str:
    """Which part of a training iteration a top-level op is, by torch's own names: backward ops
    are autograd's ``evaluate_function``s, the optimizer's step its ``Optimizer.step#...`` range,
    collectives c10d's ops (``gloo:all_reduce``, ``nccl:all_reduce``, ``record_param_comms``);
    the rest is forward before the first backward op and other after it (zero_grad, the loss'
    seed, data movement)."""
    name = op.name
    if name.startswith(BACKWARD_PREFIX):
        return "backward"
    if name.startswith(OPTIMIZER_STEP):
        return "optimizer step"
    if any(mark in name.lower() for mark in COLLECTIVE_MARKS):
        return "gradient allreduce"
    if name.startswith("Optimizer."):
        return "other"
    return "forward" if first_backward_s is None or op.start < first_backward_s else "other"


def profiler_timeline(doc: Any, name: str = "torch.profiler trace") -> dict[str, Any]:
    """One iteration of a torch.profiler trace in sim/trace.py's layout (what ``scalebench plot
    --timeline`` draws beside a simulated one): the last ``ProfilerStep#N`` range (the whole trace
    where there is none), on each CPU thread its top-level ops and on each device stream its
    kernels, times from the step's start, each span's ``args.phase`` forward / backward /
    optimizer step / gradient allreduce / other (``_phase``); python frames (``with_stack``) and
    the profiler's own spans are left out. Process and thread ids become small integers (Kineto
    mixes integer ids with names such as 'Spans')."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    events = [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]
    steps = sorted((e for e in events if str(e.get("name", "")).startswith(STEP_PREFIX)), key=lambda e: e["ts"])
    ops = [(_span(e), e) for e in events if e.get("cat") in ("cpu_op", "user_annotation")
           and not str(e.get("name", "")).startswith(STEP_PREFIX)]
    kernels = [(_span(e), e) for e in events if e.get("cat") in KERNEL_CATS]
    if not ops and not kernels:
        raise ConfigError("--timeline", name, "a torch.profiler trace with CPU ops or device kernels")
    if steps:  # microseconds, as the trace has them: seconds at its absolute clock lose digits
        lo_us, hi_us = float(steps[-1]["ts"]), float(steps[-1]["ts"]) + float(steps[-1].get("dur") or 0)
        which = f"{steps[-1]['name']} (the last of {len(steps)} profiler steps)"
    else:
        lo_us = min(float(e["ts"]) for _, e in ops + kernels)
        hi_us = max(float(e["ts"]) + float(e.get("dur") or 0) for _, e in ops + kernels)
        which = "the whole trace (no ProfilerStep ranges: profile with a schedule and prof.step())"
    keyed = {}
    raw = {}
    for op, e in ops + kernels:
        if float(e["ts"]) >= lo_us and float(e["ts"]) + float(e.get("dur") or 0) <= hi_us + 1e-3:
            keyed.setdefault((str(e.get("pid")), str(e.get("tid"))), []).append((op, e))
            raw[id(op)] = e
    tops = {}
    for key, spans in keyed.items():
        top, _ = _top_level([op for op, _ in spans])
        tops[key] = top
    backward = [op.start for top in tops.values() for op in top if op.name.startswith(BACKWARD_PREFIX)]
    first_backward = min(backward) if backward else None
    phase_of_external = {op.args["External id"]: _phase(op, first_backward)
                         for top in tops.values() for op in top if "External id" in op.args}
    names = {}
    for e in doc.get("traceEvents", []) if isinstance(doc, dict) else []:
        if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") in ("process_name", "thread_name"):
            names[(e["name"], str(e.get("pid")), str(e.get("tid")) if e["name"] == "thread_name" else None)] = \
                (e.get("args") or {}).get("name")
    out: list[dict[str, Any]] = []
    pids: dict[str, int] = {}
    for tid_number, key in enumerate(sorted(tops, key=lambda k: min(op.start for op in tops[k])), start=1):
        pid_text, tid_text = key
        pid = pids.setdefault(pid_text, len(pids) + 1)
        is_device = any(e.get("cat") in KERNEL_CATS for op, e in keyed[key])
        thread = names.get(("thread_name", pid_text, tid_text)) or (f"stream {tid_text}" if is_device else f"thread {tid_text}")
        out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid_number, "args": {"name": thread}})
        for op in tops[key]:
            phase = (phase_of_external.get(op.args.get("External id"), "other") if is_device
                     else _phase(op, first_backward))
            e = raw[id(op)]
            out.append({"name": op.name, "ph": "X", "pid": pid, "tid": tid_number, "ts": float(e["ts"]) - lo_us,
                        "dur": float(e.get("dur") or 0), "args": {"phase": phase}})
    for pid_text, pid in pids.items():
        proc = names.get(("process_name", pid_text, None)) or f"process {pid_text}"
        out.insert(0, {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": proc}})
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {"title": f"{name}: {which}", "source": "real", "iteration_time_s": (hi_us - lo_us) * 1e-6,
                          "limits": "torch.profiler trace: the top-level ops of each CPU thread and the kernels of each "
                                    "device stream inside one profiler step; python frames left out"}}
