"""Activation memory of a transformer, tensor by tensor, as Korthikanti et al. 2022 count it.

Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (MLSys 2023,
arXiv:2205.05198), section 4.1 lists what one transformer layer stores for backward, for a
micro-batch of b sequences of s tokens, hidden size h, a heads, 16-bit activations, 1-byte dropout
masks:

- attention, 11 s b h + 5 a s^2 b: the QKV projection's input 2sbh, Q and K 4sbh, the softmax
  output 2as^2b, its dropout mask as^2b and output 2as^2b, V 2sbh, the output projection's input
  2sbh and its dropout mask sbh;
- MLP, 19 s b h: the first linear's input 2sbh, the GeLU's input 8sbh and output 8sbh (4h wide),
  the dropout mask sbh;
- the two layer norms' inputs, 4 s b h.

Total s b h (34 + 5 a s / h) (equation 1). Section 4.2: with tensor parallelism of t the
attention and MLP internals split over the t ranks but the norms' inputs, the dropout masks and
the two blocks' inputs do not: s b h (10 + 24/t + 5as/(ht)) (equation 2); with sequence
parallelism those split too: s b h (34 + 5as/h) / t (equation 3). Section 5: selective
recomputation drops the 5as/h term (the attention core is recomputed), full recomputation keeps
only each layer's input, 2 s b h (Table 2). The first pipeline stage holds p micro-batches
(1F1B), and the interleaved schedule p (1 + (p-1)/(p v)) (section 4.2.3, equation 5).

This module keeps the inventory tensor by tensor in three classes, so that the paper's formulas
are the special case of a GPT layer (MHA, a 4h GeLU MLP, dropout) and the other shapes follow the
same rule: ``replicated`` (stored whole by every tensor-parallel rank unless sequence parallelism
splits it), ``sharded`` (split over tensor parallelism) and ``scores`` (the s x s tensors, only
with eager attention). What the generalisation assumes, tensor by tensor:

- grouped-query attention stores K and V at their width d_kv = kv_heads x head_dim;
- a SwiGLU MLP (Llama) stores the fused gate/up output (2f wide, the input of Megatron-LM's
  bias_swiglu_impl, megatron/core/fusions/fused_bias_swiglu.py) and the product (f wide, the down
  projection's input): 3 x 2 s b f bytes;
- FlashAttention (Dao et al. 2022, 2023) stores no s x s tensor: its backward recomputes the
  scores from Q, K, V and the output, keeping the softmax's log-sum-exp per head and token in
  fp32, 4 a s b bytes;
- the llama family (Llama 2 and 3, Mixtral, DeepSeekMoE) trains without dropout (Touvron et al.
  2023 name none; the released configs' attention_dropout 0.0): no masks; gpt2 and bert use
  dropout 0.1 (Radford et al. 2019, Devlin et al. 2019);
- a mixture-of-experts MLP stores the router's fp32 probabilities (4 s b E), and per routed copy
  of a token (k copies, times the capacity factor) the expert's input, its SwiGLU tensors and its
  output (for the combine's weighting); shared experts as a SwiGLU MLP of their summed width.
  Experts split over tensor parallelism (Megatron-LM's expert tensor parallelism = tp);
- context parallelism of cp: every tensor holds s / cp tokens (ring attention runs flash blocks);
- the embedding stage keeps the token ids (int64, 8 s b) and, with dropout, its mask; the head
  stage the final norm's and the head's inputs and the fp32 logits, 4 s b V / t (the
  vocabulary-parallel cross-entropy), as Megatron-LM's estimator counts them
  (megatron/training/theoretical_memory_usage.py, compute_activation_memory: 4 s b h (1 + V/h)).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.transformer import Architecture

MASK_BYTES = 1
"""A dropout mask element: one byte (torch's bool masks; Korthikanti et al. section 4.1)."""
FP32_BYTES = 4
TOKEN_ID_BYTES = 8
"""Token ids are int64 (torch's nn.Embedding input)."""
LOGITS_BYTES = 4
"""The head's logits are kept in fp32 for the cross-entropy (Megatron-LM's estimator: 4 s b V)."""


@dataclass(frozen=True)
class ActivationTerms:
    """Bytes one stored micro-batch occupies, by how the parallel layout splits them."""

    replicated: float = 0.0
    """Whole on every tensor-parallel rank unless sequence parallelism splits it over them."""
    sharded: float = 0.0
    """Split over the tensor-parallel ranks."""
    scores: float = 0.0
    """The s x s tensors of eager attention (split over tensor parallelism; dropped by selective
    recomputation)."""
    whole: float = 0.0
    """Kept whole by every rank whatever the layout (the token ids every embedding shard reads)."""

    def __add__(self, other: ActivationTerms) -> ActivationTerms:
        return ActivationTerms(self.replicated + other.replicated, self.sharded + other.sharded,
                               self.scores + other.scores, self.whole + other.whole)

    def per_rank_bytes(self, tp: int, sequence_parallel: bool, keep_scores: bool = True) -> float:
        """What one tensor-parallel rank stores: equation 2 without sequence parallelism,
        equation 3 with it; ``keep_scores`` False: selective recomputation."""
        replicated = self.replicated / tp if sequence_parallel else self.replicated
        return self.whole + replicated + self.sharded / tp + (self.scores / tp if keep_scores else 0.0)


def has_dropout(arch: Architecture) -> bool:
    """gpt2 and bert train with dropout 0.1; the llama family without (module docstring)."""
    return arch.family != "llama"


def block_terms(arch: Architecture, block: int, micro_batch: int, dtype_bytes: int, flash: bool,
                capacity_factor: float = 1.0, cp: int = 1) -> ActivationTerms:
    """One transformer block's stored activations for a micro-batch (module docstring), with
    s = seq_len / cp tokens per rank."""
    e, b, h = dtype_bytes, micro_batch, arch.hidden
    s = arch.seq_len / cp
    sbh = s * b * h
    drop = has_dropout(arch)
    mask = MASK_BYTES * sbh if drop else 0.0
    # attention: the norm's input and output (the QKV input), the output dropout's mask
    replicated = 2 * e * sbh + mask
    sharded = e * s * b * (2 * h + 2 * arch.kv_hidden)          # Q, K, V, the output projection's input
    scores = 0.0
    if flash:
        sharded += FP32_BYTES * arch.heads * s * b              # the softmax's log-sum-exp
    else:
        softmax = e * arch.heads * s * s * b
        scores = softmax + ((MASK_BYTES + e) * arch.heads * s * s * b if drop else 0.0)
    # MLP: the norm's input and output (the MLP's input), the dropout mask
    replicated += 2 * e * sbh + mask
    if arch.is_moe_block(block):
        copies = arch.experts_per_token * capacity_factor
        replicated += FP32_BYTES * s * b * arch.experts        # router probabilities
        sharded += copies * (2 * e * sbh + 3 * e * s * b * arch.moe_ffn_hidden)
        if arch.shared_experts:
            sharded += 3 * e * s * b * arch.shared_experts * arch.moe_ffn_hidden
    elif arch.family == "llama":
        sharded += 3 * e * s * b * arch.ffn_hidden              # fused gate/up output (2f) and product (f)
    else:
        sharded += 2 * e * s * b * arch.ffn_hidden              # GeLU input and output
    return ActivationTerms(replicated, sharded, scores)


def embedding_terms(arch: Architecture, micro_batch: int, cp: int = 1) -> ActivationTerms:
    """The first stage's own: token ids and, with dropout, the embedding dropout's mask."""
    s = arch.seq_len / cp
    ids = TOKEN_ID_BYTES * s * micro_batch
    mask = MASK_BYTES * s * micro_batch * arch.hidden if has_dropout(arch) else 0.0
    return ActivationTerms(replicated=mask, whole=ids)


def head_terms(arch: Architecture, micro_batch: int, dtype_bytes: int, cp: int = 1) -> ActivationTerms:
    """The last stage's own: the final norm's input and output (the head's input), fp32 logits."""
    s = arch.seq_len / cp
    return ActivationTerms(replicated=2 * dtype_bytes * s * micro_batch * arch.hidden,
                           sharded=LOGITS_BYTES * s * micro_batch * arch.vocab)


def checkpoint_bytes(arch: Architecture, micro_batch: int, dtype_bytes: int, tp: int, sequence_parallel: bool,
                     cp: int = 1) -> float:
    """Full recomputation keeps each block's input, 2 s b h (Table 2), split over tp with
    sequence parallelism (the input is then the sequence-parallel shard)."""
    stored = dtype_bytes * arch.seq_len / cp * micro_batch * arch.hidden
    return stored / tp if sequence_parallel else stored


def in_flight_micro_batches(schedule: str, p: int, m: int, stage: int, vpp: int = 1) -> float:
    """Micro-batches whose activations a pipeline stage holds at its peak, in units of the
    stage's whole activation for one micro-batch: GPipe all m; 1F1B min(p - stage, m) (its
    warm-up + 1, Narayanan et al. 2021); interleaved 1F1B (vpp model chunks per stage) holds
    min(2 (p - stage - 1) + (vpp - 1) p + 1, m vpp) chunk-micro-batches (Megatron-LM's warm-up,
    megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving),
    each 1/vpp of the stage: for the first stage p + (p - 1)/vpp = p (1 + (p - 1)/(p vpp)), the
    factor of Korthikanti et al. equation 5."""
    if schedule == "gpipe":
        return float(m)
    if vpp == 1:
        return float(min(p - stage, m))
    chunks = min(2 * (p - stage - 1) + (vpp - 1) * p + 1, m * vpp)
    return chunks / vpp
