"""Tensor parallelism (Megatron-style), pure: which layers allreduce activations, and how much.

Megatron-LM splits a transformer layer's attention and MLP each into a column-parallel and a
row-parallel matmul; each pair ends in one allreduce of the output activations inside the
tensor-parallel group: 2 allreduces per transformer layer in forward (the g operators) and 2 in
backward (the f operators) (Shoeybi et al. 2019, section 3, Figure 3). The message is the
layer's output activation, b x s x h elements (``activation_elems`` per sample x micro-batch).
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
}
"""Allreduces per forward (and again per backward) by layer kind (lower case). Any other layer
with parameters counts as one row-parallel matmul (1); layers without parameters are
replicated (0)."""


def tp_allreduces_per_pass(layer: Layer) -> int:
    kind = layer.kind.lower()
    if kind in TP_ALLREDUCES_PER_PASS:
        return TP_ALLREDUCES_PER_PASS[kind]
    return 1 if layer.param_count > 0 else 0


def tp_message_bytes(layer: Layer, micro_batch: int, dtype_bytes: int) -> float:
    """One allreduce's message: micro_batch x activation_elems x dtype bytes (b s h for a transformer)."""
    return micro_batch * layer.activation_elems * dtype_bytes


def tp_layer_comm_s(layer: Layer, micro_batch: int, dtype_bytes: int, group: Cluster, spec: CommSpec | None = None) -> float:
    """Seconds of TP allreduces in one pass (forward or backward) of one layer: count x the
    library's allreduce of the activation (NCCL inside a node by default)."""
    count = tp_allreduces_per_pass(layer)
    if group.world_size == 1 or count == 0:
        return 0.0
    if spec is None:
        from sim.costs.backends import default_backend

        spec = CommSpec(backend=default_backend(group.gpu))
    return count * op_cost("allreduce", tp_message_bytes(layer, micro_batch, dtype_bytes), group, spec).time_s


def tp_bytes_per_rank_closed_form(t: int, micro_batch: int, seq_hidden: float, dtype_bytes: int,
                                  allreduces_per_pass: int = 2) -> float:
    """Bytes one TP rank sends for one transformer layer, forward + backward:
    2 passes x 2 allreduces x 2(t-1)/t x b s h x bytes (ring allreduce, DESIGN.md)."""
    return 2 * allreduces_per_pass * 2 * (t - 1) / t * micro_batch * seq_hidden * dtype_bytes
