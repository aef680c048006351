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
    zoo: dict[str, Any] | None = None
    """The zoo entry's metadata (description, source, default_batch_size, optimizer, published
    totals with their source) that ``real.zoo_tables`` writes to ``<name>.yaml``."""


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


class SelfAttention(nn.Module):
    """Multi-head attention written with matmuls (not SDPA) so torch's FLOP counter sees it on CPU.

    ``causal`` masks future positions (GPT); BERT's encoder attends both ways. The QK^T and AV
    matmuls have no parameters: the layer tables list them as the pseudo-layer ``<attn>.core``.
    """

    def __init__(self, d_model: int, heads: int, causal: bool = True):
        super().__init__()
        self.heads = heads
        self.causal = causal
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        if self.causal:
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~mask, float("-inf"))
        y = (att.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


class CausalSelfAttention(SelfAttention):
    """GPT's masked self-attention (kept under its own name for the harness)."""

    def __init__(self, d_model: int, heads: int):
        super().__init__(d_model, heads, causal=True)


class Block(nn.Module):
    """Pre-norm transformer block (GPT-2 layout): attention and an MLP (4x wide by default), each residual."""

    def __init__(self, d_model: int, heads: int, ffn: int | None = None):
        super().__init__()
        ffn = ffn or 4 * d_model
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, ffn)
        self.act = nn.GELU()
        self.out = nn.Linear(ffn, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.out(self.act(self.fc(self.ln2(x))))


class LMHead(nn.Module):
    """Final layer norm and the vocabulary projection; logits flattened for cross-entropy.

    GPT-2 projects with the token embedding's matrix and no bias (``bias=False``, then tie
    ``head.weight`` to the embedding's, as ``real.models.large`` does).
    """

    def __init__(self, d_model: int, vocab: int, bias: bool = True):
        super().__init__()
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.ln(x)).flatten(0, 1)


def transformer_fwd_flops(*, layers: int, seq: int, d_model: int, vocab: int, extra_per_token: int = 0) -> int:
    """Forward FLOPs per sequence of a GPT/BERT-style stack with a 4x MLP and a vocabulary projection.

    Kaplan et al. 2020 (arXiv:2001.08361) Table 1, per token: 2N (N = 12 n_layer d^2 weights)
    + attention + 2 d n_vocab (de-embedding). Their attention term 2 n_layer n_ctx d counts the
    causal half of one matmul; a FLOP counter sees QK^T and AV in full: 4 n_layer n_ctx d.
    ``extra_per_token`` adds FLOPs outside that table (BERT's MLM transform, 2 d^2).
    """
    per_token = 2 * 12 * layers * d_model**2 + 4 * layers * seq * d_model + 2 * d_model * vocab
    return seq * (per_token + extra_per_token)


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


ARITHMETIC = "closed form of the architecture (2 FLOPs per multiply-accumulate), not a measurement"

_V, _T, _D, _L = (SMALL_TRANSFORMER[k] for k in ("vocab", "seq", "d_model", "layers"))

SMALL_MODELS: dict[str, ModelSpec] = {
    "mlp": ModelSpec(
        build_mlp, mlp_batch, nn.MSELoss, info={"input": "1", "task": "regression y = exp(x)"},
        zoo={
            "description": "The seeds' regression MLP 1-16-32-1 (tanh), fitting y = exp(x)",
            "source": "Distributed TensorFlow hands-on posts (2016-2017)",
            "default_batch_size": 64,
            "optimizer": "sgd",
            "published": {
                "params": (1 + 1) * 16 + (16 + 1) * 32 + (32 + 1) * 1,
                "fwd_gflops_per_sample": 2 * (1 * 16 + 16 * 32 + 32 * 1) / 1e9,
                "source": ARITHMETIC,
            },
        },
    ),
    "small_cnn": ModelSpec(
        build_small_cnn, image_batch, nn.CrossEntropyLoss, info={"input": "3x32x32"},
        zoo={
            "description": "A small CNN on 3x32x32 images (3 conv 3x3 + 2 linear), CIFAR-10-sized, runs on a CPU",
            "source": "scalebench (real/models/small.py)",
            "default_batch_size": 32,
            "optimizer": "momentum",
            "published": {
                "params": (27 + 1) * 32 + (288 + 1) * 64 + (576 + 1) * 64 + (1024 + 1) * 128 + (128 + 1) * 10,
                "fwd_gflops_per_sample": 2 * (32 * 32 * 32 * 27 + 16 * 16 * 64 * 288 + 8 * 8 * 64 * 576
                                              + 1024 * 128 + 128 * 10) / 1e9,
                "source": ARITHMETIC,
            },
        },
    ),
    "small_transformer": ModelSpec(
        lambda: build_transformer(**SMALL_TRANSFORMER),
        token_batch(SMALL_TRANSFORMER["vocab"], SMALL_TRANSFORMER["seq"]),
        nn.CrossEntropyLoss,
        info=dict(SMALL_TRANSFORMER),
        zoo={
            "description": f"A small GPT-style transformer ({_L} layers, d {_D}, {SMALL_TRANSFORMER['heads']} heads, "
                           f"seq {_T}, vocab {_V}), runs on a CPU",
            "source": "scalebench (real/models/small.py), GPT-2 block layout (Radford et al. 2019)",
            "default_batch_size": 16,
            "optimizer": "adam",
            "published": {
                # embeddings + blocks (12d^2 + 13d each) + final LN + untied head with bias
                "params": (_V + _T) * _D + _L * (12 * _D**2 + 13 * _D) + 2 * _D + (_D + 1) * _V,
                "fwd_gflops_per_sample": transformer_fwd_flops(layers=_L, seq=_T, d_model=_D, vocab=_V) / 1e9,
                "source": ARITHMETIC + "; FLOPs as Kaplan et al. 2020 Table 1 with full QK^T and AV",
            },
        },
    ),
}
