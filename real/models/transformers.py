"""Transformers in plain torch, built from ``sim.transformer.Architecture``: BERT (post-norm
encoder, masked-LM head), GPT-2 (pre-norm decoder) and Llama (RMSNorm, rotary positions, SwiGLU,
grouped-query attention). Attention is written as explicit matmuls so torch's FLOP counter sees
it; dropout is left out (no parameters, no counted FLOPs). ``sim.transformer.transformer_rows``
is the closed form of the tables ``real.derive`` counts from these modules; the tests hold the
two equal row by row.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import torch
from torch import nn

from real.models.small import Block, Embedding, LMHead, SelfAttention, token_batch
from sim.transformer import Architecture

BERT_MASK_TOKEN = 103
"""[MASK] in BERT's uncased WordPiece vocabulary."""


# -- BERT (post-norm encoder, masked-LM head tied to the token embedding) -----------------------

class BertEmbedding(Embedding):
    """Token + position + segment embeddings, then LayerNorm (all tokens in segment 0)."""

    def __init__(self, vocab: int, seq: int, d_model: int):
        super().__init__(vocab, seq, d_model)
        self.seg = nn.Embedding(2, d_model)
        self.ln = nn.LayerNorm(d_model, eps=1e-12)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.ln(super().forward(idx) + self.seg(torch.zeros_like(idx)))


class EncoderLayer(nn.Module):
    """BERT's post-norm layer: x = LN(x + attn(x)); x = LN(x + W2 gelu(W1 x))."""

    def __init__(self, d_model: int, heads: int, ffn: int | None = None):
        super().__init__()
        ffn = ffn or 4 * d_model
        self.attn = SelfAttention(d_model, heads, causal=False)
        self.ln1 = nn.LayerNorm(d_model, eps=1e-12)
        self.fc = nn.Linear(d_model, ffn)
        self.act = nn.GELU()
        self.out = nn.Linear(ffn, d_model)
        self.ln2 = nn.LayerNorm(d_model, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.out(self.act(self.fc(x))))


class MLMHead(nn.Module):
    """Masked-LM head: dense + GELU + LayerNorm, then the decoder (tied to the token embedding)."""

    def __init__(self, d_model: int, vocab: int):
        super().__init__()
        self.dense = nn.Linear(d_model, d_model)
        self.act = nn.GELU()
        self.ln = nn.LayerNorm(d_model, eps=1e-12)
        self.decoder = nn.Linear(d_model, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.ln(self.act(self.dense(x)))).flatten(0, 1)


def build_bert(arch: Architecture) -> nn.Sequential:
    units: OrderedDict[str, nn.Module] = OrderedDict(embed=BertEmbedding(arch.vocab, arch.max_positions, arch.hidden))
    for i in range(arch.layers):
        units[f"layer{i}"] = EncoderLayer(arch.hidden, arch.heads, arch.ffn_hidden)
    units["head"] = MLMHead(arch.hidden, arch.vocab)
    model = nn.Sequential(units)
    if arch.tied_embeddings:
        model.head.decoder.weight = model.embed.tok.weight
    return model


def bert_batch(vocab: int, seq: int, mask_fraction: float = 0.15):
    """Random tokens with ``mask_fraction`` replaced by [MASK]; targets -100 (ignored) elsewhere."""

    def make(batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.randint(0, vocab, (batch_size, seq), generator=generator)
        masked = torch.rand(batch_size, seq, generator=generator) < mask_fraction
        targets = torch.where(masked, tokens, torch.full_like(tokens, -100))
        return tokens.masked_fill(masked, BERT_MASK_TOKEN), targets.reshape(-1)

    return make


# -- GPT-2 (pre-norm blocks of small.py, head tied to the token embedding, no head bias) ---------

def build_gpt2(arch: Architecture) -> nn.Sequential:
    units: OrderedDict[str, nn.Module] = OrderedDict(embed=Embedding(arch.vocab, arch.max_positions, arch.hidden))
    for i in range(arch.layers):
        units[f"block{i}"] = Block(arch.hidden, arch.heads, arch.ffn_hidden)
    units["head"] = LMHead(arch.hidden, arch.vocab, bias=False)
    model = nn.Sequential(units)
    if arch.tied_embeddings:
        model.head.head.weight = model.embed.tok.weight
    return model


# -- Llama (Touvron et al. 2023; facebookresearch/llama llama/model.py) --------------------------

def rotate(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding (Su et al. 2021) on (batch, heads, seq, head_dim), in the
    rotate-half layout of Hugging Face's Llama; elementwise, so it adds no counted FLOPs."""
    seq, dim = x.shape[-2], x.shape[-1]
    inv_freq = 1.0 / base ** (torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim)
    angles = torch.arange(seq, device=x.device, dtype=torch.float32)[:, None] * inv_freq[None, :]
    cos, sin = (torch.cat((f, f), dim=-1).to(x.dtype) for f in (angles.cos(), angles.sin()))
    x1, x2 = x[..., : dim // 2], x[..., dim // 2:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class GroupedQueryAttention(nn.Module):
    """Causal attention with ``kv_heads`` key/value heads shared by groups of query heads
    (Ainslie et al. 2023); kv_heads = heads is ordinary multi-head attention. The QK^T and AV
    matmuls are the table's ``attn.core`` row."""

    def __init__(self, hidden: int, heads: int, kv_heads: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.q = nn.Linear(hidden, hidden, bias=False)
        self.k = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q = self.q(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rotate(q), rotate(k)
        if self.kv_heads != self.heads:
            k, v = (z.repeat_interleave(self.heads // self.kv_heads, dim=1) for z in (k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf"))
        return self.o((att.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, d))


class SwiGLU(nn.Module):
    """down(silu(gate(h)) * up(h)) (Shazeer 2020; Llama's FeedForward)."""

    def __init__(self, hidden: int, width: int):
        super().__init__()
        self.gate = nn.Linear(hidden, width, bias=False)
        self.up = nn.Linear(hidden, width, bias=False)
        self.down = nn.Linear(width, hidden, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.down(nn.functional.silu(self.gate(h)) * self.up(h))


class Router(nn.Linear):
    """The MoE gate: one score per expert and token (a Linear without bias, as Mixtral's and
    DeepSeekMoE's); its own class so that the layer table names its kind."""


class Experts(nn.Module):
    """E SwiGLU experts as stacked weights, each token sent to its top-k experts.

    Which tokens an expert takes depends on the data, and torch's FLOP counter counts what runs,
    so this definition gives every expert a fixed capacity of C = ceil(k T / E) tokens (capacity
    factor 1): each expert takes the C tokens that score it highest (expert-choice selection,
    Zhou et al. 2022, arXiv:2202.09368) and the outputs are added back weighted by the router's
    probabilities. Its matmuls are then those of a balanced top-k routing: 6 k T h f FLOPs forward
    (batched over experts), the count ``sim.transformer`` writes in closed form; the dispatch and
    combine are gathers and scatters, not matmuls."""

    def __init__(self, experts: int, top_k: int, hidden: int, width: int):
        super().__init__()
        self.top_k = top_k
        self.w_gate = nn.Parameter(torch.randn(experts, hidden, width) / math.sqrt(hidden))
        self.w_up = nn.Parameter(torch.randn(experts, hidden, width) / math.sqrt(hidden))
        self.w_down = nn.Parameter(torch.randn(experts, width, hidden) / math.sqrt(width))

    def forward(self, h: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        b, t, d = h.shape
        tokens, scores = h.reshape(b * t, d), probs.reshape(b * t, -1)
        experts = scores.shape[1]
        capacity = math.ceil(self.top_k * b * t / experts)
        weight, index = scores.t().topk(capacity, dim=1)                       # (E, C) each
        x = tokens.index_select(0, index.reshape(-1)).view(experts, capacity, d)
        y = (nn.functional.silu(x @ self.w_gate) * (x @ self.w_up)) @ self.w_down  # (E, C, d)
        y = (y * weight.unsqueeze(-1)).reshape(-1, d)
        return torch.zeros_like(tokens).index_add(0, index.reshape(-1), y).view(b, t, d)


class MixtureOfExperts(nn.Module):
    """Router, routed experts and (DeepSeekMoE) shared experts in place of the dense MLP."""

    def __init__(self, arch: Architecture):
        super().__init__()
        self.router = Router(arch.hidden, arch.experts, bias=False)
        self.experts = Experts(arch.experts, arch.experts_per_token, arch.hidden, arch.moe_ffn_hidden)
        self.shared = SwiGLU(arch.hidden, arch.shared_experts * arch.moe_ffn_hidden) if arch.shared_experts else None

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        out = self.experts(h, self.router(h).softmax(dim=-1))
        return out if self.shared is None else out + self.shared(h)


class LlamaBlock(nn.Module):
    """x = x + attn(RMSNorm(x)); x = x + down(silu(gate(h)) * up(h)), h = RMSNorm(x); in a
    mixture-of-experts block the MLP is ``MixtureOfExperts`` (its rows ``<block>.moe.router``,
    ``<block>.moe.experts``, ``<block>.moe.shared.*``)."""

    def __init__(self, arch: Architecture, moe: bool = False):
        super().__init__()
        self.attn_norm = nn.RMSNorm(arch.hidden, eps=1e-5)
        self.attn = GroupedQueryAttention(arch.hidden, arch.heads, arch.kv_heads)
        self.ffn_norm = nn.RMSNorm(arch.hidden, eps=1e-5)
        self.moe = MixtureOfExperts(arch) if moe else None
        if not moe:
            self.gate = nn.Linear(arch.hidden, arch.ffn_hidden, bias=False)
            self.up = nn.Linear(arch.hidden, arch.ffn_hidden, bias=False)
            self.down = nn.Linear(arch.ffn_hidden, arch.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        h = self.ffn_norm(x)
        if self.moe is not None:
            return x + self.moe(h)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


class TokenEmbedding(nn.Module):
    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.tok(idx)


class LlamaHead(nn.Module):
    def __init__(self, hidden: int, vocab: int):
        super().__init__()
        self.norm = nn.RMSNorm(hidden, eps=1e-5)
        self.out = nn.Linear(hidden, vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(x)).flatten(0, 1)


def build_llama(arch: Architecture) -> nn.Sequential:
    units: OrderedDict[str, nn.Module] = OrderedDict(embed=TokenEmbedding(arch.vocab, arch.hidden))
    for i in range(arch.layers):
        units[f"block{i}"] = LlamaBlock(arch, moe=arch.is_moe_block(i))
    units["head"] = LlamaHead(arch.hidden, arch.vocab)
    model = nn.Sequential(units)
    if arch.tied_embeddings:
        model.head.out.weight = model.embed.tok.weight
    return model


BUILDERS = {"bert": build_bert, "gpt2": build_gpt2, "llama": build_llama}


def build_transformer_model(arch: Architecture) -> nn.Sequential:
    return BUILDERS[arch.family](arch)


def transformer_batch(arch: Architecture):
    """Masked tokens for BERT; next-token pairs for the decoders."""
    return bert_batch(arch.vocab, arch.seq_len) if arch.family == "bert" else token_batch(arch.vocab, arch.seq_len)
