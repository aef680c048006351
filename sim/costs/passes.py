"""One micro-batch's forward and backward per layer on one rank of a large-model layout, pure.

From each layer's whole time (the roofline or a measurement at the micro-batch) and the costs of
its communication (computed by the caller through the collective library), the arithmetic of how
the frameworks run them:

- tensor parallelism (Megatron-LM, Shoeybi et al. 2019): every layer's work splits over tp, plus
  its allreduces in both passes; norms (and the MoE router) stay whole on every rank unless
  sequence parallelism splits them over tp too (Korthikanti et al. 2022 section 4.2.2), where each
  allreduce becomes a reduce-scatter and an allgather (the caller's ``tp_comm_s``);
- context parallelism of cp: every layer's work splits over cp (each rank holds seq_len / cp
  tokens); attention's core runs as ring attention (Liu et al. 2023, arXiv:2310.01889; Megatron-LM
  docs/source/api-guide/context_parallel.rst: 'send/recv of KV chunks ... overlapped with attention
  compute'): cp steps, the first on the rank's own key/value block, each of the cp - 1 others
  computing on one block while the next arrives, so forward = c + (cp - 1) max(c, x) with c the
  core's forward per block and x one block's send; backward the same with its compute and twice
  the bytes (keys and values back, their gradients with them);
- FlashAttention's backward recomputes the scores: the core's backward is 2.5 x its forward
  (Dao 2023, FlashAttention-2, section 4.1: 'the backward pass ... 2.5x the forward') instead of
  the 2 x of stored scores;
- mixture of experts: the experts' work times the capacity factor (padding is computed), and
  with expert parallelism two all-to-alls per pass (dispatch and combine: Lepikhin et al. 2020,
  GShard section 2.2; Megatron-LM's alltoall token dispatcher);
- recomputation (Korthikanti et al. 2022 section 5): full runs every block's forward again
  before its backward (communication included); selective the attention core's;
- ZeRO-3 / FSDP FULL_SHARD: a unit's (a block's) parameters are allgathered before its forward and
  again before its backward, the next unit's prefetched while this one computes, and its gradients
  reduce-scattered after its backward (torch FSDP: forward_prefetch, backward_prefetch
  BACKWARD_PRE; DeepSpeed stage 3's prefetch): a unit's pass takes max(its compute, its gathers
  (+ its reduce-scatter in backward)); what is not hidden is added to the unit's pass. While they
  run, the gathers hold SMs and memory bandwidth the unit's kernels need (sim.costs.contention, the
  rule the data-parallel path applies to its buckets): each layer's share of its roofline load,
  under the footprint of its unit's collectives, gives its factor; the collective is taken as
  spread evenly over the unit's compute stream (its compute and its TP collectives alike), and the
  compute beside it runs ``beside_comm_s`` (``Passes.slowdown_s``). A gathered unit is then copied
  out of the collective's rank-major buffer into its parameters on the compute stream, in forward
  and again in backward (the caller's ``unit_copy_s``): torch FSDP2's ``wait_for_unshard`` runs
  ``foreach_all_gather_copy_out`` on the current stream (torch/distributed/fsdp/_fully_shard/
  _fsdp_param_group.py @002a76f), DeepSpeed stage 3's ``AllGatherCoalescedHandle.wait`` sets each
  parameter to a ``torch.cat`` of its ranks' partitions (deepspeed/runtime/zero/
  partition_parameters.py @c4ec23f); FSDP1's flat parameter, a view of the gather's output, has no
  such copy (not modelled apart).

Everything here is arithmetic on numbers the caller computed once (the planner caches them);
``sim.engine.pipeline_plan`` and ``sim.engine.plan`` call it with the same inputs, so the fast
path and the planner agree to the bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sim.costs.contention import Footprint, PassLoad, beside_comm_s, contention_factor, split_load
from sim.costs.pipeline import layer_unit
from sim.workload import Layer

if TYPE_CHECKING:
    from sim.scenario import Scenario

REPLICATED_COMPUTE_KINDS = frozenset({"layernorm", "rmsnorm", "router"})
"""Layers every tensor-parallel rank computes whole without sequence parallelism (Megatron keeps
norms replicated; the router scores every token)."""
FLASH_BACKWARD_EXTRA = 0.5
"""FlashAttention's backward costs 2.5 x its forward (Dao 2023, FlashAttention-2, section 4.1),
the stored-scores backward 2 x: the core's backward gains half its forward."""


@dataclass(frozen=True)
class PassOptions:
    """What a layout asks of the arithmetic (a strategy's fields, resolved)."""

    tp: int = 1
    cp: int = 1
    sequence_parallel: bool = False
    recompute: str = "none"
    flash: bool = False
    capacity_factor: float = 1.0
    blocks: frozenset[str] = frozenset()
    """The units (sim.costs.pipeline.layer_unit) that are transformer blocks: what full
    recomputation checkpoints."""


@dataclass(frozen=True)
class Passes:
    fwd_s: tuple[float, ...]
    """One micro-batch's forward per layer on one rank, its communication included."""
    bwd_s: tuple[float, ...]
    """Its backward, recomputation included."""
    tp_comm_s: tuple[float, ...]
    """Tensor-parallel collectives inside fwd_s + bwd_s (recomputed forward's included)."""
    model_comm_s: tuple[float, ...]
    """Other model-parallel communication inside fwd_s + bwd_s: ring attention's sends not hidden,
    all-to-alls, ZeRO-3 gathers and reduce-scatters not hidden and the copies of its gathered units."""
    recompute_s: tuple[float, ...]
    """Recomputation's compute inside bwd_s (its communication is in tp_comm_s and model_comm_s)."""
    slowdown_s: tuple[float, ...] = ()
    """Compute added inside fwd_s + bwd_s by ZeRO-3's collectives running beside it (SMs and memory
    bandwidth taken: sim.costs.contention); empty: none."""
    fwd_slowdown_s: tuple[float, ...] = ()
    """Of slowdown_s, what is inside fwd_s; empty: none."""


def rank_split(layer: Layer, options: PassOptions) -> int:
    """How many ways a layer's work is split among the ranks: cp, times tp unless a replicated
    kind without sequence parallelism."""
    kind = layer.kind.lower()
    return options.cp * (options.tp if options.sequence_parallel or kind not in REPLICATED_COMPUTE_KINDS else 1)


def layer_compute_s(layer: Layer, fwd_s: float, bwd_s: float, options: PassOptions) -> tuple[float, float]:
    """One rank's share of a layer's compute (no communication): FlashAttention's backward, the
    experts' capacity factor, the split over tp (unless a replicated kind without sequence
    parallelism) and cp."""
    kind = layer.kind.lower()
    if kind == "core" and options.flash:
        bwd_s = bwd_s + FLASH_BACKWARD_EXTRA * fwd_s
    if kind == "experts":
        fwd_s, bwd_s = fwd_s * options.capacity_factor, bwd_s * options.capacity_factor
    split = rank_split(layer, options)
    return fwd_s / split, bwd_s / split


def ring_attention_s(compute_s: float, cp: int, send_s: float) -> float:
    """Ring attention over cp ranks: the own block, then cp - 1 blocks each overlapping the next
    block's send: c + (cp - 1) max(c, x), c = compute_s / cp (module docstring)."""
    if cp == 1:
        return compute_s
    block = compute_s / cp
    return block + (cp - 1) * max(block, send_s)


def with_elementwise(f_rank: float, b_rank: float, elementwise: tuple[float, float, bool],
                     options: PassOptions) -> tuple[float, float]:
    """A rank's layer forward and backward plus the memory-bound kernels after it
    (sim.costs.elementwise: forward, backward, replicated), split over tp as their tensors are
    (replicated ones only with sequence parallelism) and over cp."""
    ew_f, ew_b, replicated = elementwise
    split = options.cp * (options.tp if options.sequence_parallel or not replicated else 1)
    return f_rank + ew_f / split, b_rank + ew_b / split


def layer_passes(layers: Sequence[Layer], times: Sequence[tuple[float, float]], options: PassOptions,
                 tp_comm_s: Sequence[float] | None = None, kv_send_s: float = 0.0, alltoall_s: float = 0.0,
                 unit_gather_s: dict[str, float] | None = None,
                 unit_scatter_s: dict[str, float] | None = None, units: Sequence[str] | None = None,
                 elementwise_s: Sequence[tuple[float, float, bool]] | None = None,
                 unit_footprints: dict[str, tuple[Footprint | None, Footprint | None]] | None = None,
                 loads: Sequence[tuple[PassLoad, PassLoad]] | None = None,
                 unit_copy_s: dict[str, float] | None = None) -> Passes:
    """Per layer: forward, backward, and what of them is communication and recomputation.

    ``times``: (forward, backward) of each whole layer at the micro-batch; ``tp_comm_s``: one
    pass's tensor-parallel collectives per layer (allreduces, or with sequence parallelism
    reduce-scatter + allgather); ``kv_send_s``: one key/value block's send between context-parallel
    ranks (forward; backward sends twice the bytes); ``alltoall_s``: one all-to-all of an MoE
    block (dispatch or combine); ``unit_gather_s`` / ``unit_scatter_s``: ZeRO-3's allgather of a
    unit's parameters and reduce-scatter of its gradients, by unit; ``units``: each layer's unit
    (sim.costs.pipeline.layer_unit; a workload's ``layer_units``), computed here if not given;
    ``elementwise_s``: the memory-bound kernels after each layer (sim.costs.elementwise: forward,
    backward, replicated), split over tp as their tensors are (replicated ones only with sequence
    parallelism) and over cp; ``unit_footprints``: what each unit's ZeRO-3 collectives take from
    the GPU in forward and in backward (sim.costs.contention.comm_footprint) and ``loads`` each
    whole layer's roofline terms at the micro-batch (sim.costs.compute.pass_loads), without which
    nothing is slowed; ``unit_copy_s``: ZeRO-3's copy of a gathered unit into its parameters, on
    the compute stream after each gather (module docstring)."""
    o = options
    n = len(layers)
    if units is None:
        units = [layer_unit(layer.name) for layer in layers]
    fwd, bwd = [0.0] * n, [0.0] * n
    tp_c, model_c, recompute = [0.0] * n, [0.0] * n, [0.0] * n
    # each layer's compute by pass: (its own kernels, the memory-bound kernels after it), what
    # ZeRO-3's collectives slow (forward, backward, the recomputed forward inside backward)
    kernels: list[tuple[tuple[float, float], tuple[float, float], tuple[float, float]]] = []
    for i, (layer, (f, b)) in enumerate(zip(layers, times, strict=True)):
        kind = layer.kind.lower()
        comm = tp_comm_s[i] if tp_comm_s is not None else 0.0
        f_rank, b_rank = layer_compute_s(layer, f, b, o)
        own_f, own_b = f_rank, b_rank
        if elementwise_s is not None:
            f_rank, b_rank = with_elementwise(f_rank, b_rank, elementwise_s[i], o)
        extra_f = extra_b = 0.0
        if kind == "core" and o.cp > 1:
            ring_f = ring_attention_s(f_rank, o.cp, kv_send_s)
            ring_b = ring_attention_s(b_rank, o.cp, 2 * kv_send_s)
            extra_f, extra_b = ring_f - f_rank, ring_b - b_rank
        if kind == "experts" and alltoall_s > 0:
            extra_f = extra_b = 2 * alltoall_s
        forward = f_rank + extra_f + comm
        backward = b_rank + extra_b + comm
        tp_c[i] = 2 * comm
        model_c[i] = extra_f + extra_b
        again = 0.0
        if (o.recompute == "full" and units[i] in o.blocks) or (o.recompute == "selective" and kind == "core"):
            again = forward  # the forward once more, its communication included
            tp_c[i] += comm
            model_c[i] += extra_f
            recompute[i] = f_rank
        fwd[i], bwd[i] = forward, backward + again
        kernels.append(((own_f, f_rank - own_f), (own_b, b_rank - own_b),
                        (own_f, f_rank - own_f) if again else (0.0, 0.0)))
    slow_f, slow_b = [0.0] * n, [0.0] * n
    if unit_gather_s:
        factors = None
        if unit_footprints and loads is not None:
            factors = _unit_factors(layers, units, kernels, loads, unit_footprints, o)
        _overlap_sharded_units(units, fwd, bwd, model_c, unit_gather_s, unit_scatter_s or {}, kernels, factors,
                               slow_f, slow_b, unit_copy_s or {})
    slowed = any(slow_f) or any(slow_b)
    return Passes(tuple(fwd), tuple(bwd), tuple(tp_c), tuple(model_c), tuple(recompute),
                  tuple(f + b for f, b in zip(slow_f, slow_b, strict=True)) if slowed else (),
                  tuple(slow_f) if slowed else ())


def _unit_factors(layers: Sequence[Layer], units: Sequence[str], kernels, loads: Sequence[tuple[PassLoad, PassLoad]],
                  footprints: dict[str, tuple[Footprint | None, Footprint | None]],
                  options: PassOptions) -> list[tuple[float, float]]:
    """Per layer, (forward, backward) compute time beside its unit's ZeRO-3 collectives over its
    time alone: its own kernels by their roofline (sim.costs.contention.contention_factor of the
    rank's share, ``split_load``), the memory-bound kernels after it by the memory ratio, the
    recomputed forward by the forward's load, weighted by their times."""
    out = []
    # a model's blocks repeat: the same loads and footprints (interned by the callers: one object
    # per distinct value) give the same factors
    seen: dict[tuple[int, int, int, int], tuple[float, float, float, float, float]] = {}
    for i, layer in enumerate(layers):
        fwd_fp, bwd_fp = footprints.get(units[i], (None, None))
        split = rank_split(layer, options)
        key = (id(loads[i]), split, id(fwd_fp), id(bwd_fp))
        ratios = seen.get(key)
        if ratios is None:
            load_f, load_b = (split_load(x, split) for x in loads[i])
            ratios = seen[key] = (
                contention_factor(load_f, fwd_fp) if fwd_fp is not None else 1.0,
                fwd_fp.memory_ratio if fwd_fp is not None else 1.0,
                contention_factor(load_b, bwd_fp) if bwd_fp is not None else 1.0,
                contention_factor(load_f, bwd_fp) if bwd_fp is not None else 1.0,
                bwd_fp.memory_ratio if bwd_fp is not None else 1.0)
        own_fwd, mem_fwd, own_bwd, again_bwd, mem_bwd = ratios
        (own_f, ew_f), (own_b, ew_b), (own_r, ew_r) = kernels[i]
        total_f = own_f + ew_f
        total_b = own_b + ew_b + own_r + ew_r
        out.append(((own_f * own_fwd + ew_f * mem_fwd) / total_f if total_f > 0 else 1.0,
                    (own_b * own_bwd + own_r * again_bwd + (ew_b + ew_r) * mem_bwd) / total_b if total_b > 0 else 1.0))
    return out


def _overlap_sharded_units(units: Sequence[str], fwd: list[float], bwd: list[float], model_c: list[float],
                           gather_s: dict[str, float], scatter_s: dict[str, float], kernels,
                           factors: list[tuple[float, float]] | None, slow_f: list[float], slow_b: list[float],
                           copy_s: dict[str, float]) -> None:
    """ZeRO-3: a unit's forward takes max(its compute, its gather), its backward max(its compute,
    its gather + reduce-scatter); the excess lands on the unit's last layer in forward and its
    first in backward (the ends of its passes). With ``factors``, the compute beside the
    collectives is slowed first (module docstring): the collectives run beside the compute for the
    compute's share of the unit's pass, and the unit's compute takes ``beside_comm_s`` of that
    with its time-weighted factor. The copy of the gathered unit (``copy_s``) precedes each of
    its passes on the stream: its first layer's forward, its last layer's backward."""
    spans: dict[str, list[int]] = {}
    for i, unit in enumerate(units):
        spans.setdefault(unit, []).append(i)
    for unit, members in spans.items():
        gather, scatter = gather_s.get(unit, 0.0), scatter_s.get(unit, 0.0)
        if gather <= 0 and scatter <= 0:
            continue
        extra_f = extra_b = 0.0
        if factors is not None:
            extra_f = _slowed_s(members, fwd, gather, [sum(kernels[i][0]) for i in members],
                                [factors[i][0] for i in members])
            extra_b = _slowed_s(members, bwd, gather + scatter,
                                [sum(kernels[i][1]) + sum(kernels[i][2]) for i in members],
                                [factors[i][1] for i in members])
        late_f = max(0.0, gather - sum(fwd[i] for i in members) - extra_f)
        late_b = max(0.0, gather + scatter - sum(bwd[i] for i in members) - extra_b)
        fwd[members[-1]] += extra_f + late_f
        bwd[members[0]] += extra_b + late_b
        model_c[members[-1]] += late_f
        model_c[members[0]] += late_b
        slow_f[members[-1]] += extra_f
        slow_b[members[0]] += extra_b
        copy = copy_s.get(unit, 0.0)
        if copy > 0:
            fwd[members[0]] += copy
            bwd[members[-1]] += copy
            model_c[members[0]] += copy
            model_c[members[-1]] += copy


def _slowed_s(members: list[int], stream: list[float], comm_s: float, compute: list[float],
              factors: list[float]) -> float:
    """Compute added to one unit's pass by its collectives of ``comm_s`` beside it, at the
    time-weighted factor: the compute C of the pass's stream T meets max(comm_s x C / T,
    comm_s - (T - C)) of them (spread evenly over the stream; what outlasts the stream's other
    work, its TP collectives, is all beside compute)."""
    work = sum(compute)
    total = sum(stream[i] for i in members)
    if work <= 0 or total <= 0 or comm_s <= 0:
        return 0.0
    factor = sum(c * f for c, f in zip(compute, factors, strict=True)) / work
    beside = max(comm_s * work / total, comm_s - (total - work))
    return beside_comm_s(work, beside, factor) - work


def attention_is_flash(scenario: Scenario) -> bool:
    """strategy.attention, auto resolved: for a transformer of the zoo or the decoder (whose kernels
    the simulator chooses) flash where FlashAttention-2 runs (compute capability 8.0 and newer:
    Ampere, Ada, Hopper, Dao-AILab/flash-attention README), eager elsewhere; a layer table of one's
    own runs what it measured or traced (eager unless told flash)."""
    choice = scenario.strategy.attention
    if choice != "auto":
        return choice == "flash"
    if scenario.workload.architecture is None:
        return False
    gpu = scenario.cluster.gpu
    return gpu.kind == "gpu" and (gpu.compute_capability or 0.0) >= 8.0


def pass_options(scenario: Scenario) -> PassOptions:
    """The strategy's large-model fields as sim.costs.passes takes them."""
    s, w = scenario.strategy, scenario.workload
    units = w.unit_names
    blocks = frozenset(units[1:-1]) if w.architecture is not None else frozenset()
    return PassOptions(tp=s.tp, cp=s.cp, sequence_parallel=s.sequence_parallel and s.tp > 1, recompute=s.recompute,
                       flash=attention_is_flash(scenario), capacity_factor=s.moe_capacity_factor or 1.0, blocks=blocks)
