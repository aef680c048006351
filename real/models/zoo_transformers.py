"""The zoo's transformers: published dimensions, each with its source, and the metadata that
``real.derive`` writes to sim/data/workloads/<name>.yaml. The simulator builds their tables in
closed form from the ``architecture`` section (sim.transformer), at any ``workload.seq_len``;
the torch definitions (real.models.transformers) are the check."""

from __future__ import annotations

from functools import partial
from typing import Any

from torch import nn

from real.models.small import ModelSpec, transformer_fwd_flops
from real.models.transformers import build_transformer_model, transformer_batch
from sim.transformer import Architecture, architecture_from_dict

FLOP_CONVENTION = "2 FLOPs per multiply-accumulate; torch's FlopCounterMode counts matmuls and convolutions only"
KAPLAN = ("FLOPs per sequence: Kaplan et al. 2020 (arXiv:2001.08361) Table 1, 2N + 4 n_layer n_ctx d (QK^T and AV in "
          "full) + 2 d n_vocab per token")
ADAM = "Adam, as the model's authors trained it"
DEVLIN = "Devlin et al. 2019 (arXiv:1810.04805)"
RADFORD = "Radford et al. 2019, Language Models are Unsupervised Multitask Learners"
GPT2_DIMS = RADFORD + " Table 2 (layers, d_model); heads and context from the released hparams.json (n_head, n_ctx)"
LLAMA_DIMS = ("Touvron et al. 2023, Llama 2 (arXiv:2307.09288) Table 1 (context 4k, grouped-query attention for 70B); "
              "dimensions as Llama 1 (arXiv:2302.13971) Table 2; SwiGLU width from facebookresearch/llama "
              "llama/model.py FeedForward (multiple_of 256; 70B: ffn_dim_multiplier 1.3, multiple_of 4096, n_kv_heads 8, "
              "its params.json) = intermediate_size 11008 / 13824 / 28672 of the Hugging Face configs; vocab 32000")
GPT2_BATCH = ("our choice, {batch} sequence(s) of 1024: fp32 Adam (16 B per parameter) and every layer's output fit a "
              "32 GB V100 by sim/memory.py's accounting; Radford et al. 2019 used 512 sequences per step")
LLAMA_BATCH = ("one 4096-token sequence per GPU (our choice); Touvron et al. 2023 section 2.2: 4M tokens per step. "
               "fp32 or mixed-precision Adam keeps 16 B per parameter, so every size needs tensor or pipeline "
               "parallelism (or ZeRO sharding, which the simulator does not model)")


def _arch(**dims: Any) -> Architecture:
    return architecture_from_dict(dims, where="zoo")


LLAMA2_TOKENS = (1024 * 4096, "Touvron et al. 2023 (arXiv:2307.09288) section 2.2: a global batch of 4M tokens "
                 "(1024 sequences of 4096)")
LLAMA3_TOKENS = (1024 * 8192, "Llama Team 2024 (arXiv:2407.21783) section 3.4.1: the batch doubled to 8M tokens in "
                 "sequences of 8,192 after the first 252M tokens (1024 sequences)")
GPT3_TOKENS = (1536 * 2048, "Megatron-LM's GPT-3 175B script (examples/pretrain_gpt3_175B.sh, aed2f75e): "
               "--global-batch-size 1536 of 2048 tokens, 3.1M tokens; Brown et al. 2020 Table 2.1: 3.2M tokens")


def _spec(arch: Architecture, *, description: str, source: str, batch: int, batch_note: str, params: int,
          params_source: str, extra_per_token: int = 0, tokens: tuple[int, str] | None = None) -> ModelSpec:
    published: dict[str, Any] = {"params": params}
    if arch.family != "llama":
        flops = transformer_fwd_flops(layers=arch.layers, seq=arch.seq_len, d_model=arch.hidden, vocab=arch.vocab,
                                      extra_per_token=extra_per_token)
        published["fwd_gflops_per_sample"] = round(flops / 1e9, 3)
        params_source += "; " + KAPLAN + (" + the MLM transform 2 d^2" if extra_per_token else "")
    published["source"] = params_source
    zoo = {"description": description, "source": source, "default_batch_size": batch,
           "default_batch_size_source": batch_note, "optimizer": "adam", "optimizer_source": ADAM,
           "flop_convention": FLOP_CONVENTION, "published": published, "architecture": arch.as_dict()}
    if tokens is not None:
        zoo["global_batch_tokens"], zoo["global_batch_source"] = tokens
    return ModelSpec(partial(build_transformer_model, arch), transformer_batch(arch), nn.CrossEntropyLoss,
                     cpu_sized=False, info=arch.as_dict(), zoo=zoo)


BERT_BASE = _arch(family="bert", layers=12, hidden=768, heads=12, seq_len=512, vocab=30522, max_positions=512)
BERT_LARGE = _arch(family="bert", layers=24, hidden=1024, heads=16, seq_len=512, vocab=30522, max_positions=512)
GPT2 = {name: _arch(family="gpt2", layers=layers, hidden=hidden, heads=heads, seq_len=1024, vocab=50257, max_positions=1024)
        for name, layers, hidden, heads in (("small", 12, 768, 12), ("medium", 24, 1024, 16), ("large", 36, 1280, 20),
                                            ("xl", 48, 1600, 25))}
LLAMA2 = {
    "7b": _arch(family="llama", layers=32, hidden=4096, heads=32, seq_len=4096, vocab=32000),
    "13b": _arch(family="llama", layers=40, hidden=5120, heads=40, seq_len=4096, vocab=32000),
    "70b": _arch(family="llama", layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, seq_len=4096, vocab=32000),
}
GPT2_PUBLISHED = {  # Radford et al. 2019 Table 2; KerasHub presets (head tied to the token embedding)
    "small": (124_439_808, "Table 2: 117M; KerasHub preset gpt2_base_en: 124439808"),
    "medium": (354_823_168, "Table 2: 345M; KerasHub preset gpt2_medium_en: 354823168"),
    "large": (774_030_080, "Table 2: 762M; KerasHub preset gpt2_large_en: 774030080"),
    "xl": (1_557_611_200, "Table 2: 1542M; KerasHub preset gpt2_extra_large_en: 1557611200"),
}
GPT2_BATCHES = {"small": 8, "medium": 8, "large": 4, "xl": 1}
GPT2_XL_BATCH_NOTE = (
    "one 1024-token sequence, and only with activation checkpointing (which the simulator does not model: recomputation "
    "costs about one more forward): fp32 Adam keeps 16 B per parameter = 24.9 GB of a 32 GB V100; one sequence saves "
    "about 15 GB of activations without recomputation (per block ~80 M elements: the 25x1024x1024 softmax output and "
    "its dropout, 52 M, plus Q, K, V and the 6400-wide MLP input and GELU output), about 1 GB with per-block "
    "checkpointing (block inputs 48 x 1024 x 1600, one block recomputed, the logits; our estimate). Megatron-LM's "
    "single-GPU baseline (Shoeybi et al. 2019) is a 1.2B GPT-2 on a 32 GB V100 with mixed precision and checkpointing")
LLAMA2_PUBLISHED = {  # the released checkpoints' totals (meta-llama/Llama-2-*-hf)
    "7b": 6_738_415_616, "13b": 13_015_864_320, "70b": 68_976_648_192,
}
LLAMA3_DIMS = ("Llama Team 2024, The Llama 3 Herd of Models (arXiv:2407.21783) Table 3 (layers, model dimension, FFN "
               "dimension, attention heads, key/value heads 8, vocabulary 128K) and section 3.4.1 (pre-training at "
               "a context of 8K tokens before the long-context stage); vocab 128256 and the untied head of the released "
               "configs (meta-llama/Llama-3.1-*: vocab_size, tie_word_embeddings false)")
LLAMA3 = {
    "8b": _arch(family="llama", layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, seq_len=8192, vocab=128256),
    "70b": _arch(family="llama", layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, seq_len=8192, vocab=128256),
    "405b": _arch(family="llama", layers=126, hidden=16384, heads=128, kv_heads=8, ffn_hidden=53248, seq_len=8192,
                  vocab=128256),
}
LLAMA3_PUBLISHED = {  # the released checkpoints' totals (Hugging Face model cards / safetensors index)
    "8b": (8_030_261_248, "meta-llama/Meta-Llama-3-8B: 8,030,261,248"),
    "70b": (70_553_706_496, "meta-llama/Meta-Llama-3-70B: 70,553,706,496"),
    "405b": (405_853_388_800, "meta-llama/Llama-3.1-405B: 405,853,388,800"),
}
LLAMA3_BATCH = ("one 8192-token sequence per GPU (our choice); Llama Team 2024 section 3.4.1: 4M tokens per step at first, "
                "then 8M and 16M")
GPT3_175B = _arch(family="gpt2", layers=96, hidden=12288, heads=96, seq_len=2048, vocab=50257, max_positions=2048)
GPT3_SOURCE = ("Brown et al. 2020, Language Models are Few-Shot Learners (arXiv:2005.14165) Table 2.1 (n_layers 96, "
               "d_model 12288, n_heads 96, d_head 128, context 2048) and section 2.1 (the GPT-2 architecture, its "
               "tokenizer: vocab 50257; dense attention here, its alternating locally banded sparse layers have "
               "the same parameters)")
MIXTRAL = _arch(family="llama", layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, seq_len=32768,
                vocab=32000, experts=8, experts_per_token=2, moe_ffn_hidden=14336)
MIXTRAL_SOURCE = ("Jiang et al. 2024, Mixtral of Experts (arXiv:2401.04088) Table 1 (dim 4096, n_layers 32, head_dim 128, "
                  "hidden_dim 14336, n_heads 32, n_kv_heads 8, context_len 32768, vocab_size 32000, num_experts 8, "
                  "top_k_experts 2) and section 2 (trained with a context of 32k tokens)")
DEEPSEEK_MOE = _arch(family="llama", layers=28, hidden=2048, heads=16, ffn_hidden=10944, seq_len=4096, vocab=102400,
                     experts=64, experts_per_token=6, moe_ffn_hidden=1408, shared_experts=2, dense_layers=1)
DEEPSEEK_MOE_SOURCE = ("Dai et al. 2024, DeepSeekMoE (arXiv:2401.06066) section 5.1.1 (28 layers, hidden 2048, 16 heads of "
                       "128, every FFN but the first a MoE layer of 2 shared and 64 routed experts each 0.25x a standard "
                       "FFN, 6 routed per token, sequence 4096, vocabulary 100K); the released config "
                       "deepseek-ai/deepseek-moe-16b-base: intermediate_size 10944, moe_intermediate_size 1408, "
                       "first_k_dense_replace 1, vocab_size 102400, multi-head attention, untied head")

TRANSFORMER_MODELS: dict[str, ModelSpec] = {
    "bert_base": _spec(
        BERT_BASE,
        description="BERT-base (12 layers, d 768, 12 heads), masked-LM pretraining at sequence length 512 "
                    "(workload.seq_len sets another); no pooler or next-sentence head",
        source=DEVLIN, batch=16,
        batch_note="Devlin et al. 2019 appendix A.2: BERT-base trained with 256 sequences per step on 4 Cloud TPUs "
                   "(16 TPU chips): 16 per chip",
        params=110_000_000,
        params_source="Devlin et al. 2019 section 3: 110M (KerasHub preset bert_base_en_uncased: 109482240 with the "
                      "pooler, 590592, which this model lacks; it has the MLM transform and decoder bias, 622650)",
        extra_per_token=2 * BERT_BASE.hidden**2,
    ),
    "bert_large": _spec(
        BERT_LARGE,
        description="BERT-large (24 layers, d 1024, 16 heads), masked-LM pretraining at sequence length 512 "
                    "(workload.seq_len sets another); no pooler or next-sentence head",
        source=DEVLIN, batch=8,
        batch_note="fits a 32 GB V100 in fp32 training (our estimate, not a measurement): Adam keeps 16 B per "
                   "parameter (weights, gradients, two moments) = 5.4 GB; one 512-token sequence saves about "
                   "1.9 GB of activations (per layer ~18 M elements: Q, K, V, the 16x512x512 softmax output and "
                   "its dropout, the 4096-wide MLP input and GELU output; plus 512 x 30522 logits), so 8 sequences "
                   "need about 21 GB and 12 about 29 GB. Devlin et al. used 256 sequences per step on TPUs",
        params=335_141_888,
        params_source="Devlin et al. 2019: 340M; KerasHub preset bert_large_en_uncased: 335141888 (with the "
                      "pooler, 1049600, which this model lacks; it has the MLM transform and decoder bias, 1082170)",
        extra_per_token=2 * BERT_LARGE.hidden**2,
    ),
    **{f"gpt2_{size}": _spec(
        arch,
        description=f"GPT-2 {'XL' if size == 'xl' else size} ({arch.layers} layers, d {arch.hidden}, {arch.heads} heads, context 1024, "
                    "vocab 50257), language-model training (workload.seq_len up to 1024)",
        source=GPT2_DIMS, batch=GPT2_BATCHES[size],
        batch_note=GPT2_XL_BATCH_NOTE if size == "xl" else GPT2_BATCH.format(batch=GPT2_BATCHES[size]),
        params=GPT2_PUBLISHED[size][0], params_source=RADFORD + " " + GPT2_PUBLISHED[size][1],
    ) for size, arch in GPT2.items()},
    **{f"llama2_{size}": _spec(
        arch,
        description=f"Llama 2 {size.upper()} ({arch.layers} layers, d {arch.hidden}, {arch.heads} heads"
                    + (f", {arch.kv_heads} key/value heads" if arch.kv_heads != arch.heads else "")
                    + f", SwiGLU {arch.ffn_hidden}, context 4096, vocab 32000), language-model training",
        source=LLAMA_DIMS, batch=1, batch_note=LLAMA_BATCH,
        params=LLAMA2_PUBLISHED[size],
        params_source=f"Touvron et al. 2023: {size.upper()}; the released checkpoint meta-llama/Llama-2-{size}-hf "
                      f"holds {LLAMA2_PUBLISHED[size]} parameters (untied output head)",
        tokens=LLAMA2_TOKENS,
    ) for size, arch in LLAMA2.items()},
    **{f"llama3_{size}": _spec(
        arch,
        description=f"Llama 3 {size.upper()} ({arch.layers} layers, d {arch.hidden}, {arch.heads} heads, 8 key/value heads, "
                    f"SwiGLU {arch.ffn_hidden}, context 8192, vocab 128256), language-model pre-training",
        source=LLAMA3_DIMS, batch=1, batch_note=LLAMA3_BATCH,
        params=LLAMA3_PUBLISHED[size][0],
        params_source=f"Llama Team 2024: {size.upper()}; the released checkpoint {LLAMA3_PUBLISHED[size][1]} parameters "
                      "(untied output head)",
        tokens=LLAMA3_TOKENS,
    ) for size, arch in LLAMA3.items()},
    "gpt3_175b": _spec(
        GPT3_175B,
        description="GPT-3 175B (96 layers, d 12288, 96 heads, context 2048, vocab 50257), language-model training",
        source=GPT3_SOURCE, batch=1,
        batch_note="one 2048-token sequence per GPU (our choice); Brown et al. 2020 Table 2.1: 3.2M tokens per step",
        params=175_000_000_000,
        params_source="Brown et al. 2020 Table 2.1: 175.0B (this architecture with GPT-2's vocabulary and learned "
                      "positions, head tied to the token embedding, counts 174.6B)",
        tokens=GPT3_TOKENS,
    ),
    "mixtral_8x7b": _spec(
        MIXTRAL,
        description="Mixtral 8x7B (32 layers, d 4096, 32 heads, 8 key/value heads, 8 SwiGLU experts of 14336, top 2, "
                    "context 32768, vocab 32000), a sparse mixture of experts, language-model training",
        source=MIXTRAL_SOURCE, batch=1,
        batch_note="one 32768-token sequence per GPU (our choice, the published training context)",
        params=46_702_792_704,
        params_source="Jiang et al. 2024: 47B parameters, 13B active per token; the released checkpoint "
                      "mistralai/Mixtral-8x7B-v0.1 holds 46,702,792,704",
    ),
    "deepseek_moe_16b": _spec(
        DEEPSEEK_MOE,
        description="DeepSeekMoE 16B (28 layers, d 2048, 16 heads, 64 routed experts of 1408 (top 6) + 2 shared, first "
                    "block dense (10944), context 4096, vocab 102400), a fine-grained mixture of experts",
        source=DEEPSEEK_MOE_SOURCE, batch=1,
        batch_note="one 4096-token sequence per GPU (our choice); Dai et al. 2024 section 5.1.2: 4.5K sequences of 4K "
                   "tokens per step",
        params=16_400_000_000,
        params_source="Dai et al. 2024 section 5.1.1 and Table 3: 16.4B total parameters, 2.8B activated",
    ),
}
