"""Derive a layer table (the simulator's *what*) from any torch module, with torch's FLOP counter.

Method (torch.utils.flop_counter.FlopCounterMode, which counts matmuls and convolutions at
2 FLOPs per multiply-accumulate):
- rows are the modules that own parameters, in forward execution order (forward pre-hooks);
  FLOPs that a parameter-free module performs outside its children (attention's QK^T and AV)
  become a pseudo-layer ``<module>.core`` with 0 parameters, placed where they ran;
- forward FLOPs of a row are its module's own FLOPs; backward FLOPs are counted by replaying
  the module on its recorded inputs (same requires_grad flags, so the first layer computes no
  input gradient) through forward + backward and subtracting the forward (FlopCounterMode
  merges the two). Whole-model forward and backward totals must equal the sums of the rows;
- FLOPs are counted at batch COUNT_BATCH and divided by it (the forward is checked to be linear
  in the batch against a batch-1 pass); activation_elems is the row's output elements per
  sample, the growth from batch 1 to COUNT_BATCH (a batch-independent output, such as a position
  embedding's, counts 0);
- large models are built on the meta device (nothing is allocated: Llama 2 70B included).
Shared parameters (tied embeddings) count once, at the first module that uses them. A module
with parameters that runs twice in one forward cannot be a row and is refused.
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Callable
from dataclasses import astuple, dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.flop_counter import FlopCounterMode

from sim.workload import LAYER_COLUMNS

COUNT_BATCH = 2
BatchOf = Callable[[int], tuple[tuple[Any, ...], Callable[[Any], torch.Tensor]]]
"""batch size -> (the model's positional inputs, a loss of the model's output)."""


class DeriveError(RuntimeError):
    """The model cannot be described by a layer table (reuse, FLOPs outside modules, ...)."""


@dataclass(frozen=True, kw_only=True)
class Row:
    layer: str
    kind: str
    param_count: int
    fwd_flops: int
    bwd_flops: int
    activation_elems: int


@dataclass
class Derived:
    rows: list[Row]
    modules: dict[str, int] = field(default_factory=dict)
    """Names a trace may use for a row's module -> row index: the profiler's ``nn.Module:``
    label (``Linear_3``: class name and per-class index in first-call order, as torch.profiler
    numbers modules with with_stack=True) and the module's qualified name (for record_function)."""
    root: str = ""
    """The profiler's label of the model itself (its first module called)."""


def _numel(value) -> int:
    return sum(t.numel() for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor))


def _own_params(module: nn.Module) -> list[nn.Parameter]:
    return list(module.parameters(recurse=False))


def _fresh(args):
    """New leaf tensors with the recorded requires_grad flags, for an isolated replay."""
    return tree_map(lambda t: t.detach().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t, args)


def _replay(module: nn.Module, args) -> tuple[int, int]:
    """(forward, backward) FLOPs of ``module`` on ``args``: count forward + backward, subtract forward."""
    with FlopCounterMode(display=False) as counter:
        out = module(*_fresh(args))
        fwd = counter.get_total_flops()
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
        if outs:
            torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])
        return fwd, counter.get_total_flops() - fwd


class _ForwardTrace:
    """Forward hooks on every module: execution order, recorded inputs, output sizes, and where
    FLOPs happened outside any child (the counter's running total between two hook events
    belongs to the innermost module open at that time)."""

    def __init__(self, model: nn.Module, counter: FlopCounterMode):
        self.counter = counter
        self.order: list[tuple[str, nn.Module, int | None]] = []  # ("layer"|"core", module, core activation)
        self.first_calls: list[nn.Module] = []
        self.inputs: dict[nn.Module, tuple] = {}
        self.out_elems: dict[nn.Module, int] = {}
        self.own_fwd: dict[nn.Module, int] = defaultdict(int)
        self.names = {m: n for n, m in model.named_modules()}
        self._stack: list[nn.Module] = []
        self._total = 0
        self._handles = []
        for module in model.modules():
            self._handles.append(module.register_forward_pre_hook(self._pre))
            self._handles.append(module.register_forward_hook(self._post))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()

    def _settle(self, elems_here: int) -> None:
        total = self.counter.get_total_flops()
        delta, self._total = total - self._total, total
        if not delta:
            return
        if not self._stack:
            raise DeriveError(f"{delta} FLOPs outside the model's modules")
        top = self._stack[-1]
        if not _own_params(top) and top not in self.own_fwd:
            self.order.append(("core", top, elems_here))
        self.own_fwd[top] += delta

    def _pre(self, module, args) -> None:
        self._settle(_numel(args))
        self._stack.append(module)
        if module in self.inputs:  # a reused activation or pool is harmless; a reused layer is not
            if _own_params(module):
                raise DeriveError(f"layer {self.names[module]!r} runs twice in one forward; a layer table cannot "
                                  "represent reuse")
            return
        self.first_calls.append(module)
        self.inputs[module] = _fresh(args)
        if _own_params(module):
            self.order.append(("layer", module, None))

    def _post(self, module, args, out) -> None:
        self._settle(_numel(out))
        self._stack.pop()
        self.out_elems[module] = _numel(out)

    def profiler_labels(self) -> dict[nn.Module, str]:
        """torch.profiler's ``nn.Module: <Class>_<k>`` names: k counts a class's instances in first-call order."""
        seen: dict[str, int] = defaultdict(int)
        labels = {}
        for module in self.first_calls:
            cls = type(module).__name__
            labels[module] = f"{cls}_{seen[cls]}"
            seen[cls] += 1
        return labels


def _trace_forward(model: nn.Module, args: tuple, counter: FlopCounterMode) -> tuple[_ForwardTrace, Any]:
    trace = _ForwardTrace(model, counter)
    try:
        out = model(*args)
    finally:
        trace.remove()
    return trace, out


def _signature(trace: _ForwardTrace) -> list[tuple[str, str, int, int]]:
    """(row kind, module, own forward FLOPs, output elements) per row, in order."""
    return [(what, trace.names[m], trace.own_fwd.get(m, 0), elems if what == "core" else trace.out_elems[m])
            for what, m, elems in trace.order]


def derive(model: nn.Module, batch_of: BatchOf, name: str, batch: int = COUNT_BATCH) -> Derived:
    """The per-sample layer table of ``model`` (see the module docstring for the method)."""
    with FlopCounterMode(display=False) as counter:
        args, loss_of = batch_of(batch)
        trace, out = _trace_forward(model, args, counter)
        fwd_total = counter.get_total_flops()
        loss_of(out).backward()
        bwd_total = counter.get_total_flops() - fwd_total
    with FlopCounterMode(display=False) as counter:  # batch 1: linearity check, per-sample activations
        one = _signature(_trace_forward(model, batch_of(1)[0], counter)[0])
    big = _signature(trace)
    if [r[:2] for r in big] != [r[:2] for r in one] or any(b[2] != batch * o[2] for b, o in zip(big, one, strict=True)):
        raise DeriveError(f"{name}: forward rows or FLOPs at batch {batch} are not {batch} x those at batch 1 "
                          "(the first input dimension must be the batch)")
    if not trace.order:
        raise DeriveError(f"{name}: no module with parameters ran in the forward")
    labels = trace.profiler_labels()
    rows, seen_params, modules = [], set(), {}
    for (what, module, _), (_, where, own_fwd, elems), (*_, elems_one) in zip(trace.order, big, one, strict=True):
        fwd, bwd = _replay(module, trace.inputs[module])
        for child in module.children():
            if child in trace.inputs:
                child_fwd, child_bwd = _replay(child, trace.inputs[child])
                fwd, bwd = fwd - child_fwd, bwd - child_bwd
        if fwd != own_fwd or bwd % batch:
            raise DeriveError(f"{name}: {where!r} replays to ({fwd}, {bwd}) FLOPs; it ran {own_fwd} forward")
        params = [p for p in _own_params(module) if id(p) not in seen_params]
        seen_params.update(id(p) for p in params)
        modules[labels[module]] = modules[where or type(module).__name__] = len(rows)
        rows.append(Row(
            layer=(f"{where}.core" if where else "core") if what == "core" else (where or type(module).__name__),
            kind="core" if what == "core" else type(module).__name__,
            param_count=sum(p.numel() for p in params),
            fwd_flops=fwd // batch, bwd_flops=bwd // batch,
            activation_elems=(elems - elems_one) // (batch - 1),
        ))
    _check_totals(name, rows, model, fwd_total // batch, bwd_total // batch)
    return Derived(rows, modules, labels[trace.first_calls[0]])


def _check_totals(name: str, rows: list[Row], model: nn.Module, fwd: int, bwd: int) -> None:
    sums = (sum(r.param_count for r in rows), sum(r.fwd_flops for r in rows), sum(r.bwd_flops for r in rows))
    expected = (sum(p.numel() for p in model.parameters()), fwd, bwd)
    if sums != expected:
        raise DeriveError(f"{name}: rows sum to (params, fwd, bwd) = {sums}, the whole model to {expected}")


def render_csv(rows: list[Row], header: list[str], times: list[tuple[float, float]] | None = None) -> str:
    """The table as CSV: ``# `` comment lines, then LAYER_COLUMNS (+ fwd_time_s, bwd_time_s)."""
    buf = io.StringIO()
    for line in header:
        buf.write(f"# {line}\n")
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*LAYER_COLUMNS, *(("fwd_time_s", "bwd_time_s") if times else ())])
    for i, row in enumerate(rows):
        writer.writerow([*astuple(row), *(f"{t:.6g}" for t in times[i])] if times else astuple(row))
    return buf.getvalue()


def method_lines(device: str) -> list[str]:
    return [
        f"FLOPs from torch.utils.flop_counter.FlopCounterMode (matmul and convolution, 2 FLOPs per multiply-accumulate) "
        f"at batch {COUNT_BATCH} on {device} tensors, divided by {COUNT_BATCH}; bwd = (forward + backward) - forward.",
        "Rows: modules that own parameters, in forward order; '<module>.core' = parameter-free matmuls inside a module "
        f"(attention's QK^T and AV). activation_elems = output elements per sample (growth from batch 1 to {COUNT_BATCH}).",
    ]
