"""Transformers by their dimensions: the layer table of a BERT, GPT-2 or Llama-style model in
closed form, so that any sequence length or size is one line of a config (and sim/ needs no torch).

The rows are the ones ``real.derive`` derives with torch's FLOP counter from the torch
definitions in ``real/models/transformers.py`` (same names, kinds, parameters, FLOPs and
activations; ``tests/test_transformer.py`` compares them row by row). Per sample, with
t = seq_len, d = hidden, f = ffn_hidden, V = vocab, d_kv = kv_heads x d / heads, and 2 FLOPs per
multiply-accumulate (torch.utils.flop_counter counts matmuls only):
- Linear(i, o): i x o weights (+ o bias), forward 2 t i o, backward 2 x forward (input and
  weight gradients), activation t o;
- attention's parameter-free matmuls (the ``<attn>.core`` row): QK^T and AV, 2 t^2 d each,
  forward 4 t^2 d (Kaplan et al. 2020, arXiv:2001.08361, Table 1, counted in full, causal or not);
  grouped-query attention repeats K and V per head group, so the matmuls are the same;
- norms and embeddings: parameters only (their arithmetic is not a matmul); a learned position
  table's output does not grow with the batch (activation 0), the others' is t d;
- a head tied to the token embedding owns no weight (shared parameters count once, at the
  embedding); BERT's MLM decoder keeps its own bias.
Families: ``bert`` (post-norm encoder, learned positions, segment embedding, MLM head: Devlin et
al. 2019), ``gpt2`` (pre-norm decoder, learned positions, tied head without bias: Radford et al.
2019), ``llama`` (pre-norm decoder, RMSNorm, rotary positions, SwiGLU MLP, no biases, grouped-query
attention, untied head: Touvron et al. 2023, arXiv:2302.13971 and arXiv:2307.09288).

Mixture of experts (``experts`` > 0, llama family: Mixtral, DeepSeekMoE): every block from
``dense_layers`` on replaces its SwiGLU MLP by a router (Linear h -> E, no bias, the
``<block>.moe.router`` row, kind Router), E routed SwiGLU experts of width ``moe_ffn_hidden`` of
which each token uses ``experts_per_token`` (top-k) (the ``<block>.moe.experts`` row, kind Experts:
3 E h f_e parameters, forward 6 k t h f_e per sample: balanced routing at a capacity factor of 1)
and optionally ``shared_experts`` always-active experts run as one SwiGLU MLP of width
shared_experts x moe_ffn_hidden (``<block>.moe.shared.gate/up/down``; DeepSeekMoE, Dai et al. 2024,
arXiv:2401.06066 section 3.2; Hugging Face's DeepseekMoE builds them so). Megatron-LM's names:
--num-experts, --moe-router-topk, --moe-ffn-hidden-size, --moe-shared-expert-intermediate-size,
--moe-layer-freq; Hugging Face's: num_local_experts / n_routed_experts, num_experts_per_tok,
moe_intermediate_size, n_shared_experts, first_k_dense_replace.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from sim.errors import (
    ConfigError,
    reject_unknown_keys,
    require_bool,
    require_choice,
    require_positive,
)

FAMILIES = ("bert", "gpt2", "llama")
ARCHITECTURE_KEYS = ("family", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "seq_len", "vocab",
                     "max_positions", "tied_embeddings", "experts", "experts_per_token", "moe_ffn_hidden",
                     "shared_experts", "dense_layers")
MOE_KEYS = ("experts_per_token", "moe_ffn_hidden", "shared_experts", "dense_layers")
"""Keys that only mean something with ``experts`` > 0."""
REQUIRED_KEYS = ("layers", "hidden", "heads", "seq_len", "vocab")
MAX_LAYERS = 1024
"""Transformer layers at most: 8 x the deepest published (Megatron-LM's 1T-parameter GPT, 128
layers, arXiv:2104.04473 table 1; Llama 3 405B, 126). A million took over a minute and 3.5 GB to
refuse (found by scripts/bad_input_driver.py's kind of input); assumed, a typo guard."""


def llama_ffn_hidden(hidden: int, multiple_of: int = 256, multiplier: float | None = None) -> int:
    """SwiGLU width of Meta's Llama: int(2 x 4h / 3), times ffn_dim_multiplier if set, rounded up
    to a multiple of ``multiple_of`` (facebookresearch/llama, llama/model.py, FeedForward.__init__).
    h = 4096 -> 11008 and 5120 -> 13824 (Llama 2 7B and 13B); Llama 2 70B sets 1.3 and 4096 -> 28672."""
    width = int(2 * 4 * hidden / 3)
    if multiplier is not None:
        width = int(multiplier * width)
    return multiple_of * ((width + multiple_of - 1) // multiple_of)


@dataclass(frozen=True, kw_only=True)
class Architecture:
    family: str
    layers: int
    hidden: int
    heads: int
    seq_len: int
    """Tokens per sample (sequence), the training context."""
    vocab: int
    kv_heads: int
    """Key/value heads (grouped-query attention when fewer than ``heads``)."""
    ffn_hidden: int
    max_positions: int
    """Rows of a learned position table (bert, gpt2); 0 for rotary positions (llama)."""
    tied_embeddings: bool
    experts: int = 0
    """Routed experts per MoE block; 0: a dense model."""
    experts_per_token: int = 0
    """Routed experts each token goes to (top-k)."""
    moe_ffn_hidden: int = 0
    """SwiGLU width of one expert."""
    shared_experts: int = 0
    """Always-active experts per MoE block (DeepSeekMoE), run as one MLP of their summed width."""
    dense_layers: int = 0
    """The first blocks keep a dense MLP (DeepSeekMoE's first_k_dense_replace)."""

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_hidden(self) -> int:
        """Width of K (and of V): kv_heads x head_dim."""
        return self.kv_heads * self.head_dim

    @property
    def moe(self) -> bool:
        return self.experts > 0

    def is_moe_block(self, index: int) -> bool:
        return self.experts > 0 and index >= self.dense_layers

    @property
    def moe_blocks(self) -> int:
        return self.layers - self.dense_layers if self.experts > 0 else 0

    def as_dict(self) -> dict[str, Any]:
        """The keys of ``architecture_from_dict`` (a dense model's without the MoE keys, all 0)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if self.experts or f.name not in ("experts", *MOE_KEYS)}


def architecture_from_dict(spec: Any, where: str = "workload.architecture", base: Architecture | None = None) -> Architecture:
    """Validate ``{family, layers, hidden, heads, seq_len, vocab, ...}``; keys not given come from
    ``base`` (a zoo preset) or the family's defaults (ffn 4 x hidden, or Llama's SwiGLU width;
    kv_heads = heads; a learned position table as long as the sequence; gpt2 and bert tie the head)."""
    if not isinstance(spec, dict):
        raise ConfigError(where, spec, "a mapping with keys " + ", ".join(ARCHITECTURE_KEYS))
    reject_unknown_keys(where, spec, ARCHITECTURE_KEYS)
    given = {**(base.as_dict() if base else {}), **spec}
    missing = [k for k in REQUIRED_KEYS if k not in given]
    if missing:
        raise ConfigError(f"{where}.{missing[0]}", None, "a positive integer (required: " + ", ".join(REQUIRED_KEYS) + ")")
    family = require_choice(f"{where}.family", given.get("family", "llama"), FAMILIES)
    ints = {k: require_positive(f"{where}.{k}", given[k], integer=True) for k in REQUIRED_KEYS}
    require_positive(f"{where}.layers", ints["layers"], integer=True, maximum=MAX_LAYERS,
                     why="8 x the deepest published transformer: a typo beyond it")
    hidden, heads = ints["hidden"], ints["heads"]
    if hidden % heads:
        raise ConfigError(f"{where}.heads", heads, f"a divisor of hidden={hidden}")
    kv_heads = require_positive(f"{where}.kv_heads", given.get("kv_heads", heads), integer=True)
    if heads % kv_heads or (family == "bert" and kv_heads != heads):
        raise ConfigError(f"{where}.kv_heads", kv_heads,
                          f"a divisor of heads={heads}" + (" (bert: equal to heads)" if family == "bert" else ""))
    default_ffn = llama_ffn_hidden(hidden) if family == "llama" else 4 * hidden
    ffn = require_positive(f"{where}.ffn_hidden", given.get("ffn_hidden", default_ffn), integer=True)
    seq = ints["seq_len"]
    if family == "llama":
        positions = 0
        if spec.get("max_positions"):
            raise ConfigError(f"{where}.max_positions", spec["max_positions"], "0 or absent for llama (rotary positions)")
    else:
        positions = given.get("max_positions") or seq
        positions = require_positive(f"{where}.max_positions", positions, integer=True)
        if seq > positions:
            raise ConfigError(f"{where}.seq_len", seq, f"at most max_positions={positions} (the learned position "
                              "table; raise workload.architecture.max_positions to train longer sequences)")
    tied = require_bool(f"{where}.tied_embeddings", given.get("tied_embeddings", family != "llama"))
    moe = _moe_fields(given, spec, where, family, ints["layers"], ffn)
    return Architecture(family=family, layers=ints["layers"], hidden=hidden, heads=heads, seq_len=seq,
                        vocab=ints["vocab"], kv_heads=kv_heads, ffn_hidden=ffn, max_positions=positions,
                        tied_embeddings=tied, **moe)


def _moe_fields(given: dict[str, Any], spec: dict[str, Any], where: str, family: str, layers: int,
                ffn: int) -> dict[str, int]:
    """experts, experts_per_token, moe_ffn_hidden, shared_experts, dense_layers, checked together
    (``spec``: what the user wrote, over ``given``'s preset)."""
    experts = require_positive(f"{where}.experts", given.get("experts", 0), integer=True, allow_zero=True)
    if not experts:
        stray = [k for k in MOE_KEYS if spec.get(k)]
        if stray:
            raise ConfigError(f"{where}.{stray[0]}", given[stray[0]], "absent or 0 without experts (a dense model)")
        return {}
    if family != "llama":
        raise ConfigError(f"{where}.experts", experts, "0 for the bert and gpt2 families (mixture-of-experts blocks are "
                          "llama-style SwiGLU experts: Mixtral, DeepSeekMoE)")
    top_k = require_positive(f"{where}.experts_per_token", given.get("experts_per_token", 0), integer=True,
                             maximum=experts, why=f"at most experts={experts}")
    return {
        "experts": experts,
        "experts_per_token": top_k,
        "moe_ffn_hidden": require_positive(f"{where}.moe_ffn_hidden", given.get("moe_ffn_hidden", ffn), integer=True),
        "shared_experts": require_positive(f"{where}.shared_experts", given.get("shared_experts", 0), integer=True,
                                           allow_zero=True),
        "dense_layers": require_positive(f"{where}.dense_layers", given.get("dense_layers", 0), integer=True,
                                         allow_zero=True, maximum=layers - 1,
                                         why=f"fewer than layers={layers} (at least one block is a mixture of experts)"),
    }


def with_seq_len(arch: Architecture, seq_len: Any, where: str = "workload") -> Architecture:
    """``arch`` at another sequence length (``workload.seq_len``)."""
    return architecture_from_dict({"seq_len": seq_len}, where=where, base=arch)


# -- the rows ------------------------------------------------------------------------------------

Row = tuple[str, str, int, int, int, int]
"""(layer, kind, param_count, fwd_flops, bwd_flops, activation_elems), per sample."""


def _linear(name: str, t: int, n_in: int, n_out: int, bias: bool) -> Row:
    fwd = 2 * t * n_in * n_out
    return (name, "Linear", n_in * n_out + (n_out if bias else 0), fwd, 2 * fwd, t * n_out)


def _norm(name: str, kind: str, t: int, d: int) -> Row:
    return (name, kind, 2 * d if kind == "LayerNorm" else d, 0, 0, t * d)


def _core(name: str, t: int, d: int) -> Row:
    fwd = 4 * t * t * d
    return (name, "core", 0, fwd, 2 * fwd, t * d)


def _moe_rows(p: str, arch: Architecture) -> list[Row]:
    """A mixture-of-experts MLP (module docstring): router, routed experts, shared experts."""
    t, d, e, k, f = arch.seq_len, arch.hidden, arch.experts, arch.experts_per_token, arch.moe_ffn_hidden
    router = 2 * t * d * e
    experts = 6 * k * t * d * f
    rows: list[Row] = [(f"{p}.router", "Router", d * e, router, 2 * router, t * e),
                       (f"{p}.experts", "Experts", 3 * e * d * f, experts, 2 * experts, t * d)]
    if arch.shared_experts:
        width = arch.shared_experts * f
        rows += [_linear(f"{p}.shared.gate", t, d, width, False), _linear(f"{p}.shared.up", t, d, width, False),
                 _linear(f"{p}.shared.down", t, width, d, False)]
    return rows


def transformer_rows(arch: Architecture) -> list[Row]:
    """The layer table of ``arch``, in forward order (see the module docstring)."""
    t, d, f, v = arch.seq_len, arch.hidden, arch.ffn_hidden, arch.vocab
    rows: list[Row] = [("embed.tok", "Embedding", v * d, 0, 0, t * d)]
    if arch.family == "bert":
        rows += [("embed.pos", "Embedding", arch.max_positions * d, 0, 0, 0), ("embed.seg", "Embedding", 2 * d, 0, 0, t * d),
                 _norm("embed.ln", "LayerNorm", t, d)]
        for i in range(arch.layers):
            p = f"layer{i}"
            rows += [_linear(f"{p}.attn.qkv", t, d, 3 * d, True), _core(f"{p}.attn.core", t, d),
                     _linear(f"{p}.attn.proj", t, d, d, True), _norm(f"{p}.ln1", "LayerNorm", t, d),
                     _linear(f"{p}.fc", t, d, f, True), _linear(f"{p}.out", t, f, d, True), _norm(f"{p}.ln2", "LayerNorm", t, d)]
        decoder = _linear("head.decoder", t, d, v, True)
        if arch.tied_embeddings:
            decoder = (decoder[0], decoder[1], v, *decoder[3:])
        return rows + [_linear("head.dense", t, d, d, True), _norm("head.ln", "LayerNorm", t, d), decoder]
    if arch.family == "gpt2":
        rows.append(("embed.pos", "Embedding", arch.max_positions * d, 0, 0, 0))
        for i in range(arch.layers):
            p = f"block{i}"
            rows += [_norm(f"{p}.ln1", "LayerNorm", t, d), _linear(f"{p}.attn.qkv", t, d, 3 * d, True),
                     _core(f"{p}.attn.core", t, d), _linear(f"{p}.attn.proj", t, d, d, True),
                     _norm(f"{p}.ln2", "LayerNorm", t, d), _linear(f"{p}.fc", t, d, f, True), _linear(f"{p}.out", t, f, d, True)]
        head = _linear("head.head", t, d, v, False)
        if arch.tied_embeddings:
            head = (head[0], head[1], 0, *head[3:])
        return rows + [_norm("head.ln", "LayerNorm", t, d), head]
    d_kv = arch.kv_heads * arch.head_dim
    for i in range(arch.layers):
        p = f"block{i}"
        rows += [_norm(f"{p}.attn_norm", "RMSNorm", t, d), _linear(f"{p}.attn.q", t, d, d, False),
                 _linear(f"{p}.attn.k", t, d, d_kv, False), _linear(f"{p}.attn.v", t, d, d_kv, False),
                 _core(f"{p}.attn.core", t, d), _linear(f"{p}.attn.o", t, d, d, False),
                 _norm(f"{p}.ffn_norm", "RMSNorm", t, d)]
        if arch.is_moe_block(i):
            rows += _moe_rows(f"{p}.moe", arch)
        else:
            rows += [_linear(f"{p}.gate", t, d, f, False), _linear(f"{p}.up", t, d, f, False),
                     _linear(f"{p}.down", t, f, d, False)]
    head = _linear("head.out", t, d, v, False)
    if arch.tied_embeddings:
        head = (head[0], head[1], 0, *head[3:])
    return rows + [_norm("head.norm", "RMSNorm", t, d), head]


def parameter_count(arch: Architecture) -> int:
    return sum(row[2] for row in transformer_rows(arch))


def active_parameter_count(arch: Architecture) -> float:
    """Parameters one token uses: the routed experts' share k / E of theirs (Mixtral's 13 B of 47 B)."""
    total = 0.0
    for row in transformer_rows(arch):
        total += row[2] * (arch.experts_per_token / arch.experts if row[1] == "Experts" else 1)
    return total


def describe(arch: Architecture) -> str:
    gqa = f", {arch.kv_heads} kv heads" if arch.kv_heads != arch.heads else ""
    moe = ""
    if arch.moe:
        shared = f" + {arch.shared_experts} shared" if arch.shared_experts else ""
        dense = f", first {arch.dense_layers} dense" if arch.dense_layers else ""
        moe = f", {arch.experts} experts{shared} (top {arch.experts_per_token}, ffn {arch.moe_ffn_hidden}{dense})"
    return (f"{arch.family} {arch.layers} layers, hidden {arch.hidden}, {arch.heads} heads{gqa}, ffn {arch.ffn_hidden}"
            f"{moe}, seq {arch.seq_len}, vocab {arch.vocab}")

