"""Activation memory against Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", arXiv:2205.05198): Table 2's per-layer formulas for a GPT layer, the
interleaved schedule's in-flight factor (equation 5), and the tensor-by-tensor generalisation to
Llama's SwiGLU/GQA layers, FlashAttention and mixture-of-experts blocks, each expected value
written out by hand here from the paper's terms."""

from __future__ import annotations

import pytest

from sim.costs.activations import (
    block_terms,
    checkpoint_bytes,
    embedding_terms,
    head_terms,
    in_flight_micro_batches,
)
from sim.transformer import architecture_from_dict
from sim.workload import load_workload

# GPT-3 175B's layer (Korthikanti et al. Table 3 lists it among their models): s, h, a
GPT3 = architecture_from_dict({"family": "gpt2", "layers": 96, "hidden": 12288, "heads": 96, "seq_len": 2048,
                               "vocab": 50257})
S, H, A = 2048, 12288, 96


@pytest.mark.parametrize("b,t", [(1, 1), (1, 8), (4, 2), (2, 4)])
def test_a_gpt_layer_is_table_2(b, t):
    """Table 2, bytes per layer (16-bit activations, 1-byte masks):
    no parallelism sbh(34 + 5as/h); tensor parallel sbh(10 + 24/t + 5as/(ht));
    + sequence parallel sbh(34/t + 5as/(ht)); + selective sbh(10 + 24/t); + both sbh(34/t);
    full recomputation sbh(2)."""
    sbh = S * b * H
    terms = block_terms(GPT3, 0, b, 2, flash=False)
    assert terms.per_rank_bytes(1, False) == pytest.approx(sbh * (34 + 5 * A * S / H))
    assert terms.per_rank_bytes(t, False) == pytest.approx(sbh * (10 + 24 / t + 5 * A * S / (H * t)))
    assert terms.per_rank_bytes(t, True) == pytest.approx(sbh * (34 / t + 5 * A * S / (H * t)))
    assert terms.per_rank_bytes(t, False, keep_scores=False) == pytest.approx(sbh * (10 + 24 / t))
    assert terms.per_rank_bytes(t, True, keep_scores=False) == pytest.approx(sbh * 34 / t)
    assert checkpoint_bytes(GPT3, b, 2, t, False) == pytest.approx(2 * sbh)
    assert checkpoint_bytes(GPT3, b, 2, t, True) == pytest.approx(2 * sbh / t)  # the sequence-parallel shard


def test_a_gpt3_layer_by_hand():
    """GPT-3 175B at b = 1 stores 34 sbh + 5 a s^2 b per layer: 0.86 + 2.01 = 2.87 GB, the
    attention's s^2 terms the larger part (why selective recomputation drops them)."""
    per_layer = block_terms(GPT3, 0, 1, 2, flash=False).per_rank_bytes(1, False)
    assert per_layer == 34 * S * H + 5 * A * S * S
    assert per_layer / 1e9 == pytest.approx(2.87, abs=0.01)


def test_flash_attention_keeps_no_scores():
    """FlashAttention stores no s x s tensor: the 5as^2b term goes, the softmax's fp32 log-sum-exp
    (4 a s b bytes, split over tp with the heads) comes."""
    b, t = 1, 8
    eager = block_terms(GPT3, 0, b, 2, flash=False)
    flash = block_terms(GPT3, 0, b, 2, flash=True)
    assert flash.scores == 0
    assert flash.per_rank_bytes(t, True) == pytest.approx(S * b * H * 34 / t + 4 * A * S * b / t)
    assert eager.per_rank_bytes(t, True) - flash.per_rank_bytes(t, True) == pytest.approx(
        5 * A * S * S * b / t - 4 * A * S * b / t)


def test_a_llama_layer_tensor_by_tensor():
    """Llama 2 70B (h 8192, 64 heads, 8 key/value heads of 128, SwiGLU 28672, no dropout), s = 4096,
    by hand: replicated 4 x 2sbh (two norms' inputs and outputs); sharded Q 2sbh, K and V 2sb d_kv
    each, the output projection's input 2sbh, SwiGLU's fused gate/up output 4sbf and product 2sbf;
    eager scores the softmax output alone, 2as^2b (no dropout)."""
    arch = load_workload("llama2_70b").architecture
    s, h, a, f, dkv, b = 4096, 8192, 64, 28672, 1024, 2
    terms = block_terms(arch, 0, b, 2, flash=False)
    assert terms.replicated == 8 * s * b * h
    assert terms.sharded == 2 * s * b * (2 * h + 2 * dkv) + 6 * s * b * f
    assert terms.scores == 2 * a * s * s * b


def test_a_mixture_of_experts_block():
    """Mixtral's block (h 4096, 8 experts of 14336, top 2, 32 heads, 8 kv heads), capacity factor
    1.25, by hand: the router's fp32 probabilities 4 s b E (replicated); per routed copy (k x 1.25)
    the expert's input 2sbh, SwiGLU tensors 6 s b f_e and output 2sbh (sharded)."""
    arch = load_workload("mixtral_8x7b").architecture
    s, h, f, e, k, b, dkv = 32768, 4096, 14336, 8, 2, 1, 1024
    terms = block_terms(arch, 3, b, 2, flash=True, capacity_factor=1.25)
    copies = k * 1.25
    assert terms.replicated == 8 * s * b * h + 4 * s * b * e
    assert terms.sharded == 2 * s * b * (2 * h + 2 * dkv) + 4 * 32 * s * b + copies * (4 * s * b * h + 6 * s * b * f)
    # context parallelism: every tensor holds s / cp tokens
    assert block_terms(arch, 3, b, 2, flash=True, capacity_factor=1.25, cp=4).sharded == pytest.approx(terms.sharded / 4)


def test_embedding_and_head_terms():
    """Megatron-LM's estimator: the embedding stage keeps the int64 token ids (8sb) and, with
    dropout, its mask (sbh); the head stage 4sbh (the final norm's input and output) and fp32
    logits 4sbV split over the vocabulary-parallel ranks."""
    b, t, v = 2, 8, 50257
    assert embedding_terms(GPT3, b).per_rank_bytes(t, True) == pytest.approx(8 * S * b + S * b * H / t)
    assert head_terms(GPT3, b, 2).per_rank_bytes(t, False) == pytest.approx(4 * S * b * H + 4 * S * b * v / t)


@pytest.mark.parametrize("p,v", [(4, 2), (8, 3), (16, 4), (2, 2)])
def test_interleaving_holds_equation_5s_factor(p, v):
    """Korthikanti et al. equation 5: the interleaved schedule's first stage holds
    p (1 + (p - 1)/(p v)) micro-batches' activations; plain 1F1B holds p - stage; GPipe m."""
    m = 8 * p
    assert in_flight_micro_batches("1f1b", p, m, 0, v) == pytest.approx(p * (1 + (p - 1) / (p * v)))
    assert in_flight_micro_batches("1f1b", p, m, 0) == p
    assert [in_flight_micro_batches("1f1b", p, m, s) for s in range(p)] == [p - s for s in range(p)]
    assert in_flight_micro_batches("gpipe", p, m, 1) == m
    # fewer micro-batches than stages: at most m in flight
    assert in_flight_micro_batches("1f1b", p, 1, 0) == 1
