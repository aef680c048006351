"""torch definitions of the zoo's models, the single source of both worlds' layer tables.

``build_model(name)`` returns an ``nn.Sequential`` whose top-level children are the units a
pipeline may split between; ``make_batch(name, batch_size, generator)`` gives synthetic
inputs and targets; ``loss_fn(name)`` the training loss. ``real.derive`` (``scalebench layers
--zoo``) turns these definitions into the tables under ``sim/data/workloads/``.
"""

from __future__ import annotations

from real.models.small import SMALL_MODELS, ModelSpec
from real.models.zoo_cnn import CNN_MODELS
from real.models.zoo_transformers import TRANSFORMER_MODELS

MODELS: dict[str, ModelSpec] = {**SMALL_MODELS, **CNN_MODELS, **TRANSFORMER_MODELS}
"""name -> spec; the CPU-sized models run in the harness, the large ones (``cpu_sized=False``)
are built on the meta device to derive their tables."""


def model_spec(name: str) -> ModelSpec:
    if name not in MODELS:
        from sim.errors import ConfigError

        raise ConfigError("workload", name, sorted(MODELS))
    return MODELS[name]


def build_model(name: str, seed: int = 0):
    import torch

    torch.manual_seed(seed)
    return model_spec(name).build()


def make_batch(name: str, batch_size: int, generator):
    return model_spec(name).make_batch(batch_size, generator)


def loss_fn(name: str):
    return model_spec(name).loss()
