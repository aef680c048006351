"""Derive the zoo's layer tables (sim/data/workloads/<name>.csv and .yaml) from the torch models.

    python scripts/derive_layer_tables.py                 # every model in real.models.MODELS
    python scripts/derive_layer_tables.py resnet50 mlp    # only these
    python scripts/derive_layer_tables.py --check         # compare with the committed files, write nothing

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
  sample, the growth from batch 1 to COUNT_BATCH (a batch-independent output, such as the
  position embedding's, counts 0);
- large models are built on the meta device (nothing is allocated: GPT-2 XL included); the
  CPU-sized ones are derived on real CPU tensors and on meta, and the two must agree.
Shared parameters (tied embeddings) count once, at the first module that uses them.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from collections import defaultdict
from dataclasses import astuple, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import yaml  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils._pytree import tree_flatten, tree_map  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from real.models import MODELS, model_spec  # noqa: E402
from sim.fileio import atomic_write_text  # noqa: E402
from sim.workload import LAYER_COLUMNS  # noqa: E402

COUNT_BATCH = 2
OUT_DIR = ROOT / "sim" / "data" / "workloads"
YAML_KEYS = ("description", "source", "default_batch_size", "default_batch_size_source", "optimizer",
             "optimizer_source", "flop_convention", "published")


@dataclass(frozen=True, kw_only=True)
class Row:
    layer: str
    kind: str
    param_count: int
    fwd_flops: int
    bwd_flops: int
    activation_elems: int


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
            raise RuntimeError(f"{delta} FLOPs outside the model's modules")
        top = self._stack[-1]
        if not _own_params(top) and top not in self.own_fwd:
            self.order.append(("core", top, elems_here))
        self.own_fwd[top] += delta

    def _pre(self, module, args) -> None:
        self._settle(_numel(args))
        self._stack.append(module)
        if module in self.inputs:  # a reused activation or pool is harmless; a reused layer is not
            if _own_params(module):
                raise RuntimeError(f"layer {self.names[module]!r} runs twice; a layer table cannot represent reuse")
            return
        self.inputs[module] = _fresh(args)
        if _own_params(module):
            self.order.append(("layer", module, None))

    def _post(self, module, args, out) -> None:
        self._settle(_numel(out))
        self._stack.pop()
        self.out_elems[module] = _numel(out)


def _trace_forward(model: nn.Module, x: torch.Tensor, counter: FlopCounterMode) -> tuple[_ForwardTrace, torch.Tensor]:
    trace = _ForwardTrace(model, counter)
    try:
        out = model(x)
    finally:
        trace.remove()
    return trace, out


def _signature(trace: _ForwardTrace) -> list[tuple[str, str, int, int]]:
    """(row kind, module, own forward FLOPs, output elements) per row, in order."""
    return [(what, trace.names[m], trace.own_fwd.get(m, 0), elems if what == "core" else trace.out_elems[m])
            for what, m, elems in trace.order]


def derive_table(name: str, device: str = "meta", batch: int = COUNT_BATCH) -> list[Row]:
    """The per-sample layer table of model ``name`` (see the module docstring for the method)."""
    spec = model_spec(name)
    torch.manual_seed(0)
    with torch.device(device):
        model = spec.build()

    def batch_of(n: int) -> tuple[torch.Tensor, ...]:
        return tuple(t.to(device) for t in spec.make_batch(n, torch.Generator().manual_seed(0)))

    with FlopCounterMode(display=False) as counter:
        x, y = batch_of(batch)
        trace, out = _trace_forward(model, x, counter)
        fwd_total = counter.get_total_flops()
        spec.loss()(out, y).backward()
        bwd_total = counter.get_total_flops() - fwd_total
    with FlopCounterMode(display=False) as counter:  # batch 1: linearity check, per-sample activations
        one = _signature(_trace_forward(model, batch_of(1)[0], counter)[0])
    big = _signature(trace)
    if [r[:2] for r in big] != [r[:2] for r in one] or any(b[2] != batch * o[2] for b, o in zip(big, one, strict=True)):
        raise RuntimeError(f"{name}: forward rows or FLOPs at batch {batch} are not {batch} x those at batch 1")

    rows, seen_params = [], set()
    for (what, module, _), (_, where, own_fwd, elems), (*_, elems_one) in zip(trace.order, big, one, strict=True):
        fwd, bwd = _replay(module, trace.inputs[module])
        for child in module.children():
            if child in trace.inputs:
                child_fwd, child_bwd = _replay(child, trace.inputs[child])
                fwd, bwd = fwd - child_fwd, bwd - child_bwd
        if fwd != own_fwd or bwd % batch:
            raise RuntimeError(f"{name}: {where!r} replays to ({fwd}, {bwd}) FLOPs; it ran {own_fwd} forward")
        params = [p for p in _own_params(module) if id(p) not in seen_params]
        seen_params.update(id(p) for p in params)
        rows.append(Row(
            layer=f"{where}.core" if what == "core" else where,
            kind="core" if what == "core" else type(module).__name__,
            param_count=sum(p.numel() for p in params),
            fwd_flops=fwd // batch, bwd_flops=bwd // batch,
            activation_elems=(elems - elems_one) // (batch - 1),
        ))
    _check_totals(name, rows, model, fwd_total // batch, bwd_total // batch)
    return rows


def _check_totals(name: str, rows: list[Row], model: nn.Module, fwd: int, bwd: int) -> None:
    sums = (sum(r.param_count for r in rows), sum(r.fwd_flops for r in rows), sum(r.bwd_flops for r in rows))
    expected = (sum(p.numel() for p in model.parameters()), fwd, bwd)
    if sums != expected:
        raise RuntimeError(f"{name}: rows sum to (params, fwd, bwd) = {sums}, the whole model to {expected}")


def derive_checked(name: str) -> tuple[list[Row], str]:
    """The table and the device it came from; CPU-sized models must give the same table on meta."""
    if not model_spec(name).cpu_sized:
        return derive_table(name, "meta"), "meta"
    rows = derive_table(name, "cpu")
    if derive_table(name, "meta") != rows:
        raise RuntimeError(f"{name}: the table on meta tensors differs from the one on CPU tensors")
    return rows, "cpu (identical on meta)"


def command_for(name: str) -> str:
    return f"python scripts/derive_layer_tables.py {name}"


def render_csv(name: str, rows: list[Row], device: str) -> str:
    buf = io.StringIO()
    buf.write(
        f"# {name}: layer table per sample, generated by `{command_for(name)}` (torch {torch.__version__}); "
        "do not edit by hand.\n"
        f"# FLOPs from torch.utils.flop_counter.FlopCounterMode (matmul and convolution, 2 FLOPs per "
        f"multiply-accumulate) at batch {COUNT_BATCH} on {device} tensors, divided by {COUNT_BATCH}; "
        "bwd = (forward + backward) - forward.\n"
        "# Rows: modules that own parameters, in forward order; '<module>.core' = parameter-free matmuls "
        "inside a module (attention's QK^T and AV). activation_elems = output elements per sample "
        f"(growth from batch 1 to {COUNT_BATCH}).\n"
    )
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(LAYER_COLUMNS)
    for row in rows:
        writer.writerow(astuple(row))
    return buf.getvalue()


def render_yaml(name: str, rows: list[Row]) -> str:
    zoo = model_spec(name).zoo or {}
    meta = {"name": name, **{k: zoo[k] for k in YAML_KEYS if k in zoo}}
    meta["derived"] = {
        "params": sum(r.param_count for r in rows),
        "fwd_flops_per_sample": sum(r.fwd_flops for r in rows),
        "bwd_flops_per_sample": sum(r.bwd_flops for r in rows),
        "source": f"sum of {name}.csv",
    }
    meta["layers_file"] = f"{name}.csv"
    header = f"# Generated by `{command_for(name)}`; edit the ModelSpec in real/models/ instead.\n"
    return header + yaml.safe_dump(meta, sort_keys=False, width=1000, allow_unicode=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help=f"model names (default: all of {', '.join(MODELS)})")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="output folder (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="compare with the files in --out; write nothing")
    args = parser.parse_args(argv)
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        print(f"error: unknown model {unknown[0]!r}; allowed: {', '.join(MODELS)}", file=sys.stderr)
        return 2
    stale = []
    for name in args.models or list(MODELS):
        rows, device = derive_checked(name)
        files = {f"{name}.csv": render_csv(name, rows, device), f"{name}.yaml": render_yaml(name, rows)}
        for filename, text in files.items():
            path = args.out / filename
            if args.check:
                if not path.exists() or path.read_text(encoding="utf-8") != text:
                    stale.append(str(path))
            else:
                atomic_write_text(path, text)
        params, fwd = sum(r.param_count for r in rows), sum(r.fwd_flops for r in rows)
        print(f"{name:18s} {len(rows):4d} rows  {params:>14,d} params  {fwd / 1e9:10.4f} GFLOPs fwd/sample")
    if stale:
        print("stale: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
