"""The CPU-sized members of the zoo: the seeds' MLP, a small CNN, a small transformer."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class ModelSpec:
    build: Callable[[], nn.Sequential]
    make_batch: Callable[[int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]
    loss: Callable[[], nn.Module]
    cpu_sized: bool = True
    """Small enough to train in the harness on a 2-core machine."""
    info: dict[str, Any] | None = None


# -- the seeds' regression MLP: y = exp(x), 1 -> 16 -> 32 -> 1 -----------------------------

def build_mlp() -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(1, 16), nn.Tanh(),
        nn.Linear(16, 32), nn.Tanh(),
        nn.Linear(32, 1),
    )


def mlp_batch(batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """x uniform in [-1, 1), y = exp(x): the seeds' hands-on regression."""
    x = torch.rand(batch_size, 1, generator=generator) * 2 - 1
    return x, torch.exp(x)


# -- a small CNN on 3x32x32 images, 10 classes ---------------------------------------------

def build_small_cnn() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 4 * 4, 128), nn.ReLU(),
        nn.Linear(128, 10),
    )


def image_batch(batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(batch_size, 3, 32, 32, generator=generator)
    y = torch.randint(0, 10, (batch_size,), generator=generator)
    return x, y


# -- a small GPT-style transformer ---------------------------------------------------------

SMALL_TRANSFORMER = {"vocab": 1024, "seq": 64, "d_model": 128, "heads": 4, "layers": 2}


class Embedding(nn.Module):
    """Token plus learned position embedding."""

    def __init__(self, vocab: int, seq: int, d_model: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq, d_model)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        return self.tok(idx) + self.pos(positions)


class CausalSelfAttention(nn.Module):
    """Attention written with matmuls (not SDPA) so torch's FLOP counter sees it on CPU."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


class Block(nn.Module):
    """Pre-norm transformer block (GPT-2 layout): attention and a 4x MLP, each residual."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.act = nn.GELU()
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.out(self.act(self.fc(self.ln2(x))))


class LMHead(nn.Module):
    """Final layer norm and the vocabulary projection; logits flattened for cross-entropy."""

    def __init__(self, d_model: int, vocab: int):
        super().__init__()
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.ln(x)).flatten(0, 1)


def build_transformer(vocab: int, seq: int, d_model: int, heads: int, layers: int) -> nn.Sequential:
    return nn.Sequential(
        Embedding(vocab, seq, d_model),
        *[Block(d_model, heads) for _ in range(layers)],
        LMHead(d_model, vocab),
    )


def token_batch(vocab: int, seq: int) -> Callable[[int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]:
    def make(batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.randint(0, vocab, (batch_size, seq + 1), generator=generator)
        return idx[:, :-1], idx[:, 1:].reshape(-1)

    return make


SMALL_MODELS: dict[str, ModelSpec] = {
    "mlp": ModelSpec(build_mlp, mlp_batch, nn.MSELoss, info={"input": "1", "task": "regression y = exp(x)"}),
    "small_cnn": ModelSpec(build_small_cnn, image_batch, nn.CrossEntropyLoss, info={"input": "3x32x32"}),
    "small_transformer": ModelSpec(
        lambda: build_transformer(**SMALL_TRANSFORMER),
        token_batch(SMALL_TRANSFORMER["vocab"], SMALL_TRANSFORMER["seq"]),
        nn.CrossEntropyLoss,
        info=dict(SMALL_TRANSFORMER),
    ),
}
