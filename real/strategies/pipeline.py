"""Pipeline model parallelism with torch.distributed.pipelining (it runs on gloo/CPU here).

The model's top-level children are split into ``world`` contiguous stages, balanced by
parameter count; rank i runs stage i. Every rank sees the same batch (rank 0's data), cut into
``microbatches`` micro-batches; GPipe (all forwards, then all backwards) or 1F1B. Gradients are
scaled by 1/microbatches (``scale_grads``), so one step equals the unsplit model's step on the
whole batch with a mean loss. Bubble fraction in theory: (p-1)/(m+p-1) for both schedules.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from real.models import loss_fn
from real.strategies.common import make_optimizer


def split_points(param_counts: list[int], stages: int) -> list[tuple[int, int]]:
    """Contiguous [lo, hi) child ranges, one per stage, each non-empty, closing a stage once it
    holds its share of the parameters (greedy on the running total)."""
    n = len(param_counts)
    if stages > n:
        raise ValueError(f"{stages} stages for {n} layers")
    total = sum(param_counts) or n
    weights = param_counts if sum(param_counts) else [1] * n
    bounds, lo, acc = [], 0, 0.0
    for s in range(stages - 1):
        hi = lo + 1
        acc += weights[lo]
        # extend while the stage is below its share and enough layers remain for the other stages
        while hi < n - (stages - 1 - s) and acc + weights[hi] <= total * (s + 1) / stages:
            acc += weights[hi]
            hi += 1
        bounds.append((lo, hi))
        lo = hi
    bounds.append((lo, n))
    return bounds


class PipelineTrainer:
    def __init__(self, model: nn.Sequential, scenario: Any, options: Any, ctx: Any):
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        self.rank, self.world = ctx.rank, ctx.world
        children = list(model)
        lo, hi = split_points([sum(p.numel() for p in c.parameters()) for c in children], self.world)[self.rank]
        self.module = nn.Sequential(*children[lo:hi])
        self.layers = (lo, hi)
        stage = PipelineStage(self.module, self.rank, self.world, ctx.device)
        self.loss = loss_fn(scenario.workload.name)
        self.m = options.microbatches
        schedule = ScheduleGPipe if options.schedule == "gpipe" else Schedule1F1B
        self.schedule = schedule(stage, n_microbatches=self.m, loss_fn=self.loss)
        self.opt = make_optimizer(self.module.parameters(), scenario.workload.optimizer, options.lr)
        self.summary = {"workers": 1, "pipeline_stages": self.world, "microbatches": self.m}
        self.last_output: torch.Tensor | None = None

    def step(self, x: torch.Tensor, y: torch.Tensor) -> float:
        """Every rank passes the same (x, y); only the first stage feeds x, only the last uses y."""
        self.opt.zero_grad(set_to_none=True)
        last = self.rank == self.world - 1
        losses: list[torch.Tensor] = []
        if self.rank == 0 and not last:
            self.schedule.step(x)
        elif last:
            out = self.schedule.step(target=y, losses=losses)
            self.last_output = out.detach() if isinstance(out, torch.Tensor) else None
        else:
            self.schedule.step()
        self.opt.step()
        return float(torch.stack(losses).mean()) if losses else float("nan")

    def info(self) -> dict[str, Any]:
        return {"comm_path": f"send/recv activations, stage {self.rank} = layers {self.layers[0]}..{self.layers[1] - 1}"}
