"""Data parallel with torch's DistributedDataParallel.

- bucket size: ``strategy.bucket_mib`` is DDP's ``bucket_cap_mb``;
- overlap on (the simulator's ``overlap: true``): DDP's own autograd hooks start each bucket's
  allreduce during backward;
- overlap off: backward under ``no_sync()`` (no communication), then one explicit allreduce per
  bucket of the same sizes, in backward order, after backward ends;
- compression: a communication hook from real/strategies/hooks.py (overlap on only).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from real.models import loss_fn
from real.strategies.common import make_optimizer
from sim.engine.plan import DDP_FIRST_BUCKET_BYTES, assign_buckets


class DDPTrainer:
    def __init__(self, model: torch.nn.Module, scenario: Any, options: Any, device: torch.device):
        strategy = scenario.strategy
        self.overlap = strategy.overlap
        self.bucket_bytes = strategy.bucket_bytes
        self.ddp = DDP(model.to(device), bucket_cap_mb=strategy.bucket_bytes / 2**20,
                       device_ids=[device.index] if device.type == "cuda" else None)
        self.loss = loss_fn(scenario.workload.name)
        self.opt = make_optimizer(self.ddp.parameters(), scenario.workload.optimizer, options.lr)
        self.hook_state = None
        if options.compression != "none":
            if not self.overlap:
                from sim.errors import ConfigError

                raise ConfigError("real.compression", options.compression, "none when strategy.overlap is false")
            from real.strategies.hooks import register_compression

            self.hook_state = register_compression(self.ddp, options.compression)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> float:
        self.opt.zero_grad(set_to_none=True)
        if self.overlap:
            loss = self.loss(self.ddp(x), y)
            loss.backward()
        else:
            with self.ddp.no_sync():
                loss = self.loss(self.ddp(x), y)
                loss.backward()
            allreduce_in_buckets(list(self.ddp.parameters()), self.bucket_bytes)
        self.opt.step()
        return float(loss.detach())

    def bucket_sizes_bytes(self) -> list[int]:
        """The buckets DDP reduces after its timed iterations (overlap on), else the explicit
        buckets of allreduce_in_buckets. DDP's logging data keeps the buckets it started with:
        one bucket of all parameters, while after the first iteration it rebuilds them in the
        order gradients arrived (small_transformer at bucket_cap_mb=0.25: logged [2672640],
        reduced 8 buckets of 0.26-0.56 MB, torch 2.13), so the reducer's live buckets are read."""
        if self.overlap:
            live = _reducer_bucket_bytes(self.ddp)
            if live:
                return live
            sizes = self.ddp._get_ddp_logging_data().get("bucket_sizes", "")
            if isinstance(sizes, str) and sizes.strip():
                return [int(s) for s in sizes.split(",")]
        params = [p for p in self.ddp.parameters() if p.requires_grad][::-1]
        groups = assign_buckets([p.numel() * p.element_size() for p in params], self.bucket_bytes,
                                DDP_FIRST_BUCKET_BYTES)
        return [sum(params[i].numel() * params[i].element_size() for i in g) for g in groups]

    def info(self) -> dict[str, Any]:
        path = self.hook_state.path if self.hook_state is not None else "allreduce_fp32"
        return {"comm_path": path}


def _reducer_bucket_bytes(ddp: DDP) -> list[int]:
    """Bytes of each gradient bucket DDP's reducer holds now (a private torch API: empty where
    it is missing)."""
    try:
        buckets = ddp.reducer._get_zeros_like_grad_buckets()
    except (AttributeError, RuntimeError):
        return []
    return [int(b.buffer().numel() * b.buffer().element_size()) for b in buckets]


def allreduce_in_buckets(params: list[torch.nn.Parameter], bucket_bytes: int) -> None:
    """Average gradients across ranks: flatten into buckets (backward order), allreduce, copy back."""
    world = dist.get_world_size()
    grads = [p.grad for p in reversed(params) if p.grad is not None]
    groups = assign_buckets([g.numel() * g.element_size() for g in grads], bucket_bytes, DDP_FIRST_BUCKET_BYTES)
    for group in groups:
        tensors = [grads[i] for i in group]
        flat = torch.cat([t.reshape(-1) for t in tensors])
        dist.all_reduce(flat)
        flat.div_(world)
        offset = 0
        for t in tensors:
            t.copy_(flat[offset:offset + t.numel()].view_as(t))
            offset += t.numel()
