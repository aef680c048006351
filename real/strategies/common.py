"""What every training strategy shares: the model, its data, the optimizer, the compute-only step."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

import torch

from real.models import build_model, loss_fn, make_batch

MOMENTUM = 0.9
DATA_BATCHES = 4
"""Synthetic batches per rank, made once and cycled (data generation stays out of the timing)."""


def make_optimizer(params, optimizer: str, lr: float) -> torch.optim.Optimizer:
    if optimizer == "adam":
        return torch.optim.Adam(params, lr=lr)
    return torch.optim.SGD(params, lr=lr, momentum=MOMENTUM if optimizer == "momentum" else 0.0)


def rank_batches(model: str, batch_size: int, seed: int, rank: int, count: int = DATA_BATCHES) -> list:
    """Fixed synthetic batches: rank r draws from seed * 1000 + r (a different shard per rank)."""
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    return [make_batch(model, batch_size, gen) for _ in range(count)]


@dataclass
class StepTimes:
    forward_s: float
    backward_s: float
    optimizer_s: float

    @property
    def total_s(self) -> float:
        return self.forward_s + self.backward_s + self.optimizer_s


class LocalTrainer:
    """The same model, loss and optimizer with no communication: the compute-only iteration."""

    def __init__(self, model: torch.nn.Module, name: str, optimizer: str, lr: float):
        self.model = copy.deepcopy(model)
        self.loss = loss_fn(name)
        self.opt = make_optimizer(self.model.parameters(), optimizer, lr)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> StepTimes:
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss(self.model(x), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        self.opt.step()
        t3 = time.perf_counter()
        return StepTimes(t1 - t0, t2 - t1, t3 - t2)


def base_model(scenario: Any) -> torch.nn.Module:
    """Every rank builds the model from the scenario's seed: identical initial parameters."""
    return build_model(scenario.workload.name, seed=scenario.seed)
