"""Model FLOPs utilisation: the FLOPs a training step needs over what the GPUs could do.

Two definitions are in use, and a plan row shows both (docs/metrics.md):

- MFU (Chowdhery et al. 2022, PaLM, arXiv:2204.02311, appendix B): the model's FLOPs per token,
  6N + 12 L H Q T (the parameters' matrix multiplications forward and backward, and attention's
  QK^T and AV over the sequence T), times tokens per second, over the GPUs' peak. Recomputation is
  not counted: a layout that recomputes pays for it in MFU. Here the model's FLOPs are the layer
  table's forward + backward matrix multiplications (sim.transformer: 2 FLOPs per multiply-
  accumulate, attention's 4 t^2 d forward per layer counted in full), which for a transformer is
  PaLM's 6N + 12 L H Q T per token with N the parameters a token's matmuls touch (the head's
  vocabulary projection included, the embedding lookup not);
- the FLOPs Narayanan et al. 2021 (SC'21, arXiv:2104.04473, equation 3) count for Megatron-LM's
  'achieved teraFLOP/s': the same model FLOPs plus the extra forward pass activation recomputation
  runs, 96 B s l h^2 (1 + s/6h + V/16lh) per iteration for a GPT with full recomputation. Here:
  model FLOPs + the recomputed forward (full: every transformer block's, selective: attention's
  core), so it is closer to what the hardware executed (PaLM's 'HFU').

Peak: the GPU's dense peak for the compute precision (its catalog's ``peak_tflops``).
"""

from __future__ import annotations

from sim.costs.pipeline import layer_unit
from sim.workload import Workload


def model_flops_per_sample(workload: Workload) -> float:
    """Forward + backward FLOPs of one sample through the layer table (PaLM's model FLOPs)."""
    return sum(layer.fwd_flops + layer.bwd_flops for layer in workload.layers)


def recompute_flops_per_sample(workload: Workload, recompute: str) -> float:
    """The forward FLOPs recomputation runs again per sample: full every transformer block's
    layers (sim.costs.passes), selective attention's core, none nothing."""
    if recompute == "none" or workload.architecture is None:
        return 0.0
    if recompute == "selective":
        return sum(layer.fwd_flops for layer in workload.layers if layer.kind.lower() == "core")
    units = workload.unit_names
    blocks = set(units[1:-1])
    return sum(layer.fwd_flops for layer in workload.layers if layer_unit(layer.name) in blocks)


def utilisation(flops_per_sample: float, samples_per_s: float, gpus: int, peak_flops: float) -> float:
    """FLOPs per second achieved over the GPUs' peak: flops_per_sample x samples_per_s / (gpus x peak)."""
    return flops_per_sample * samples_per_s / (gpus * peak_flops)
