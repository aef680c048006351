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
with parameters that runs twice in one forward cannot be a row and is refused. A module whose
parameters its parent uses without calling it (nn.MultiheadAttention's ``out_proj``, whose weight
goes to F.multi_head_attention_forward; torchvision's Swin attention's ``qkv`` and ``proj``)
counts in the row of its nearest called ancestor, where those FLOPs ran.

Grouped and depthwise convolutions: torch's formula for convolution_backward counts the weight
gradient as one dense convolution over all C_in x C_out channel pairs (flop_counter.py
``conv_backward_flop``: conv_flop_count(t(x), t(grad_out), ...) never divides by ``groups``), so a
depthwise layer of 480 groups came out at 481 x its forward. ``flop_counter`` counts it per group
(``_conv_backward_flop``), and every row's backward is checked against its forward
(``MAX_BACKWARD_RATIO``).
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
MAX_BACKWARD_RATIO = {"layer": 3.0, "core": 3.5}
"""The most a row's backward FLOPs may be, per forward FLOP. Every matmul and convolution's
backward is an input gradient and a weight gradient of one forward's work each (flop_counter.py:
mm and conv backward formulas): 2; fused attention recomputes its scores (sdpa_backward_flop_count:
5 batched matmuls against the forward's 2): 2.5 for a parameter-free ``core`` row; one more for a
forward recomputed in the backward (activation checkpointing). More is a miscount (a grouped
convolution counted dense was 481x), refused with the row's name rather than written."""
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


def _conv_backward_flop(grad_out_shape, x_shape, w_shape, _bias, _stride, _padding, _dilation, transposed,
                        _output_padding, groups, output_mask, out_shape, **_kwargs) -> int:
    """torch.utils.flop_counter's ``conv_backward_flop`` (torch 2.13.0) with the weight gradient
    counted per group. Input gradient: a transposed convolution of grad_out with the weight,
    whose shape (C_out, C_in / g, k...) already makes it per group: N x H_out W_out x k x C_out x
    C_in / g x 2, the forward's count. Weight gradient: torch counts conv(x^T, grad_out^T) as
    dense, N x H_out W_out x k x C_in x C_out x 2; each output channel's filter sees only its
    group's C_in / g inputs, so the work is that / g (both channel counts divide by g). By hand,
    a depthwise 5x5 conv of 480 channels on 14 x 14: forward 480 x 196 x 25 x 2 = 4,704,000 per
    sample; backward 2 x that (481 x before)."""
    from torch.utils.flop_counter import conv_flop_count

    def t(shape):
        return [shape[1], shape[0], *shape[2:]]

    flops = 0
    if output_mask[0]:
        flops += conv_flop_count(grad_out_shape, w_shape, out_shape[0], not transposed)
    if output_mask[1]:
        if transposed:
            dense = conv_flop_count(t(grad_out_shape), t(x_shape), t(out_shape[1]), transposed=False)
        else:
            dense = conv_flop_count(t(x_shape), t(grad_out_shape), t(out_shape[1]), transposed=False)
        flops += dense // max(1, int(groups))
    return flops


def flop_counter() -> FlopCounterMode:
    """torch's FLOP counter with grouped convolutions' backward counted per group (``_conv_backward_flop``)."""
    return FlopCounterMode(display=False, custom_mapping={torch.ops.aten.convolution_backward: _conv_backward_flop})


def _replay(module: nn.Module, args) -> tuple[int, int]:
    """(forward, backward) FLOPs of ``module`` on ``args``: count forward + backward, subtract forward."""
    with flop_counter() as counter:
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

    def __init__(self, model: nn.Module, counter: FlopCounterMode,
                 adopted: dict[nn.Module, list[nn.Parameter]] | None = None):
        self.counter = counter
        self.adopted = adopted or {}
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

    def owned(self, module: nn.Module) -> list[nn.Parameter]:
        """The module's own parameters and those it uses of children it never calls (``adopted``)."""
        return _own_params(module) + self.adopted.get(module, [])

    def _settle(self, elems_here: int) -> None:
        total = self.counter.get_total_flops()
        delta, self._total = total - self._total, total
        if not delta:
            return
        if not self._stack:
            raise DeriveError(f"{delta} FLOPs outside the model's modules")
        top = self._stack[-1]
        if not self.owned(top) and top not in self.own_fwd:
            self.order.append(("core", top, elems_here))
        self.own_fwd[top] += delta

    def _pre(self, module, args) -> None:
        self._settle(_numel(args))
        self._stack.append(module)
        if module in self.inputs:  # a reused activation or pool is harmless; a reused layer is not
            if self.owned(module):
                raise DeriveError(f"layer {self.names[module]!r} runs twice in one forward; a layer table cannot "
                                  "represent reuse")
            return
        self.first_calls.append(module)
        self.inputs[module] = _fresh(args)
        if self.owned(module):
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


def _trace_forward(model: nn.Module, args: tuple, counter: FlopCounterMode,
                   adopted: dict[nn.Module, list[nn.Parameter]] | None = None) -> tuple[_ForwardTrace, Any]:
    trace = _ForwardTrace(model, counter, adopted)
    try:
        out = model(*args)
    finally:
        trace.remove()
    return trace, out


def _signature(trace: _ForwardTrace) -> list[tuple[str, str, int, int]]:
    """(row kind, module, own forward FLOPs, output elements) per row, in order."""
    return [(what, trace.names[m], trace.own_fwd.get(m, 0), elems if what == "core" else trace.out_elems[m])
            for what, m, elems in trace.order]


def _adoptions(model: nn.Module, batch_of: BatchOf) -> dict[nn.Module, list[nn.Parameter]]:
    """Parameters of modules the forward never calls but whose parameters get a gradient (their
    parent used them: nn.MultiheadAttention's out_proj), for the nearest called ancestor. Found
    by one forward and backward at batch 1; the gradients it leaves are cleared."""
    args, loss_of = batch_of(1)
    with flop_counter() as counter:
        trace, out = _trace_forward(model, args, counter)
        loss_of(out).backward()
    used = {id(p) for p in model.parameters() if p.grad is not None}
    for p in model.parameters():
        p.grad = None
    parent = {child: m for m in model.modules() for child in m.children()}
    adopted: dict[nn.Module, list[nn.Parameter]] = defaultdict(list)
    for module in model.modules():
        params = [p for p in _own_params(module) if id(p) in used]
        if module in trace.inputs or not params:
            continue
        ancestor = parent.get(module)
        while ancestor is not None and ancestor not in trace.inputs:
            ancestor = parent.get(ancestor)
        if ancestor is not None:
            adopted[ancestor].extend(params)
    return dict(adopted)


def derive(model: nn.Module, batch_of: BatchOf, name: str, batch: int = COUNT_BATCH) -> Derived:
    """The per-sample layer table of ``model`` (see the module docstring for the method)."""
    adopted = _adoptions(model, batch_of)
    with flop_counter() as counter:
        args, loss_of = batch_of(batch)
        trace, out = _trace_forward(model, args, counter, adopted)
        fwd_total = counter.get_total_flops()
        loss_of(out).backward()
        bwd_total = counter.get_total_flops() - fwd_total
    with flop_counter() as counter:  # batch 1: linearity check, per-sample activations
        one = _signature(_trace_forward(model, batch_of(1)[0], counter, adopted)[0])
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
        _check_backward_ratio(name, where, what, fwd, bwd)
        params = [p for p in trace.owned(module) if id(p) not in seen_params]
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


def _check_backward_ratio(name: str, where: str, what: str, fwd: int, bwd: int) -> None:
    """A row's backward at most MAX_BACKWARD_RATIO[what] x its forward (one FLOP of slack for a
    row of no forward FLOPs); more is refused, naming the row and the ratio."""
    limit = MAX_BACKWARD_RATIO[what]
    if bwd > limit * fwd + (1 if fwd == 0 else 0):
        ratio = f"{bwd / fwd:.3g}x" if fwd else "backward FLOPs with no forward ones"
        raise DeriveError(f"{name}: {where or 'the model'!r} counts {ratio} its forward FLOPs in its backward ("
                          f"{bwd:,} against {fwd:,}); a layer's backward is at most {limit:g}x (input and weight "
                          "gradients, attention's recomputed scores, a checkpointed forward): torch's FLOP counter "
                          "miscounts one of its ops")


def _check_totals(name: str, rows: list[Row], model: nn.Module, fwd: int, bwd: int) -> None:
    sums = (sum(r.param_count for r in rows), sum(r.fwd_flops for r in rows), sum(r.bwd_flops for r in rows))
    expected = (sum(p.numel() for p in model.parameters()), fwd, bwd)
    if sums[1:] == expected[1:] and sums[0] < expected[0]:
        unused = sorted(n for n, p in model.named_parameters() if p.grad is None)
        raise DeriveError(f"{name}: {expected[0] - sums[0]:,} parameters get no gradient in a training step "
                          f"({', '.join(unused[:4])}{' ...' if len(unused) > 4 else ''}): a layer table holds the "
                          "parameters a step trains; leave the unused ones out of the model")
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
