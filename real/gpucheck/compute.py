"""Compute times of one case (model, dtype, batch) on a device, three ways:

1. **the whole training step**, phase by phase (forward + loss, backward, optimizer step), timed
   with ``DeviceTimer`` marks (CUDA events on a GPU), the mean over ``plan.steps`` after
   ``plan.warmup`` (with the IQR, real.results.mean_iqr);
2. **per unit** (each top-level child on a detached input, the harness' layer profile,
   real.profile_layers.unit_times), timed with the same marks: forward and backward of each;
3. **per layer**: ``plan.profiled_steps`` whole steps under torch.profiler, every row module of
   the case's layer table (real.derive) and the model itself wrapped in a ``record_function``
   range of the row's name, read by real.kineto (each op's device kernels, attributed to the row
   whose module ran it; backward ops by their forward's sequence number). Annotations instead
   of ``with_stack``: the trace stays small and the profiler's Python tracing out of the kernels'
   launches.
A case that runs out of device memory is recorded as such; the next one runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from real.devtime import DeviceTimer
from real.gpucheck import models as M
from real.gpucheck.plan import ModelCase, Plan


def measure_case(case: ModelCase, dtype: str, batch_size: int, plan: Plan, device: torch.device, derived,
                 trace_path: Path) -> dict[str, Any]:
    """One case's record (see the module docstring); ``trace_path``: where its profiler trace goes."""
    from real.profile_layers import unit_times
    from real.strategies.common import make_optimizer

    timer = DeviceTimer(device)
    tdtype = M.TORCH_DTYPES[dtype]
    model = M.build(case, device).to(tdtype)
    x, y = M.batch(case, batch_size, device, tdtype)
    loss = M.loss(case)
    optimizer = M.optimizer_name(case)
    opt = make_optimizer(model.parameters(), optimizer, 1e-4)
    record: dict[str, Any] = {"optimizer": optimizer, "clock": timer.clock, "params": sum(p.numel() for p in model.parameters())}
    record["step"] = _timed_steps(model, x, y, loss, opt, timer, plan.warmup, plan.steps)
    units = unit_times(model, x, y, loss, plan.unit_reps, 1, timer)
    record["units"] = [{"unit": name, "fwd_s": f, "bwd_s": b}
                       for name, f, b in zip(M.unit_names(model), units["fwd_s"], units["bwd_s"], strict=True)]
    record["layers"] = _profiled_layers(model, x, y, loss, opt, derived, device, plan.profiled_steps, trace_path)
    return record


def _timed_steps(model, x, y, loss, opt, timer: DeviceTimer, warmup: int, steps: int) -> dict[str, Any]:
    from real.results import mean_iqr

    phases: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": [], "total": []}
    for i in range(warmup + steps):
        m0 = timer.mark()
        opt.zero_grad(set_to_none=True)
        value = loss(model(x), y)
        m1 = timer.mark()
        value.backward()
        m2 = timer.mark()
        opt.step()
        m3 = timer.mark()
        timer.sync()
        if i >= warmup:
            phases["forward"].append(timer.seconds(m0, m1))
            phases["backward"].append(timer.seconds(m1, m2))
            phases["optimizer"].append(timer.seconds(m2, m3))
            phases["total"].append(timer.seconds(m0, m3))
    out: dict[str, Any] = {"steps": steps, "warmup": warmup}
    for name, values in phases.items():
        mean, iqr = mean_iqr(values)
        out[f"{name}_s"], out[f"{name}_iqr_s"] = mean, iqr
    return out


class RowAnnotations:
    """Forward hooks that open a ``record_function`` range named after each row's module (its
    qualified name, a key of ``derived.modules``) and the model (``derived.root``), so that
    real.kineto finds the rows in a trace made without ``with_stack``."""

    def __init__(self, model: torch.nn.Module, derived):
        self._stack: list[Any] = []
        self._handles = []
        names = {module: name for name, module in model.named_modules()}
        for module, name in names.items():
            label = derived.root if module is model else (name if name in derived.modules else None)
            if label is None:
                continue
            self._handles.append(module.register_forward_pre_hook(self._opener(label)))
            self._handles.append(module.register_forward_hook(self._close))

    def _opener(self, label: str):
        def open_range(module, args) -> None:
            rf = torch.autograd.profiler.record_function(label)
            rf.__enter__()
            self._stack.append(rf)

        return open_range

    def _close(self, module, args, out) -> None:
        self._stack.pop().__exit__(None, None, None)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


def _profiled_layers(model, x, y, loss, opt, derived, device: torch.device, steps: int, path: Path) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    from real.kineto import layer_times_from_trace

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    annotations = RowAnnotations(model, derived)
    try:
        with profile(activities=activities) as prof:
            for _ in range(steps):
                opt.zero_grad(set_to_none=True)
                loss(model(x), y).backward()
                opt.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
    finally:
        annotations.remove()
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))
    times = layer_times_from_trace(path, derived)
    rows = [{"layer": row.layer, "kind": row.kind, "fwd_s": f, "bwd_s": b}
            for row, (f, b) in zip(derived.rows, times.times_s, strict=True)]
    return {"source": times.source, "steps": times.steps, "other_s": times.other_s, "rows": rows}
