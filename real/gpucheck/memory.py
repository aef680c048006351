"""Memory of one training step (model, batch, precision, with or without activation
checkpointing), measured three ways:

- ``static_bytes``: the parameters, their gradients and the optimizer's state after a step,
  summed over their tensors' storages (each storage once): what sim/memory.py calls params +
  grads + optimizer;
- ``saved_activation_bytes``: what the forward keeps for backward, from autograd's saved-tensor
  hooks (torch.autograd.graph.saved_tensors_hooks: every tensor a backward node saves passes the
  pack hook; each storage counted once, parameters' own storages excluded), plus, with
  checkpointing, the inputs each checkpointed block keeps: what the simulator's activation term
  models. Under bf16 autocast the saved tensors include autocast's bf16 copies of the weights;
- on a CUDA device, ``peak_allocated_bytes``: torch.cuda.max_memory_allocated over the second
  step (the first allocates the optimizer's state), counted from a reset at its start, which
  holds the parameters and the optimizer's state, and ``allocated_before_step_bytes``, what was
  allocated then. The caching allocator's reserve (``peak_reserved_bytes``) is recorded beside it.
Checkpointing wraps every transformer block in torch.utils.checkpoint (use_reentrant=False,
torch's recommended mode): the block's activations are dropped after its forward and recomputed
in backward (Megatron's "full" recomputation at block granularity).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from real.gpucheck import models as M
from real.gpucheck.plan import MEMORY_STEPS, ModelCase


class SavedBytes:
    """Bytes of the distinct storages autograd saves for backward while it is active."""

    def __init__(self, exclude: set[int]):
        self.exclude = exclude
        self.storages: dict[int, int] = {}

    def add(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr and ptr not in self.exclude and ptr not in self.storages:
            self.storages[ptr] = storage.nbytes()

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        self.add(t)
        return t

    @staticmethod
    def _unpack(t: torch.Tensor) -> torch.Tensor:
        return t

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    @property
    def total_bytes(self) -> int:
        return sum(self.storages.values())


class Checkpointed(torch.nn.Module):
    """A block whose forward runs under torch.utils.checkpoint; its input is what it keeps."""

    def __init__(self, block: torch.nn.Module):
        super().__init__()
        self.block = block
        self.saved: SavedBytes | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        if self.saved is not None and torch.is_grad_enabled():
            self.saved.add(x)
        return checkpoint(self.block, x, use_reentrant=False)


def checkpoint_blocks(model: torch.nn.Sequential) -> list[Checkpointed]:
    """Wrap every transformer block (the children between the embedding and the head) in place."""
    names = M.unit_names(model)
    wrapped = []
    for name in names[1:-1]:
        block = Checkpointed(getattr(model, name))
        setattr(model, name, block)
        wrapped.append(block)
    return wrapped


def _storage_bytes(tensors) -> int:
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            storage = t.untyped_storage()
            seen.setdefault(storage.data_ptr(), storage.nbytes())
    return sum(seen.values())


def measure_memory(case: ModelCase, batch_size: int, precision: str, checkpointing: bool,
                   device: torch.device) -> dict[str, Any]:
    from real.strategies.common import make_optimizer

    cuda = device.type == "cuda"
    M.free_cuda()
    model = M.build(case, device)  # fp32 parameters; bf16 runs under autocast
    blocks = checkpoint_blocks(model) if checkpointing else []
    x, y = M.batch(case, batch_size, device)
    loss = M.loss(case)
    optimizer = M.optimizer_name(case)
    opt = make_optimizer(model.parameters(), optimizer, 1e-4)
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bf16"
                else contextlib.nullcontext())
    params = list(model.parameters())
    record: dict[str, Any] = {"optimizer": optimizer, "params": sum(p.numel() for p in params)}
    for step in range(MEMORY_STEPS):
        last = step == MEMORY_STEPS - 1
        opt.zero_grad(set_to_none=True)
        saved = SavedBytes({p.untyped_storage().data_ptr() for p in params})
        for block in blocks:
            block.saved = saved if last else None
        if last and cuda:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            record["allocated_before_step_bytes"] = torch.cuda.memory_allocated(device)
        with autocast, saved.hooks() if last else contextlib.nullcontext():
            value = loss(model(x), y)
        value.backward()
        opt.step()
        if last:
            record["saved_activation_bytes"] = saved.total_bytes
            state = [t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
            record["params_bytes"] = _storage_bytes(params)
            record["grads_bytes"] = _storage_bytes(p.grad for p in params)
            record["optimizer_state_bytes"] = _storage_bytes(state)
            record["static_bytes"] = record["params_bytes"] + record["grads_bytes"] + record["optimizer_state_bytes"]
            if cuda:
                torch.cuda.synchronize(device)
                record["peak_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
                record["peak_reserved_bytes"] = torch.cuda.max_memory_reserved(device)
    record["loss"] = float(value.detach())
    return record
