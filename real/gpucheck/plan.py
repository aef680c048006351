"""What the GPU check measures, on a GPU and in a CPU dry run: models, dtypes, batch sizes,
repetitions, the interference loops, the harness commands, and each section's share of the
time budget. Torch-free: the report (validation/gpu_report.py) reads the same cases.

Every case names the simulator's workload it is (``ModelCase.workload``): the same description
the measurement builds its torch model from (real.models for a zoo model, real.models.transformers
for an architecture), so measured and predicted rows are the same layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DTYPES = ("fp32", "bf16", "fp16")
"""Compute dtypes: the whole model in that dtype (``scalebench layers --dtype`` does the same), the
loss in fp32. The simulator's strategy.precision of the same name predicts them."""
MEMORY_PRECISIONS = ("fp32", "bf16")
"""How the memory section trains: fp32, or bf16 autocast over fp32 parameters (mixed precision as
torch users run it; the simulator's 16-bit accounting is Megatron's: 2-byte weights and gradients
plus a 4-byte master copy, the same 16 bytes per parameter with Adam)."""

LLAMA_STACK = {"family": "llama", "layers": 4, "hidden": 4096, "heads": 32, "seq_len": 2048, "vocab": 32000}
"""Four blocks of Llama 2 7B (d 4096, 32 heads, SwiGLU 11008: Touvron et al. 2023 Table 1, Llama 1
Table 2; sim.transformer.llama_ffn_hidden), Llama 1's 2048-token context and the 32000-token
vocabulary. The depth is our choice: 1.07 B parameters, so fp32 Adam (16 B per parameter, 17 GB)
and a batch of activations fit one 80 GB GPU."""
TINY_TRANSFORMER = {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4, "ffn_hidden": 256, "seq_len": 32, "vocab": 256}
"""The dry run's transformers: the zoo model's family and layout at toy size (CPU seconds)."""


@dataclass(frozen=True)
class ModelCase:
    name: str
    """The case's label in results (resnet50, bert_base, gpt2_medium, llama_stack)."""
    zoo: str | None
    """The model in real.models and in the simulator's zoo; None: the parameterised decoder."""
    architecture: dict[str, Any] | None = None
    """Transformer dimensions over the zoo preset's (or the decoder's whole architecture)."""
    compute_batches: tuple[int, ...] = ()
    memory_batches: tuple[int, ...] = ()
    stand_in: str = ""
    """Dry run: what this tiny case stands in for, and why it differs."""

    def workload(self, batch_size: int) -> dict[str, Any]:
        """The simulator's ``workload:`` section for this case at ``batch_size``."""
        spec: dict[str, Any] = {"model": self.zoo or "decoder", "batch_size": batch_size}
        if self.architecture is not None:
            spec["architecture"] = dict(self.architecture)
        return spec


@dataclass(frozen=True)
class InterferencePlan:
    gemm_dim: int
    """Square GEMM side (M = N = K) of the compute-bound loop."""
    gemm_dtype: str
    gemm_reps: int
    """GEMMs per timed window."""
    stream_elems: int
    """Elements of each of the memory-bound loop's three tensors (z = x + y)."""
    stream_reps: int
    windows: int
    """Timed windows per configuration (the mean is reported)."""
    channels: tuple[int, ...]
    """Thread blocks the NCCL-style kernels hold (NCCL runs one per channel)."""
    copy_bytes: int
    """Size of each device-to-device copy of the copy interferer."""


@dataclass(frozen=True)
class HarnessStep:
    name: str
    argv: tuple[str, ...]
    """``scalebench`` arguments ({art} = the artifacts folder), or ('hooks', ...) for the hook check."""
    dry_argv: tuple[str, ...] | None
    """The same step on the CPU in a dry run; None: CUDA only."""


@dataclass(frozen=True)
class Plan:
    models: tuple[ModelCase, ...]
    dtypes: tuple[str, ...]
    warmup: int
    steps: int
    """Timed whole training steps per case."""
    unit_reps: int
    """Repetitions of the per-unit (detached) timing."""
    profiled_steps: int
    """Steps under torch.profiler per case (per-layer kernel times)."""
    memory_precisions: tuple[str, ...]
    interference: InterferencePlan
    harness: tuple[HarnessStep, ...]
    shares: dict[str, float] = field(default_factory=dict)
    """Each section's share of the budget (what it may use beyond what earlier ones left)."""
    dry_run: bool = False


SECTIONS = ("compute", "memory", "interference", "harness")
MEMORY_STEPS = 2
"""Training steps per memory point: the first allocates the optimizer's state, the second is measured."""
SHARES = {"compute": 0.35, "memory": 0.15, "interference": 0.10, "harness": 0.40}
"""Of the budget: compute runs first and may not starve the harness, whose launches each start
processes that import torch and initialise CUDA and NCCL (seconds each)."""


def _harness() -> tuple[HarnessStep, ...]:
    """The harness' commands on the GPU, and the same on the CPU where they run there (the dry run
    keeps one of each kind: a training run with a trace and a profile, the layer table made from
    it, the hook check, the collective benchmark; tests/test_real_strategies.py checks the hooks
    on 2 CPU ranks)."""
    real = ("real", "--iterations", "5", "--warmup", "2", "--timeout", "60")
    dry = ("real", "--iterations", "2", "--warmup", "1", "--timeout", "120")
    return (
        HarnessStep(
            "nccl_1rank_resnet50",
            (*real, "--backend", "nccl", "--gpus", "1", "--model", "resnet50", "--batch-size", "32",
             "--profile", "{art}/real_profile.json", "--trace", "{art}/real_phases.json", "--out", "{art}/real_nccl.csv"),
            (*dry, "--gpus", "1", "--model", "small_cnn", "--batch-size", "4",
             "--profile", "{art}/real_profile.json", "--trace", "{art}/real_phases.json", "--out", "{art}/real_nccl.csv")),
        HarnessStep(
            "layers_from_profile",
            ("layers", "resnet50", "--profile", "{art}/real_profile.json", "-o", "{art}/real_profile_layers.csv"),
            ("layers", "small_cnn", "--profile", "{art}/real_profile.json", "-o", "{art}/real_profile_layers.csv")),
        HarnessStep("hooks_nccl_1rank", ("hooks", "nccl", "cuda", "1"), ("hooks", "gloo", "cpu", "1")),
        HarnessStep("hooks_gloo_2ranks", ("hooks", "gloo", "cuda", "2"), None),
        HarnessStep(
            "nccl_1rank_fp8_hook",
            (*real, "--backend", "nccl", "--gpus", "1", "--model", "small_transformer", "--codec", "fp8_e4m3",
             "--out", "{art}/real_nccl_fp8.csv"), None),
        HarnessStep(
            "gloo_cuda_2ranks_bf16",
            (*real, "--backend", "gloo", "--device", "cuda", "--gpus", "2", "--model", "small_transformer",
             "--codec", "bf16", "--out", "{art}/real_gloo_cuda_2.csv"), None),
        HarnessStep(
            "gloo_cuda_4ranks",
            (*real, "--backend", "gloo", "--device", "cuda", "--gpus", "4", "--model", "small_cnn",
             "--out", "{art}/real_gloo_cuda_4.csv"), None),
        HarnessStep(
            "comm_nccl_1rank",
            ("real", "--comm", "--backend", "nccl", "--gpus", "1", "--max-bytes", "256M", "--iterations", "10",
             "--collectives", "allreduce", "allgather", "broadcast", "--out", "{art}/comm_nccl_1.csv"), None),
        HarnessStep(
            "comm_gloo_cuda_2ranks",
            ("real", "--comm", "--backend", "gloo", "--device", "cuda", "--gpus", "2", "--max-bytes", "64M",
             "--iterations", "5", "--collectives", "allreduce", "allgather", "broadcast",
             "--out", "{art}/comm_gloo_cuda_2.csv"),
            ("real", "--comm", "--gpus", "2", "--max-bytes", "64K", "--iterations", "3", "--warmup", "1",
             "--collectives", "allreduce", "--out", "{art}/comm_gloo_cuda_2.csv")),
    )


GPU_PLAN = Plan(
    models=(
        ModelCase("resnet50", "resnet50", compute_batches=(32, 128)),
        ModelCase("bert_base", "bert_base", compute_batches=(8, 32)),
        ModelCase("gpt2_medium", "gpt2_medium", compute_batches=(2, 8), memory_batches=(1, 2, 4)),
        ModelCase("llama_stack", None, LLAMA_STACK, compute_batches=(1, 2), memory_batches=(1, 2, 4)),
    ),
    dtypes=DTYPES, warmup=2, steps=5, unit_reps=2, profiled_steps=1, memory_precisions=MEMORY_PRECISIONS,
    interference=InterferencePlan(gemm_dim=8192, gemm_dtype="bf16", gemm_reps=40, stream_elems=1 << 26,
                                  stream_reps=200, windows=3, channels=(8, 16, 32, 66), copy_bytes=1 << 29),
    harness=_harness(), shares=SHARES,
)
"""The run on one H100 or H200 (its length: ``estimated_compute_s`` and docs/validation.md)."""

DRY_PLAN = Plan(  # one batch per model: the dry run exercises the code, a second batch would only double its time
    models=(
        ModelCase("resnet50", "small_cnn", compute_batches=(4,),
                  stand_in="small_cnn for resnet50: a ResNet-50 step in fp16/bf16 takes 5 s on a 2-core CPU at any "
                           "image size"),
        ModelCase("bert_base", "bert_base", TINY_TRANSFORMER, compute_batches=(4,), stand_in="bert_base at toy size"),
        ModelCase("gpt2_medium", "gpt2_medium", TINY_TRANSFORMER, compute_batches=(4,), memory_batches=(1, 2),
                  stand_in="gpt2_medium at toy size"),
        ModelCase("llama_stack", None, {**TINY_TRANSFORMER, "family": "llama"}, compute_batches=(4,),
                  memory_batches=(1, 2), stand_in="the Llama block stack at toy size"),
    ),
    dtypes=DTYPES, warmup=1, steps=2, unit_reps=1, profiled_steps=1, memory_precisions=MEMORY_PRECISIONS,
    interference=InterferencePlan(gemm_dim=128, gemm_dtype="fp32", gemm_reps=20, stream_elems=1 << 18,
                                  stream_reps=20, windows=2, channels=(8, 32), copy_bytes=1 << 20),
    harness=_harness(), shares=SHARES, dry_run=True,
)


def plan_for(dry_run: bool) -> Plan:
    return DRY_PLAN if dry_run else GPU_PLAN


# -- the run's length, from FLOP counts ---------------------------------------------------------

ASSUMED_RATE_FLOPS = {"fp32": 40e12, "bf16": 400e12, "fp16": 400e12}
"""Achieved rates for planning the run's length only (assumed: about 60 % of the H100 SXM's 67
TFLOP/s fp32 and 40 % of its 989 TFLOP/s dense bf16/fp16, sim/data/gpus.yaml; nothing is predicted
from them)."""


def case_flops(case: ModelCase, batch: int) -> float:
    """One training step's forward + backward FLOPs by the simulator's layer table."""
    from sim.workload import workload_from_dict

    workload = workload_from_dict(case.workload(batch))
    return batch * (workload.fwd_flops_per_sample + workload.bwd_flops_per_sample)


def steps_per_case(plan: Plan) -> int:
    """Whole-step equivalents one compute case runs: warm-up, timed steps, the per-unit passes
    (warm-up + repetitions, a step each) and the profiled steps."""
    return plan.warmup + plan.steps + (1 + plan.unit_reps) + plan.profiled_steps


def estimated_compute_s(plan: Plan) -> dict[str, float]:
    """Seconds of GPU arithmetic per section at ASSUMED_RATE_FLOPS (launch gaps, model builds and
    the profiler's own time come on top)."""
    compute = sum(steps_per_case(plan) * case_flops(case, b) / ASSUMED_RATE_FLOPS[d]
                  for case in plan.models for d in plan.dtypes for b in case.compute_batches)
    memory = sum(MEMORY_STEPS * case_flops(case, b) * (1 + ckpt / 3) / ASSUMED_RATE_FLOPS[p]
                 for case in plan.models for b in case.memory_batches for p in plan.memory_precisions
                 for ckpt in (0, 1))
    i = plan.interference
    gemm = 2 * i.gemm_dim ** 3 * i.gemm_reps * i.windows / ASSUMED_RATE_FLOPS[i.gemm_dtype]
    configs = 1 + 2 * len(i.channels) + 1  # alone, hold and reduce-copy per channel count, copies
    return {"compute": compute, "memory": memory, "interference": 2 * configs * gemm,
            "total": compute + memory + 2 * configs * gemm}
