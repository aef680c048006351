"""The memory-bound kernels between a transformer's matrix multiplications, pure.

A zoo transformer's layer table (sim.transformer) lists its matrix multiplications and norms; the
kernels that run between them hold no FLOPs the table counts but move every element of their
tensors through HBM: the softmax and dropout over eager attention's s x s scores, the activation
after the MLP's first projection, the dropout and residual add after the attention's and the
MLP's output projections. Each is memory-bound (a few FLOPs per byte), so its time is its bytes
at the memory roof: t = bytes / memory bandwidth (Williams et al. 2009's roofline with no compute
term), each kernel reading its inputs and writing its outputs once (a fused kernel once for all
it fuses). The kernels and their fusions are Megatron-LM's (megatron/model/transformer.py,
megatron/model/fused_softmax.py, fused_bias_gelu.py at aed2f75e, April 2021; the same sequence in
Megatron-Core's TransformerLayer), per element of the tensor they run over, e = the activation
dtype's bytes, a dropout mask one byte (Korthikanti et al. 2022 section 4.1):

- eager attention's scores (a s^2 b elements; split over the tensor-parallel ranks with the heads):
  forward the fused scale-mask-softmax (read e, write e) and, with dropout, the dropout (read e,
  write e and the mask): 2e (+ 2e + 1); backward the dropout's (read the gradient and the mask,
  write e: 2e + 1) and the softmax's (read the gradient and the probabilities, write e: 3e).
  The score GEMMs' own reads and writes of the s x s tensors are taken as hidden under their
  FLOPs (assumed); FlashAttention (Dao et al. 2022) keeps the scores on chip: nothing here;
- GPT and BERT MLPs: the fused bias-GeLU after the first projection (s b f elements, split over
  tp): forward read + write 2e, backward read the gradient and the input, write 3e;
- GPT and BERT: the fused bias-dropout-add after the attention's output projection and after the
  MLP's second projection (s b h elements, whole on every tensor-parallel rank unless sequence
  parallelism splits them): forward read the output and the residual, write the sum and the mask,
  3e + 1; backward the dropout's 2e + 1 (the residual's gradient passes through);
- the llama family (no dropout, Touvron et al. 2023): the residual adds, forward 3e, backward
  nothing; SwiGLU's silu(gate) x up (s b f, split over tp; Megatron-LM's bias_swiglu_impl): forward
  read gate and up, write 3e, backward read the gradient, gate and up, write two gradients 5e;
  routed experts the same per routed copy of a token (top-k x the capacity factor, applied where
  the experts' compute is), shared experts at their width.

Layer norms are rows of the table already (their input and output at the memory roof), the
embeddings' dropout and the loss are left out (one s b h or s b V/t pass per micro-batch, not per
layer; assumed small). A layer with measured times has all of this inside its measurement.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.catalog import GPU
from sim.costs.activations import MASK_BYTES, has_dropout
from sim.transformer import Architecture
from sim.workload import Layer, Workload


@dataclass(frozen=True, slots=True)
class Elementwise:
    """The memory-bound kernels that follow one layer, for one pass over a micro-batch."""

    fwd_bytes: float = 0.0
    bwd_bytes: float = 0.0
    replicated: bool = False
    """Whole on every tensor-parallel rank unless sequence parallelism splits it (else split over tp)."""


NONE = Elementwise()


def _role(layer: Layer) -> str:
    """Which kernels follow a layer: its kind and the last part of its name (sim.transformer's rows)."""
    kind = layer.kind.lower()
    if kind in ("core", "experts"):
        return kind
    if kind != "linear":
        return ""
    tail = layer.name.rsplit(".", 1)[-1]
    if tail in ("proj", "out", "o", "down"):
        return "residual"
    if tail in ("fc", "up"):
        return tail
    return ""


def layer_elementwise(layer: Layer, arch: Architecture, micro_batch: int, dtype_bytes: int, flash: bool) -> Elementwise:
    """The kernels after ``layer`` (module docstring) for ``micro_batch`` sequences of the whole model
    (tensor and context parallelism split them in sim.costs.passes)."""
    role = _role(layer)
    if not role or layer.fwd_time_s is not None:
        return NONE
    e, b, s = float(dtype_bytes), float(micro_batch), float(arch.seq_len)
    drop = has_dropout(arch)
    if role == "core":
        if flash:
            return NONE
        n = arch.heads * s * s * b
        fwd = 2 * e + ((2 * e + MASK_BYTES) if drop else 0.0)
        bwd = 3 * e + ((2 * e + MASK_BYTES) if drop else 0.0)
        return Elementwise(n * fwd, n * bwd)
    if role == "residual":
        n = s * b * arch.hidden
        if drop:
            return Elementwise(n * (3 * e + MASK_BYTES), n * (2 * e + MASK_BYTES), replicated=True)
        return Elementwise(n * 3 * e, 0.0, replicated=True)
    if role == "fc" and arch.family != "llama":
        n = b * layer.activation_elems
        return Elementwise(n * 2 * e, n * 3 * e)
    if role == "up" and arch.family == "llama":
        n = b * layer.activation_elems
        return Elementwise(n * 3 * e, n * 5 * e)
    if role == "experts":
        n = s * b * arch.experts_per_token * arch.moe_ffn_hidden
        return Elementwise(n * 3 * e, n * 5 * e)
    return NONE


def elementwise_times_s(workload: Workload, micro_batch: int, gpu: GPU, dtype_bytes: int,
                        flash: bool) -> list[tuple[float, float, bool]]:
    """Per layer: (forward seconds, backward seconds, replicated) of the kernels after it at the
    memory roof, t = bytes / memory bandwidth (x a calibrated GPU's compute_scale, as the layers'
    roofline); all zero for a workload without a transformer architecture."""
    arch = workload.architecture
    if arch is None:
        return [(0.0, 0.0, False)] * len(workload.layers)
    rate = gpu.memory_bandwidth_Bps / gpu.compute_scale
    out = []
    for layer in workload.layers:
        k = layer_elementwise(layer, arch, micro_batch, dtype_bytes, flash)
        out.append((k.fwd_bytes / rate, k.bwd_bytes / rate, k.replicated))
    return out
