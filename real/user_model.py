"""A user's own torch module as ``MODULE:CALLABLE`` (``my_model.py:Net`` or ``package.module:build``),
built and fed synthetic inputs for ``real.derive``.

CALLABLE is a class or function called with no arguments that returns an ``nn.Module``. The
input is one tensor of ``--input-shape`` (its first dimension is the batch): floating point of
``dtype``, or integer token ids below ``tokens``. The model is built on the meta device by
default (no memory, any size); a model that reads values in its forward needs ``device='cpu'``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from sim.errors import ConfigError

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
DEVICES = ("meta", "cpu")


@contextmanager
def _on_path(folder: Path):
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        sys.path.remove(str(folder))


def load_callable(target: str, where: str = "TARGET") -> Callable[[], Any]:
    module_part, sep, attr = target.rpartition(":")
    if not sep or not module_part or not attr:
        raise ConfigError(where, target, "MODULE:CALLABLE, e.g. my_model.py:Net or mypackage.models:build")
    if module_part.endswith(".py") or "/" in module_part:
        path = Path(module_part).resolve()
        if not path.is_file():
            raise ConfigError(where, target, f"a Python file that exists ({path} does not)")
        name = f"_scalebench_user_{path.stem}_{abs(hash(str(path)))}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ConfigError(where, target, "a Python source file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            with _on_path(path.parent):
                spec.loader.exec_module(module)
        except Exception as err:  # the user's file: any error is theirs to see, in one line
            raise ConfigError(where, target, f"a file that imports cleanly ({type(err).__name__}: {_first_line(err)})") from None
    else:
        try:
            with _on_path(Path.cwd()):
                module = importlib.import_module(module_part)
        except Exception as err:
            raise ConfigError(where, target, f"an importable module ({type(err).__name__}: {_first_line(err)})") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            found = sorted(n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n)))
            raise ConfigError(where, target, f"a callable defined in {module_part} (it has: {', '.join(found) or 'none'})")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ConfigError(where, target, "a class or function that returns an nn.Module")
    return obj


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else ""


def build_user_model(target: str, device: str = "meta", dtype: str = "fp32") -> nn.Module:
    make = load_callable(target)
    torch.manual_seed(0)
    try:
        with torch.device(device):
            model = make()
    except Exception as err:
        raise ConfigError("TARGET", target, f"a callable that builds the model with no arguments on {device} "
                          f"({type(err).__name__}: {_first_line(err)})") from None
    if not isinstance(model, nn.Module):
        raise ConfigError("TARGET", target, f"a callable that returns an nn.Module (it returned {type(model).__name__})")
    model = model.to(device=device)
    if dtype != "fp32":
        model = model.to(DTYPES[dtype])
    return model.train()


def parse_shape(text: str, where: str = "--input-shape") -> tuple[int, ...]:
    try:
        shape = tuple(int(p) for p in text.replace("x", ",").split(","))
    except ValueError:
        shape = ()
    if not shape or any(d <= 0 for d in shape):
        raise ConfigError(where, text, "positive integers separated by commas, the batch first (e.g. 32,3,224,224)")
    return shape


def user_batch_of(shape: tuple[int, ...], dtype: str, tokens: int | None, device: str):
    """real.derive's BatchOf: the input at batch n (n replaces the first dimension); the loss is
    the sum of the floating outputs (its own FLOPs are not counted: not a matmul). On the meta
    device the input is a meta tensor (nothing allocated, whatever its size); on the CPU one that
    does not fit in the memory available is refused before it is made (check_input_memory)."""

    def batch_of(n: int):
        size = (n, *shape[1:])
        if device == "meta":
            return (torch.empty(size, dtype=torch.long if tokens is not None else DTYPES[dtype], device="meta"),), \
                _sum_outputs
        check_input_memory(size, dtype, tokens, shape)
        generator = torch.Generator().manual_seed(0)
        if tokens is not None:
            x = torch.randint(0, tokens, size, generator=generator)
        else:
            x = torch.randn(size, generator=generator, dtype=torch.float32).to(DTYPES[dtype])
        return (x.to(device),), _sum_outputs

    return batch_of


def input_bytes(size: tuple[int, ...], dtype: str, tokens: int | None) -> int:
    """Bytes of the input tensor as made on the CPU: int64 token ids, or an fp32 draw (then cast)."""
    elems = 1
    for d in size:
        elems *= d
    return elems * 8 if tokens is not None else elems * 4


def check_input_memory(size: tuple[int, ...], dtype: str, tokens: int | None, given: tuple[int, ...] = ()) -> None:
    """``--device cpu``: the input alone must fit in the memory available (MemAvailable); its
    activations come on top (issue 29: a 206 GB input was allocated until the machine swapped)."""
    from real.launch import memory_available_bytes

    need = input_bytes(size, dtype, tokens)
    free = memory_available_bytes()
    if free is not None and need > free:
        raise ConfigError("--input-shape", ",".join(map(str, given or size)), "an input that fits in this machine's "
                          f"available memory on --device cpu (the table is counted at batch {size[0]}: {need / 2**30:,.1f} "
                          f"GiB asked, {free / 2**30:,.1f} GiB available; "
                          "--device meta allocates nothing)")


def _sum_outputs(out: Any) -> torch.Tensor:
    from torch.utils._pytree import tree_flatten

    parts = [t.float().sum() for t in tree_flatten(out)[0]
             if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
    if not parts:
        raise ConfigError("TARGET", type(out).__name__, "a model whose output has a floating tensor that needs a gradient")
    return torch.stack(parts).sum()
