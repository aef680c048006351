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


def device_clock(device: torch.device):
    """A clock for phases of work on ``device``: on CUDA it waits for the device's queued work
    first (kernels run asynchronously: without it a forward 'takes' its launch time, and its
    kernels land in whichever phase synchronizes next)."""
    if device.type == "cuda":
        def clock() -> float:
            torch.cuda.synchronize(device)
            return time.perf_counter()

        return clock
    return time.perf_counter


class LocalTrainer:
    """The same model, loss and optimizer with no communication: the compute-only iteration."""

    def __init__(self, model: torch.nn.Module, name: str, optimizer: str, lr: float):
        self.model = copy.deepcopy(model)
        self.loss = loss_fn(name)
        self.opt = make_optimizer(self.model.parameters(), optimizer, lr)
        first = next(self.model.parameters(), None)
        self.clock = device_clock(first.device if first is not None else torch.device("cpu"))

    def step(self, x: torch.Tensor, y: torch.Tensor) -> StepTimes:
        t0 = self.clock()
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss(self.model(x), y)
        t1 = self.clock()
        loss.backward()
        t2 = self.clock()
        self.opt.step()
        t3 = self.clock()
        return StepTimes(t1 - t0, t2 - t1, t3 - t2)


def base_model(scenario: Any) -> torch.nn.Module:
    """Every rank builds the model from the scenario's seed: identical initial parameters."""
    return build_model(scenario.workload.name, seed=scenario.seed)
