"""A plan's case as a torch model: built on the device, in a dtype, with its batches, its loss,
its optimizer, and the layer table (real.derive) its profiler trace is read against."""

from __future__ import annotations

from typing import Any

import torch

from real.gpucheck.plan import ModelCase

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def architecture(case: ModelCase):
    """The case's sim.transformer.Architecture (None for a CNN): the zoo preset with the case's
    dimensions over it, or the decoder's own."""
    from sim.transformer import architecture_from_dict
    from sim.workload import zoo_architecture

    preset = zoo_architecture(case.zoo) if case.zoo else None
    if case.architecture is None:
        return preset
    return architecture_from_dict(case.architecture, where=f"{case.name}.architecture", base=preset)


def build(case: ModelCase, device: torch.device | str, seed: int = 0) -> torch.nn.Sequential:
    """The model, its parameters made directly on ``device`` (no host copy of a billion weights)."""
    from real.models import model_spec
    from real.models.transformers import build_transformer_model

    arch = architecture(case)
    torch.manual_seed(seed)
    with torch.device(device):
        if case.architecture is None and case.zoo is not None:
            return model_spec(case.zoo).build()
        return build_transformer_model(arch)


def batch(case: ModelCase, batch_size: int, device: torch.device | str, dtype: torch.dtype | None = None,
          seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) on ``device``; floating inputs in ``dtype`` (token ids stay integers)."""
    from real.models import model_spec
    from real.models.transformers import transformer_batch

    make = (model_spec(case.zoo).make_batch if case.architecture is None and case.zoo is not None
            else transformer_batch(architecture(case)))
    x, y = make(batch_size, torch.Generator().manual_seed(seed))
    if dtype is not None and x.is_floating_point():
        x = x.to(dtype)
    return x.to(device), y.to(device)


def loss(case: ModelCase):
    """The zoo's loss on fp32 logits (a reduced-precision model's logits are cast up first)."""
    from real.models import model_spec

    module = model_spec(case.zoo).loss() if case.zoo is not None else torch.nn.CrossEntropyLoss()

    def of(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return module(out.float(), target)

    return of


def optimizer_name(case: ModelCase) -> str:
    """The simulator's workload optimizer (the zoo's: momentum for CNNs, Adam for transformers)."""
    from sim.workload import workload_from_dict

    return workload_from_dict(case.workload(1)).optimizer


def derived(case: ModelCase):
    """The case's layer table and the names its rows go by in a trace (real.derive, on meta tensors)."""
    from real.derive import derive

    model = build(case, "meta")
    loss_of = loss(case)

    def batch_of(n: int) -> tuple[tuple[Any, ...], Any]:
        x, y = batch(case, n, "meta")
        return (x,), lambda out: loss_of(out, y)

    return derive(model, batch_of, case.name)


def unit_names(model: torch.nn.Sequential) -> list[str]:
    return [name for name, _ in model.named_children()]


def unit_of_row(layer: str) -> str:
    """The top-level child a table row belongs to: its qualified name's first part."""
    return layer.split(".", 1)[0]


def free_cuda() -> None:
    """Give cached blocks back after a case (the next case's peak must not see this one's)."""
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def is_out_of_memory(err: BaseException) -> bool:
    return isinstance(err, torch.cuda.OutOfMemoryError) or "out of memory" in str(err).lower()
