"""Memory per rank, as Megatron-LM and DeepSpeed users count it.

- Model state, as ZeRO counts it (Rajbhandari et al. 2020, section 3.1): parameters and gradients
  in the compute precision; the optimizer keeps fp32 state per parameter (momentum: 1 copy; Adam:
  2) and, with 16-bit training, an fp32 master copy (Micikevicius et al. 2018): 16 bytes per
  parameter for mixed-precision Adam, 12 of them optimizer state. Tensor parallelism splits every
  layer over tp (Megatron's norms are replicated: a few h per layer, ignored), expert parallelism
  the experts over ep. ZeRO (``strategy.zero_stage``, section 5.1) shards over the ranks that hold
  the same parameters (dp x cp; the experts' over dp x cp / ep): stage 1 the optimizer state,
  stage 2 also the gradients, stage 3 also the parameters, which are then gathered a unit (a
  transformer block) at a time, the next one prefetched, the computing one copied out of its
  gather's buffer: three units whole.
- Activations: a transformer's (``workload.architecture``) tensor by tensor as Korthikanti et al.
  2022 count them (sim.costs.activations: tensor and sequence parallelism, selective or full
  recomputation, flash or eager attention, context parallelism, mixture-of-experts blocks); a
  layer table without an architecture (CNNs, a ``scalebench layers`` table) keeps each layer's
  output for the micro-batch (no formula applies: a lower bound), split over tp.
- A pipeline stage holds the micro-batches in flight of its schedule
  (sim.costs.activations.in_flight_micro_batches: GPipe m, 1F1B p - s, interleaved Megatron's).
- Full recomputation runs one block's forward again inside backward: that block's activations
  are held once more while it runs (one micro-batch, the largest block of the stage).
- Codec buffers (the encoded bucket, the allgather path's gather buffer, error feedback).
- A reserve that is not the model's (``reserve_parts``): the CUDA context, NCCL's buffers, the
  caching allocator's fragmentation.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.codecs import CODECS
from sim.costs.activations import (
    ActivationTerms,
    block_terms,
    checkpoint_bytes,
    embedding_terms,
    head_terms,
    in_flight_micro_batches,
)
from sim.costs.passes import attention_is_flash
from sim.errors import ConfigError
from sim.scenario import Scenario
from sim.strategy import DTYPE_BYTES
from sim.units import MIB, human_bytes

OPTIMIZER_STATE_BYTES = {"sgd": 0, "momentum": 4, "adam": 8}
"""fp32 state per parameter: momentum's velocity; Adam's two moments (Kingma & Ba 2015)."""
MASTER_WEIGHTS_BYTES = 4
"""fp32 master copy kept by 16-bit training (Micikevicius et al. 2018)."""
CUDA_CONTEXT_BYTES = 723 * MIB
"""Assumed: what a process's CUDA context and loaded kernels take before any tensor: 723 MiB
measured by a PyTorch user for torch's first CUDA tensor (discuss.pytorch.org/t/73021), '~700+ MB
depending on the CUDA version' (a PyTorch maintainer, discuss.pytorch.org/t/81330). Not measured
here (no GPU)."""
NCCL_CHANNEL_BUFFER_BYTES = 8 * 512 * 8 * 16 + 120 * 640 * 8 * 8 + (1 << 22)
"""NCCL's buffers per channel and connection, one per protocol (src/init.cc computeBuffSizes):
LL NCCL_LL_LINES_PER_THREAD 8 x NCCL_LL_MAX_NTHREADS 512 x NCCL_STEPS 8 x 16 B = 512 KiB, LL128
NCCL_LL128_ELEMS_PER_THREAD 120 x NCCL_LL128_MAX_NTHREADS 640 x 8 steps x 8 B = 4.69 MiB, Simple
NCCL_BUFFSIZE 4 MiB (src/include/device.h; NVIDIA/nccl 5067397c): 9.19 MiB."""
NCCL_P2P_CHANNELS_PER_PEER = 2
"""Assumed: channels NCCL opens to each pipeline neighbour (NCCL_NCHANNELS_PER_NET_PEER's usual
default), each with its Simple buffer."""
FRAGMENTATION_SHARE = 0.15
"""Assumed from a measurement: PyTorch's caching allocator leaves memory it has reserved unusable
as training allocates and frees activations of varied sizes: GMLake (Guo et al., ASPLOS 2024,
arXiv:2401.08156) measured on eight LLMs on A100 80 GB with recomputation, ZeRO and LoRA that
stitching removes 15 % of the memory on average as fragmentation (up to 33 %; their README: 'up
to 30 % GPU memory fragmentation'). Applied here to the memory allocated and freed every
iteration (activations, gathered ZeRO-3 parameters), not to the model state allocated once."""


@dataclass(frozen=True)
class MemoryBreakdown:
    stage: int
    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    """One micro-batch's stored activations."""
    stash_bytes: float
    """The other micro-batches a pipeline stage holds."""
    codec_bytes: float
    """Encoded bucket, gather buffer (allgather path) and error-feedback residual."""
    gathered_bytes: float = 0.0
    """ZeRO-3: the parameters of the unit being computed and the one prefetched, whole."""
    recompute_bytes: float = 0.0
    """Full recomputation: one block's activations again while it is recomputed."""
    context_bytes: float = 0.0
    """The CUDA context (CUDA_CONTEXT_BYTES; 0 on a CPU)."""
    nccl_bytes: float = 0.0
    """NCCL's buffers for the communicators this rank belongs to."""
    fragmentation_bytes: float = 0.0
    """The caching allocator's fragmentation (FRAGMENTATION_SHARE of the per-iteration allocations)."""

    @property
    def total_bytes(self) -> float:
        return sum(self.parts().values())

    @property
    def reserve_bytes(self) -> float:
        return self.context_bytes + self.nccl_bytes + self.fragmentation_bytes

    def parts(self) -> dict[str, float]:
        return {"params": self.params_bytes, "grads": self.grads_bytes, "optimizer": self.optimizer_bytes,
                "activations": self.activations_bytes, "pipeline stash": self.stash_bytes,
                "codec buffers": self.codec_bytes, "gathered params": self.gathered_bytes,
                "recomputed block": self.recompute_bytes, "CUDA context": self.context_bytes,
                "NCCL buffers": self.nccl_bytes, "fragmentation": self.fragmentation_bytes}


def device_chunks(bounds: list[tuple[int, int]], pp: int) -> list[list[tuple[int, int]]]:
    """The [start, end) layer ranges each pipeline rank holds: one per stage, or with the
    interleaved schedule (len(bounds) = pp x vpp model chunks) chunks s, s + pp, s + 2 pp ..."""
    return [bounds[s::pp] for s in range(pp)]


def memory_per_rank(scenario: Scenario, stage_bounds: list[tuple[int, int]] | None = None) -> list[MemoryBreakdown]:
    """One breakdown per pipeline stage (the ranks of a stage hold the same). ``stage_bounds``:
    the [start, end) layers of each model chunk (pp x vpp of them) when the caller has them already
    (the planner, which costs many layouts); None: cut as the pipeline engine cuts
    (sim.engine.pipeline_plan)."""
    workload, strategy = scenario.workload, scenario.strategy
    pp, m = strategy.pp, strategy.micro_batches
    if stage_bounds is not None:
        bounds = list(stage_bounds)
    elif pp > 1:
        from sim.engine.pipeline_plan import chunk_bounds

        bounds = chunk_bounds(scenario)
    else:
        bounds = [(0, len(workload.layers))]
    dp = strategy.dp_degree(scenario.cluster.world_size)
    reserve_fixed = (_context_bytes(scenario), nccl_buffer_bytes(scenario))
    fragmentation = FRAGMENTATION_SHARE if scenario.cluster.gpu.kind == "gpu" else 0.0
    out = []
    for s, chunks in enumerate(device_chunks(bounds, pp)):
        model = _model_state(scenario, chunks, dp)
        acts, transient = _activations(scenario, chunks)
        in_flight = in_flight_micro_batches(strategy.schedule, pp, m, s, strategy.vpp) if pp > 1 else 1.0
        stash = (in_flight - 1) * acts
        gathered = model.pop("gathered")
        dynamic = acts + stash + transient + gathered
        out.append(MemoryBreakdown(
            s, model["params"], model["grads"], model["optimizer"], acts, stash,
            _codec_bytes(scenario, model["shard_params"], DTYPE_BYTES[strategy.precision], dp),
            gathered_bytes=gathered, recompute_bytes=transient, context_bytes=reserve_fixed[0],
            nccl_bytes=reserve_fixed[1], fragmentation_bytes=fragmentation * dynamic,
        ))
    return out


def _model_state(scenario: Scenario, chunks: list[tuple[int, int]], dp: int) -> dict[str, float]:
    """Parameters, gradients and optimizer state of one rank, sharded as ZeRO's stage says."""
    workload, strategy = scenario.workload, scenario.strategy
    tp, ep, cp = strategy.tp, strategy.ep, strategy.cp
    dtype = DTYPE_BYTES[strategy.precision]
    state = OPTIMIZER_STATE_BYTES[workload.optimizer] + (MASTER_WEIGHTS_BYTES if dtype < 4 else 0)
    if strategy.collective == "ps":
        state = 0  # parameter servers apply the update and keep its state
    dense_sum, expert_sum = workload.param_prefix
    dense = sum(dense_sum[hi] - dense_sum[lo] for lo, hi in chunks) / tp
    experts = sum(expert_sum[hi] - expert_sum[lo] for lo, hi in chunks) / (tp * ep)
    shard = max(1, dp * cp)
    expert_shard = max(1, dp * cp // ep)
    stage = strategy.zero_stage

    def sharded(values: float, expert_values: float, from_stage: int) -> float:
        if stage >= from_stage:
            return values / shard + expert_values / expert_shard
        return values + expert_values

    params = dense + experts
    gathered = 0.0
    if stage >= 3 and shard > 1:
        # three units at the peak: the one computing (its parameters copied out of the gather's
        # buffer, sim.costs.passes), that buffer, kept to overlap the copy with the next gather
        # (torch FSDP2 wait_for_unshard: 'Defer free to allow for overlap of this copy-out with next
        # all-gather collective', _fsdp_param_group.py @002a76f), and the next unit's gather
        gathered = 3 * _largest_unit_params(workload, tuple(chunks), tp, ep) * dtype
    return {
        "params": sharded(dense, experts, 3) * dtype,
        "grads": sharded(dense, experts, 2) * dtype,
        "optimizer": sharded(dense, experts, 1) * state,
        "shard_params": params,
        "gathered": gathered,
    }


def _largest_unit_params(workload, chunks: tuple[tuple[int, int], ...], tp: int, ep: int) -> float:
    """The parameters one rank holds of its largest unit (ZeRO-3 gathers a unit at a time)."""
    dense_sum, expert_sum = workload.param_prefix
    units = workload.unit_index
    largest = 0.0
    for lo, hi in chunks:
        start = lo
        for i in range(lo, hi + 1):
            if i == hi or units[i] != units[start]:
                share = (dense_sum[i] - dense_sum[start]) / tp + (expert_sum[i] - expert_sum[start]) / (tp * ep)
                largest = max(largest, share)
                start = i
    return largest


def _activations(scenario: Scenario, chunks: list[tuple[int, int]]) -> tuple[float, float]:
    """(one micro-batch's stored activations, full recomputation's transient block) of a rank."""
    workload, strategy = scenario.workload, scenario.strategy
    micro = workload.batch_size // strategy.micro_batches
    dtype = DTYPE_BYTES[strategy.precision]
    arch = workload.architecture
    if arch is None:
        acts = sum(micro * sum(layer.activation_elems for layer in workload.layers[lo:hi]) * dtype / strategy.tp
                   for lo, hi in chunks)
        return acts, 0.0
    return transformer_activation_bytes(scenario, chunks, micro)


def transformer_activation_bytes(scenario: Scenario, chunks: list[tuple[int, int]], micro: int) -> tuple[float, float]:
    """A transformer rank's stored activations for one micro-batch and full recomputation's
    transient: the embedding's, each block's and the head's terms of the units it holds (the
    first unit is the embedding, the last the head, the others blocks)."""
    workload, strategy = scenario.workload, scenario.strategy
    arch = workload.architecture
    assert arch is not None
    dtype = DTYPE_BYTES[strategy.precision]
    tp, sp, cp = strategy.tp, strategy.sequence_parallel and strategy.tp > 1, strategy.cp
    flash = attention_is_flash(scenario)
    capacity = strategy.moe_capacity_factor or 1.0
    units, last = workload.unit_index, len(workload.unit_names) - 1
    kept: dict[bool, tuple[float, float]] = {}  # per block kind (MoE or not): (stored, whole)

    def block(index: int) -> tuple[float, float]:
        moe = arch.is_moe_block(index)
        if moe not in kept:
            terms = block_terms(arch, index, micro, dtype, flash, capacity, cp)
            whole = terms.per_rank_bytes(tp, sp)
            if strategy.recompute == "full":
                kept[moe] = (checkpoint_bytes(arch, micro, dtype, tp, sp, cp), whole)
            else:
                kept[moe] = (terms.per_rank_bytes(tp, sp, keep_scores=strategy.recompute == "none"), whole)
        return kept[moe]

    total = transient = 0.0
    for lo, hi in chunks:
        if hi <= lo:
            continue
        for unit in range(units[lo], units[hi - 1] + 1):
            if unit == 0:
                total += embedding_terms(arch, micro, cp).per_rank_bytes(tp, sp)
            elif unit == last:
                total += head_terms(arch, micro, dtype, cp).per_rank_bytes(tp, sp)
            else:
                stored, whole = block(unit - 1)
                total += stored
                if strategy.recompute == "full":
                    transient = max(transient, whole)
    return total, transient


def _context_bytes(scenario: Scenario) -> float:
    return CUDA_CONTEXT_BYTES if scenario.cluster.gpu.kind == "gpu" else 0.0


def nccl_buffer_bytes(scenario: Scenario) -> float:
    """NCCL's buffers on one rank: each communicator it belongs to (tensor, context, data, expert
    and expert-data parallel groups of more than one rank) holds NCCL_CHANNEL_BUFFER_BYTES per
    run-time channel of its ring (sim.costs.backends.nccl.ring_graph); a pipeline rank holds
    NCCL_P2P_CHANNELS_PER_PEER Simple buffers per neighbour. Other libraries: 0 (their buffers
    are host memory or the collective's own)."""
    from sim.costs.backends import default_backend

    cluster, strategy = scenario.cluster, scenario.strategy
    if (strategy.backend or default_backend(cluster.gpu)) != "nccl" or cluster.gpu.kind != "gpu":
        return 0.0
    from sim.costs.backends.nccl import ring_graph
    from sim.parallel import cp_group, ep_group, grad_group, tp_group

    tp, pp, cp, ep = strategy.tp, strategy.pp, strategy.cp, strategy.ep
    dp = strategy.dp_degree(cluster.world_size)
    groups = []
    if tp > 1:
        groups.append(tp_group(cluster, tp))
    if cp > 1:
        groups.append(cp_group(cluster, cp, tp))
    if dp * cp > 1:
        groups.append(grad_group(cluster, dp, tp, pp, cp))
    if ep > 1:
        groups.append(ep_group(cluster, ep, tp, pp, cp))
    total = sum(ring_graph(g).runtime_channels * NCCL_CHANNEL_BUFFER_BYTES for g in groups if g.world_size > 1)
    if pp > 1:
        total += 2 * NCCL_P2P_CHANNELS_PER_PEER * (1 << 22)
    return float(total)


def _codec_bytes(scenario: Scenario, params: float, dtype: int, dp: int) -> float:
    strategy = scenario.strategy
    if strategy.codec is None or dp == 1:
        return 0.0
    codec = CODECS[strategy.codec]
    bucket_elems = min(params, strategy.bucket_bytes / dtype)
    encoded = bucket_elems * codec.bytes_per_elem + codec.scale_bytes
    gather = (dp - 1) * encoded if strategy.resolved_codec_path() == "allgather" else 0.0
    residual = params * dtype if strategy.error_feedback else 0.0
    return encoded + gather + residual


def check_memory(scenario: Scenario) -> MemoryBreakdown:
    """The fullest rank's breakdown; a ConfigError naming what overflows, and by how much."""
    worst = max(memory_per_rank(scenario), key=lambda b: b.total_bytes)
    capacity = scenario.cluster.gpu.memory_bytes
    if worst.total_bytes > capacity:
        parts = " + ".join(f"{name} {human_bytes(v)}" for name, v in worst.parts().items() if v)
        where = f" (pipeline stage {worst.stage})" if scenario.strategy.pp > 1 else ""
        raise ConfigError(
            "memory per rank" + where, f"{human_bytes(worst.total_bytes)} = {parts}",
            f"at most the {human_bytes(capacity)} of a {scenario.cluster.gpu.name}: over by "
            f"{human_bytes(worst.total_bytes - capacity)} (more tp/pp/cp, recompute, zero_stage, micro-batches, a "
            "smaller batch, or simulation.check_memory: false)",
            related=("workload", "cluster", "strategy", "catalog"),  # all of them decide it
        )
    return worst


__all__ = ["ActivationTerms", "MemoryBreakdown", "attention_is_flash", "check_memory", "memory_per_rank",
           "nccl_buffer_bytes", "transformer_activation_bytes"]
