"""Pipeline model parallelism with torch.distributed.pipelining (it runs on gloo/CPU here).

The model's top-level children are split into ``world`` contiguous stages exactly as the
simulator splits the zoo's layers (``strategy.stage_balance``: time, flops or params; see
``child_ranges``); rank i runs stage i. Every rank sees the same batch (rank 0's data), cut into
``microbatches`` micro-batches; GPipe (all forwards, then all backwards) or 1F1B. Gradients are
scaled by 1/microbatches (``scale_grads``), so one step equals the unsplit model's step on the
whole batch with a mean loss. Bubble fraction in theory: (p-1)/(m+p-1) for both schedules.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from real.models import loss_fn
from real.strategies.common import make_optimizer
from sim.costs.pipeline import layer_unit
from sim.engine.pipeline_plan import stage_bounds
from sim.errors import ConfigError


def pipeline_scenario(scenario: Any, stages: int, microbatches: int) -> Any:
    """The scenario as the simulator would see this run: ``stages`` pipeline stages of
    ``microbatches`` micro-batches (the harness' options may set them beside the strategy)."""
    strategy = replace(scenario.strategy, pp=stages, micro_batches=microbatches,
                       kind="pipeline" if stages > 1 else scenario.strategy.kind)
    return replace(scenario, strategy=strategy)


def _child_index(layer_name: str) -> int:
    """The torch child a zoo layer starts in: CPU-sized zoo layers are named after the index of
    their first top-level child (``3``, ``1.attn.qkv``; real/layers.py's tables: ``3_conv2d``)."""
    digits = re.match(r"\d+", layer_unit(layer_name))
    if digits is None:
        raise ConfigError("workload.layers", layer_name, "names starting with their torch child's index (0, 1.attn ...)")
    return int(digits.group())


def child_ranges(scenario: Any, n_children: int) -> list[tuple[int, int]]:
    """Contiguous [lo, hi) torch-child ranges, one per stage: the simulator's own stage split
    (``sim.engine.pipeline_plan.stage_bounds``, by ``strategy.stage_balance``) mapped from zoo
    layers to torch children; a parameter-free child (activation, pool) stays with the layer before it."""
    layers = scenario.workload.layers
    starts = [_child_index(layers[lo].name) for lo, _ in stage_bounds(scenario)]
    return list(zip(starts, [*starts[1:], n_children], strict=True))


class PipelineTrainer:
    def __init__(self, model: nn.Sequential, scenario: Any, options: Any, ctx: Any):
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        self.rank, self.world = ctx.rank, ctx.world
        children = list(model)
        lo, hi = child_ranges(pipeline_scenario(scenario, self.world, options.microbatches), len(children))[self.rank]
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
