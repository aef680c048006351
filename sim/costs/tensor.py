"""Tensor parallelism (Megatron-style), pure: which layers allreduce activations, and how much.

Megatron-LM splits a transformer layer's attention and MLP each into a column-parallel and a
row-parallel matmul; each pair ends in one allreduce of the output activations inside the
tensor-parallel group: 2 allreduces per transformer layer in forward (the g operators) and 2 in
backward (the f operators) (Shoeybi et al. 2019, section 3, Figure 3). The message is the
layer's output activation, b x s x h elements (``activation_elems`` per sample x micro-batch).
With sequence parallelism each allreduce becomes a reduce-scatter (g-bar) and an allgather (g) of
the same activation (Korthikanti et al. 2022, section 4.2.2, Figure 5): the same bytes on a ring,
two collectives of the library instead of one.
"""

from __future__ import annotations

from sim.cluster import Cluster
from sim.costs.comm import CommSpec, op_cost
from sim.workload import Layer

TP_ALLREDUCES_PER_PASS: dict[str, int] = {
    "transformer": 2, "transformerblock": 2, "transformer_block": 2, "block": 2,
    "gpt2block": 2, "bertlayer": 2, "transformerencoderlayer": 2, "transformerdecoderlayer": 2,
    "attention": 1, "multiheadattention": 1, "mlp": 1,
    "embedding": 1,  # vocabulary-parallel embedding: one allreduce of its output (Megatron)
    "experts": 1,  # the routed experts' output, reduced as an MLP's (Megatron's expert tensor parallelism)
}
"""Allreduces per forward (and again per backward) by layer kind (lower case), for tables whose
rows are whole blocks or sub-blocks."""

REPLICATED_KINDS = ("layernorm", "rmsnorm", "batchnorm2d", "dropout", "core", "router")
"""Megatron keeps normalisations replicated on every TP rank: no allreduce (Shoeybi et al. 2019, sec. 3)."""
COLUMN_PARALLEL_NAMES = frozenset({
    "qkv", "q", "k", "v", "query", "key", "value", "q_proj", "k_proj", "v_proj", "c_attn", "in_proj",
    "fc", "fc1", "up", "gate", "up_proj", "gate_proj", "c_fc", "dense_h_to_4h", "intermediate", "w1", "w3",
})
"""A Linear that opens a Megatron pair (split by output columns: its output stays sharded, no
allreduce): the attention's query/key/value projection and the MLP's first (and gate) projection."""
ROW_PARALLEL_NAMES = frozenset({
    "proj", "o", "o_proj", "out_proj", "c_proj", "dense", "out", "fc2", "down", "down_proj",
    "dense_4h_to_h", "output", "w2",
})
"""A Linear that closes a pair (split by input rows: partial sums, one allreduce of its output): the
attention's output projection and the MLP's second projection (Shoeybi et al. 2019, Figure 3)."""
LM_HEAD_PREFIXES = frozenset({"head", "lm_head", "cls"})
"""The language-model head: its output projection is split by vocabulary like the embedding it
shares, so the logits stay sharded (the parallel cross-entropy reduces a few scalars per token);
BERT's head transform is a plain replicated Linear (Megatron-LM's BertLMHead). No allreduce."""
UNSHARDED_EMBEDDINGS = frozenset({"pos", "position", "wpe", "seg", "token_type", "position_embeddings",
                                  "token_type_embeddings"})
"""Embeddings Megatron does not split by vocabulary (positions, segments): replicated, no allreduce."""


def tp_allreduces_per_pass(layer: Layer) -> int:
    """Allreduces of this row per pass: by kind for block-sized rows; for a Linear, one if its name
    says it closes a Megatron pair, none if it opens one (a Linear of another name counts as
    closing one); norms and parameter-free rows none; the vocabulary-parallel embedding one."""
    kind = layer.kind.lower()
    role = layer.name.rsplit(".", 1)[-1].lower()
    if kind == "embedding":
        return 0 if role in UNSHARDED_EMBEDDINGS else 1
    if kind in TP_ALLREDUCES_PER_PASS:
        return TP_ALLREDUCES_PER_PASS[kind]
    if kind in REPLICATED_KINDS or layer.param_count <= 0:
        return 0
    if layer.name.split(".", 1)[0].lower() in LM_HEAD_PREFIXES:
        return 0
    if kind == "linear" and role in COLUMN_PARALLEL_NAMES:
        return 0
    return 1


def tp_message_bytes(layer: Layer, micro_batch: int, dtype_bytes: int, share: float = 1.0) -> float:
    """One allreduce's message: micro_batch x activation_elems x dtype bytes (b s h for a
    transformer), x ``share`` (1 / cp: a context-parallel rank holds that share of the sequence)."""
    return micro_batch * layer.activation_elems * dtype_bytes * share


def tp_layer_comm_s(layer: Layer, micro_batch: int, dtype_bytes: int, group: Cluster, spec: CommSpec | None = None,
                    sequence_parallel: bool = False, share: float = 1.0) -> float:
    """Seconds of TP collectives in one pass (forward or backward) of one layer: count x the
    library's allreduce of the activation (NCCL inside a node by default), or with sequence
    parallelism count x (its reduce-scatter + its allgather)."""
    count = tp_allreduces_per_pass(layer)
    if group.world_size == 1 or count == 0:
        return 0.0
    if spec is None:
        from sim.costs.backends import default_backend

        spec = CommSpec(backend=default_backend(group.gpu))
    n_bytes = tp_message_bytes(layer, micro_batch, dtype_bytes, share)
    if sequence_parallel:
        return count * (op_cost("reduce_scatter", n_bytes, group, spec).time_s
                        + op_cost("allgather", n_bytes, group, spec).time_s)
    return count * op_cost("allreduce", n_bytes, group, spec).time_s


def tp_bytes_per_rank_closed_form(t: int, micro_batch: int, seq_hidden: float, dtype_bytes: int,
                                  allreduces_per_pass: int = 2) -> float:
    """Bytes one TP rank sends for one transformer layer, forward + backward:
    2 passes x 2 allreduces x 2(t-1)/t x b s h x bytes (ring allreduce, DESIGN.md)."""
    return 2 * allreduces_per_pass * 2 * (t - 1) / t * micro_batch * seq_hidden * dtype_bytes
