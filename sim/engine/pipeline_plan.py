"""What one iteration of a dp x pp x cp x tp layout consists of, costed (pure; no SimPy).

Per stage: forward and backward seconds of one micro-batch (each tensor- and context-parallel rank
does its share of every layer's work, plus the layer's tensor-parallel collectives, ring
attention's sends, MoE all-to-alls, ZeRO-3's gathers and any recomputation, as
``sim.costs.passes.layer_passes`` adds them), the send of the boundary activation to the next
stage (and of its gradient back), the stage's gradient synchronisation over its data-parallel
group after the flush (an allreduce, or ZeRO's reduce-scatter), its optimizer step, and ZeRO-1/2's
allgather of the updated parameters after it. With the interleaved schedule (vpp > 1) a stage
holds vpp model chunks, each with its own passes and sends (``StagePlan.chunks``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.cluster import Cluster
from sim.costs.collectives import link_of
from sim.costs.comm import CommSpec, op_cost, spec_of
from sim.costs.compute import layer_times_s, pass_loads, workload_optimizer_time_s
from sim.costs.contention import Footprint, bus_bytes_sent, comm_footprint
from sim.costs.elementwise import elementwise_times_s
from sim.costs.network import message_time_s
from sim.costs.passes import Passes, layer_passes, pass_options
from sim.costs.pipeline import split_units
from sim.costs.tensor import tp_layer_comm_s
from sim.engine.plan import (
    DDP_FIRST_BUCKET_BYTES,
    assign_buckets,
    bucket_sync,
    overlapped_gather_s,
    overlapped_reduce_s,
)
from sim.errors import ConfigError
from sim.parallel import (
    check_placement,
    cp_group,
    ep_group,
    expert_grad_group,
    grad_group,
    stage_pair_link,
    tp_group,
)
from sim.scenario import Scenario
from sim.strategy import DTYPE_BYTES, Strategy
from sim.workload import Layer


@dataclass(frozen=True)
class ChunkPlan:
    """One model chunk of an interleaved stage (vpp > 1)."""

    layers: tuple[int, int]
    fwd_s: float
    bwd_s: float
    send_s: float
    """To the next virtual stage (the next pipeline rank, or from the last rank back to the first)."""
    send_link: str
    send_bytes: float
    comm_s: float = 0.0
    """Of fwd_s + bwd_s: TP collectives and other model-parallel communication (not scaled with compute)."""


@dataclass(frozen=True)
class StagePlan:
    index: int
    layers: tuple[int, int]
    """[start, end) layer indices (the first chunk's with vpp > 1)."""
    fwd_s: float
    """One micro-batch's forward on this stage, TP collectives included."""
    bwd_s: float
    tp_comm_s: float
    """Of fwd_s + bwd_s, the TP collectives."""
    send_s: float
    """Activation (and, backwards, its gradient) to/from the next stage; 0 for the last stage."""
    send_link: str
    send_bytes: float
    dp_sync_s: float
    codec_s: float
    dp_bytes_by_link: dict[str, float]
    optimizer_s: float
    param_count: int
    model_comm_s: float = 0.0
    """Of fwd_s + bwd_s: ring attention's exposed sends, MoE all-to-alls, ZeRO-3's exposed gathers."""
    recompute_s: float = 0.0
    """Of bwd_s: activation recomputation."""
    param_gather_s: float = 0.0
    """ZeRO-1/2: the allgather of the updated parameter shards after the optimizer step."""
    chunks: tuple[ChunkPlan, ...] = ()
    """The interleaved schedule's model chunks (vpp > 1); empty: the stage is one chunk."""
    slowdown_s: float = 0.0
    """Of fwd_s + bwd_s: compute added by ZeRO-3's collectives beside it (sim.costs.passes)."""
    fwd_slowdown_s: float = 0.0
    """Of slowdown_s, the forward's."""


@dataclass(frozen=True)
class PipelinePlan:
    stages: tuple[StagePlan, ...]
    micro_batches: int
    schedule: str
    dp: int
    tp: int
    tp_bytes_by_link: dict[str, float]
    """Whole cluster, one iteration."""
    vpp: int = 1

    def virtual_stages(self) -> list[tuple[float, float, float]]:
        """(forward, backward, send to the next) of each virtual stage k = chunk x pp + stage."""
        if self.vpp == 1:
            return [(st.fwd_s, st.bwd_s, st.send_s) for st in self.stages]
        p = len(self.stages)
        return [(st.chunks[k // p].fwd_s, st.chunks[k // p].bwd_s, st.chunks[k // p].send_s)
                for k in range(p * self.vpp) for st in (self.stages[k % p],)]


def tp_spec(strategy: Strategy) -> CommSpec:
    """The TP group's library calls: the strategy's library, its own algorithm choice."""
    return replace(spec_of(strategy), collective="auto")


def kv_send_s(scenario: Scenario, micro_batch: int, dtype_bytes: int, spec: CommSpec | None = None) -> float:
    """One ring-attention step's send: the rank's keys and values for its seq_len / cp tokens,
    2 x micro x (s / cp) x d_kv bytes, split over the tensor-parallel ranks that hold different
    key/value heads (at most kv_heads of them), between neighbours of the context-parallel group."""
    s, arch = scenario.strategy, scenario.workload.architecture
    if s.cp == 1 or arch is None:
        return 0.0
    n_bytes = 2 * micro_batch * arch.seq_len / s.cp * arch.kv_hidden * dtype_bytes / min(s.tp, arch.kv_heads)
    group = cp_group(scenario.cluster, s.cp, s.tp)
    return op_cost("sendrecv", n_bytes, group, spec or tp_spec(s)).time_s


def moe_alltoall_s(scenario: Scenario, micro_batch: int, dtype_bytes: int, spec: CommSpec | None = None) -> float:
    """One MoE dispatch (or combine) all-to-all over the expert-parallel group: each rank sends its
    tokens' k routed copies (x the capacity factor), micro x (s / cp) / tp x k x h bytes (tokens
    split over tp by sequence parallelism, which Megatron-LM requires of MoE with tp > 1)."""
    s, arch = scenario.strategy, scenario.workload.architecture
    if s.ep == 1 or arch is None or not arch.moe:
        return 0.0
    copies = arch.experts_per_token * (s.moe_capacity_factor or 1.0)
    n_bytes = micro_batch * arch.seq_len / s.cp / s.tp * copies * arch.hidden * dtype_bytes
    group = ep_group(scenario.cluster, s.ep, s.tp, s.pp, s.cp)
    return op_cost("alltoall", n_bytes, group, spec or tp_spec(s)).time_s


def param_shares(layers: tuple[Layer, ...] | list[Layer], lo: int, hi: int, tp: int, ep: int) -> tuple[float, float]:
    """(dense, expert) parameters one rank holds of layers [lo, hi): dense split over tp, the
    experts over tp x ep."""
    dense = experts = 0.0
    for layer in layers[lo:hi]:
        if layer.kind == "Experts":
            experts += layer.param_count / (tp * ep)
        else:
            dense += layer.param_count / tp
    return dense, experts


def _zero3_units(scenario: Scenario) -> dict[str, list[tuple[float, Cluster]]]:
    """ZeRO-3: per unit, (bytes, group) of what its collectives move: each rank's tp/ep share of
    the unit's parameters (dense, then experts), in the compute precision, over the ranks that
    shard it; empty without ZeRO-3 or with nobody to shard over."""
    s, w, c = scenario.strategy, scenario.workload, scenario.cluster
    dp = s.dp_degree(c.world_size)
    if s.zero_stage < 3 or dp * s.cp == 1:
        return {}
    dtype = DTYPE_BYTES[s.precision]
    dense_group = grad_group(c, dp, s.tp, s.pp, s.cp)
    expert_group = expert_grad_group(c, dp, s.ep, s.tp, s.pp, s.cp) if s.ep > 1 else dense_group
    spans: dict[str, list[int]] = {}
    for i, unit in enumerate(w.layer_units):
        spans.setdefault(unit, []).append(i)
    out: dict[str, list[tuple[float, Cluster]]] = {}
    for unit, members in spans.items():
        dense, experts = param_shares(w.layers, members[0], members[-1] + 1, s.tp, s.ep)
        out[unit] = [(count * dtype, group) for count, group in ((dense, dense_group), (experts, expert_group))
                     if count > 0 and group.world_size > 1]
    return out


def zero3_unit_comm(scenario: Scenario, spec: CommSpec | None = None) -> tuple[dict[str, float], dict[str, float]]:
    """ZeRO-3: per unit, the allgather of its parameters and the reduce-scatter of its gradients
    (each rank's tp/ep share, in the compute precision) over the ranks that shard it."""
    spec = spec or spec_of(scenario.strategy)
    gather, scatter = {}, {}
    for unit, parts in _zero3_units(scenario).items():
        gather[unit] = sum(op_cost("allgather", n, group, spec).time_s for n, group in parts)
        scatter[unit] = sum(op_cost("reduce_scatter", n, group, spec).time_s for n, group in parts)
    return gather, scatter


def zero3_unit_copy_s(scenario: Scenario) -> dict[str, float]:
    """ZeRO-3: per unit, the copy of its gathered parameters out of the allgather's rank-major
    buffer into the parameters (sim.costs.passes' docstring has the frameworks' source), on the
    compute stream after each gather: read and written once at the memory roof, t = 2 x bytes /
    memory bandwidth (x a calibrated GPU's compute_scale, as sim.costs.elementwise)."""
    gpu = scenario.cluster.gpu
    if gpu.memory_bandwidth_Bps <= 0:
        return {}
    rate = gpu.memory_bandwidth_Bps / gpu.compute_scale
    return {unit: 2 * sum(n for n, _ in parts) / rate for unit, parts in _zero3_units(scenario).items() if parts}


def zero3_unit_footprints(scenario: Scenario, gather: dict[str, float], scatter: dict[str, float]
                          ) -> dict[str, tuple[Footprint | None, Footprint | None]]:
    """ZeRO-3: per unit, what its collectives take from each GPU while they run (sim.costs.contention.
    comm_footprint), in forward (its allgather over ``gather[unit]`` seconds) and in backward (the
    allgather and the reduce-scatter, over their sum): a ring's channels, assumed for both ops
    (NCCL runs them as rings across nodes: src/device/all_gather.h, reduce_scatter.h runRing), and
    each rank's bus bytes (n - 1) / n x S per op through memory; in backward also the copy of the
    unit's gradients into the reduce-scatter's input on its stream, read and written once (torch
    FSDP2's foreach_reduce: torch._chunk_cat on the reduce-scatter stream, torch/distributed/fsdp/
    _fully_shard/_fsdp_collectives.py @002a76f; DeepSpeed stage 3 copies them into its bucket).
    Empty where nothing is slowed."""
    out: dict[str, tuple[Footprint | None, Footprint | None]] = {}
    interned: dict[tuple[Footprint | None, Footprint | None], tuple[Footprint | None, Footprint | None]] = {}
    for unit, parts in _zero3_units(scenario).items():
        if not parts:
            continue
        group = parts[0][1]
        sent = sum(bus_bytes_sent("allgather", n, g.world_size) for n, g in parts)
        total = sum(n for n, _ in parts)
        fwd = comm_footprint(total, sent, gather.get(unit, 0.0), "ring", group, scenario.strategy)
        bwd = comm_footprint(total, 2 * sent, gather.get(unit, 0.0) + scatter.get(unit, 0.0), "ring", group,
                             scenario.strategy, extra_hbm_bytes=2 * total)
        if fwd is not None or bwd is not None:
            out[unit] = interned.setdefault((fwd, bwd), (fwd, bwd))
    return out


def scaled_passes(fwd_s: float, bwd_s: float, comm_s: float, scale: float) -> tuple[float, float]:
    """A (virtual) stage's forward and backward with their compute x ``scale`` and their
    communication ``comm_s`` (TP collectives and other model-parallel comm of both passes, taken
    as half in each: Megatron's two collectives per pass, ring attention and all-to-alls alike)
    as it is."""
    half = comm_s / 2
    return (fwd_s - half) * scale + half, (bwd_s - half) * scale + half


def scaled_pipeline_plan(plan: PipelinePlan, scale: float) -> PipelinePlan:
    """Every stage's (and model chunk's) compute and optimizer step x ``scale`` (the slowest rank's:
    sim.costs.stragglers); communication, sends and gradient sync unchanged."""
    if scale == 1.0:
        return plan

    def chunk(ch: ChunkPlan) -> ChunkPlan:
        fwd, bwd = scaled_passes(ch.fwd_s, ch.bwd_s, ch.comm_s, scale)
        return replace(ch, fwd_s=fwd, bwd_s=bwd)

    def stage(st: StagePlan) -> StagePlan:
        chunks = tuple(chunk(ch) for ch in st.chunks)
        if chunks:
            fwd, bwd = sum(ch.fwd_s for ch in chunks), sum(ch.bwd_s for ch in chunks)
        else:
            fwd, bwd = scaled_passes(st.fwd_s, st.bwd_s, st.tp_comm_s + st.model_comm_s, scale)
        return replace(st, fwd_s=fwd, bwd_s=bwd, optimizer_s=st.optimizer_s * scale,
                       recompute_s=st.recompute_s * scale, chunks=chunks)

    return replace(plan, stages=tuple(stage(st) for st in plan.stages))


def build_pipeline_plan(scenario: Scenario) -> PipelinePlan:
    workload, cluster, strategy = scenario.workload, scenario.cluster, scenario.strategy
    tp, pp, m, cp, v = strategy.tp, strategy.pp, strategy.micro_batches, strategy.cp, strategy.vpp
    dp = strategy.dp_degree(cluster.world_size)
    check_placement(cluster, tp, pp, cp)
    dtype_bytes = DTYPE_BYTES[strategy.precision]
    micro_batch = workload.batch_size // m
    passes = scenario_passes(scenario, micro_batch, dtype_bytes)
    bounds = chunk_bounds(scenario, [f + b for f, b in zip(passes.fwd_s, passes.bwd_s, strict=True)])
    # the framework's own cost per micro-batch pass per stage (strategy.pipeline_overhead_s,
    # calibrated by real/pipeline_bench.py): stage pass = its layers + overhead
    over_s = strategy.pipeline_overhead_s
    sends = [_chunk_send(scenario, bounds, k, micro_batch, dtype_bytes, dp) for k in range(len(bounds))]
    stages = []
    for s in range(pp):
        mine = list(range(s, len(bounds), pp))
        chunks = tuple(ChunkPlan(layers=bounds[k], fwd_s=sum(passes.fwd_s[slice(*bounds[k])]) + over_s,
                                 bwd_s=sum(passes.bwd_s[slice(*bounds[k])]) + over_s, send_s=sends[k][0],
                                 send_link=sends[k][1], send_bytes=sends[k][2],
                                 comm_s=sum(passes.tp_comm_s[i] + passes.model_comm_s[i] for i in range(*bounds[k])))
                       for k in mine)
        layer_ids = [i for k in mine for i in range(*bounds[k])]
        params = sum(workload.layers[i].param_count for i in layer_ids)
        sync_s, codec_s, dp_bytes, gather_s = stage_sync(scenario, [bounds[k] for k in mine])
        if strategy.overlap_param_gather:
            gather_s = overlapped_gather_s(gather_s, sum(ch.fwd_s for ch in chunks),
                                           stage_param_bytes(scenario, [bounds[k] for k in mine]), strategy.bucket_bytes)
        if strategy.overlap_grad_reduce:
            sync_s = overlapped_reduce_s(sync_s, sum(ch.bwd_s for ch in chunks),
                                         stage_param_bytes(scenario, [bounds[k] for k in mine]), strategy.bucket_bytes)
        first = chunks[0]
        stages.append(StagePlan(
            index=s, layers=first.layers, fwd_s=sum(ch.fwd_s for ch in chunks), bwd_s=sum(ch.bwd_s for ch in chunks),
            tp_comm_s=sum(passes.tp_comm_s[i] for i in layer_ids),
            send_s=first.send_s if v == 1 else max(ch.send_s for ch in chunks),
            send_link=first.send_link, send_bytes=first.send_bytes if v == 1 else sum(ch.send_bytes for ch in chunks),
            dp_sync_s=sync_s, codec_s=codec_s, dp_bytes_by_link=dp_bytes,
            optimizer_s=workload_optimizer_time_s(workload, optimizer_params(scenario, [bounds[k] for k in mine]),
                                                  dtype_bytes, cluster.gpu),
            param_count=params,
            model_comm_s=sum(passes.model_comm_s[i] for i in layer_ids),
            recompute_s=sum(passes.recompute_s[i] for i in layer_ids),
            param_gather_s=gather_s,
            chunks=chunks if v > 1 else (),
            slowdown_s=sum(passes.slowdown_s[i] for i in layer_ids) if passes.slowdown_s else 0.0,
            fwd_slowdown_s=sum(passes.fwd_slowdown_s[i] for i in layer_ids) if passes.fwd_slowdown_s else 0.0,
        ))
    return PipelinePlan(tuple(stages), m, strategy.schedule, dp, tp,
                        _tp_bytes(scenario, micro_batch, dtype_bytes, tp_group(cluster, tp)), vpp=v)


def scenario_passes(scenario: Scenario, micro_batch: int, dtype_bytes: int) -> Passes:
    """Every layer's forward and backward on one rank for one micro-batch (sim.costs.passes)."""
    s, cluster = scenario.strategy, scenario.cluster
    times = micro_batch_times_s(scenario, micro_batch, dtype_bytes)
    group = tp_group(cluster, s.tp)
    spec = tp_spec(s)
    sp = s.sequence_parallel and s.tp > 1
    tp_comm = [tp_layer_comm_s(layer, micro_batch, dtype_bytes, group, spec, sp, 1 / s.cp) for layer in scenario.workload.layers]
    gather, scatter = zero3_unit_comm(scenario)
    footprints = zero3_unit_footprints(scenario, gather, scatter)
    options = pass_options(scenario)
    return layer_passes(scenario.workload.layers, times, options, tp_comm,
                        kv_send_s(scenario, micro_batch, dtype_bytes), moe_alltoall_s(scenario, micro_batch, dtype_bytes),
                        gather, scatter, scenario.workload.layer_units,
                        elementwise_times_s(scenario.workload, micro_batch, cluster.gpu, dtype_bytes, options.flash),
                        footprints, micro_batch_loads(scenario, micro_batch, dtype_bytes) if footprints else None,
                        zero3_unit_copy_s(scenario))


def micro_batch_loads(scenario: Scenario, micro_batch: int, dtype_bytes: int):
    """Every whole layer's (forward, backward) roofline terms at the micro-batch (sim.costs.compute.pass_loads),
    one object per distinct value (a model's repeated blocks share theirs)."""
    loads = pass_loads(scenario.workload.with_batch_size(micro_batch), scenario.cluster.gpu,
                       scenario.strategy.precision, dtype_bytes)
    interned: dict = {}
    return [interned.setdefault(pair, pair) for pair in loads]


def chunk_bounds(scenario: Scenario, times_s: list[float] | None = None) -> list[tuple[int, int]]:
    """[start, end) layers of each of the pp x vpp model chunks (``stage_bounds`` cut in pp x vpp)."""
    return stage_bounds(scenario, times_s, chunks=scenario.strategy.pp * scenario.strategy.vpp)


def _chunk_send(scenario: Scenario, bounds: list[tuple[int, int]], k: int, micro_batch: int, dtype_bytes: int,
                dp: int) -> tuple[float, str, float]:
    """(seconds, link, bytes) of virtual stage k's activation to virtual stage k + 1 (none after the last)."""
    s, cluster, layers = scenario.strategy, scenario.cluster, scenario.workload.layers
    pp, tp, cp = s.pp, s.tp, s.cp
    if k == len(bounds) - 1:
        return 0.0, "intra", 0.0
    lo, hi = bounds[k]
    link = stage_pair_link(cluster, dp, tp, pp, k % pp, (k + 1) % pp, cp)
    # the chunk's output: the last of its layers that has an activation (a positional embedding
    # added in place lists none); each TP (and CP) rank sends its slice
    out_elems = next((x.activation_elems for x in reversed(layers[lo:hi]) if x.activation_elems), 0.0)
    send_bytes = micro_batch * out_elems * dtype_bytes / cp
    # on the network the tp x cp slices of a stage share the node's NICs
    load = 1.0 if link == "intra" else tp * cp * cluster.oversubscription / cluster.nics_per_node
    return message_time_s(send_bytes / tp, link_of(cluster, link), load), link, send_bytes


def stage_bounds(scenario: Scenario, times_s: list[float] | None = None, chunks: int | None = None) -> list[tuple[int, int]]:
    """[start, end) zoo-layer indices of each pipeline stage (or of ``chunks`` model chunks), cut
    between top-level modules (``layer_unit``) by ``strategy.stage_balance``: time (``times_s``, one
    micro-batch's forward + backward per layer; the simulator's own when None), flops (forward +
    backward FLOPs) or params. The real harness calls this too (real/strategies/pipeline.py), so
    both run the same stages."""
    workload, strategy = scenario.workload, scenario.strategy
    layers = workload.layers
    pieces = chunks or strategy.pp
    if strategy.stage_balance == "params":
        costs = [float(layer.param_count) for layer in layers]
    elif strategy.stage_balance == "flops":
        costs = [layer.fwd_flops + layer.bwd_flops for layer in layers]
    else:
        if times_s is None:
            micro = workload.batch_size // strategy.micro_batches
            passes = scenario_passes(scenario, micro, DTYPE_BYTES[strategy.precision])
            times_s = [f + b for f, b in zip(passes.fwd_s, passes.bwd_s, strict=True)]
        costs = list(times_s)
    units = workload.layer_units
    count = len(workload.unit_names)
    if pieces > count:
        if pieces == strategy.pp:
            raise ConfigError("strategy.pp", strategy.pp, f"at most {workload.name}'s {count} top-level modules "
                              "(stages are cut between them)")
        raise ConfigError("strategy.vpp", strategy.vpp, f"a vpp with pp x vpp at most {workload.name}'s {count} "
                          "top-level modules (model chunks are cut between them)")
    return split_units(costs, units, pieces)


def micro_batch_times_s(scenario: Scenario, micro_batch: int, dtype_bytes: int) -> list[tuple[float, float]]:
    """(forward, backward) per layer for one micro-batch: the roofline at the micro-batch size;
    a layer's measured times (taken at the full batch) scaled by micro_batch / batch."""
    workload = scenario.workload
    times = layer_times_s(workload.with_batch_size(micro_batch), scenario.cluster.gpu, scenario.strategy.precision, dtype_bytes)
    share = micro_batch / workload.batch_size
    return [(f * share, b * share) if layer.fwd_time_s is not None and layer.bwd_time_s is not None else (f, b)
            for layer, (f, b) in zip(workload.layers, times, strict=True)]


def stage_param_bytes(scenario: Scenario, chunks: list[tuple[int, int]]) -> float:
    """The parameters one rank of a stage holds whole before ZeRO shards them (its tp share, the
    experts' tp x ep share), in the compute precision: what ZeRO-1/2 gather after the step."""
    s, w = scenario.strategy, scenario.workload
    dense_sum, expert_sum = w.param_prefix
    dense = sum(dense_sum[hi] - dense_sum[lo] for lo, hi in chunks) / s.tp
    experts = sum(expert_sum[hi] - expert_sum[lo] for lo, hi in chunks) / (s.tp * s.ep)
    return (dense + experts) * s.grad_bytes_per_param


def optimizer_params(scenario: Scenario, chunks: list[tuple[int, int]]) -> float:
    """Parameters one rank updates: its tp/ep share, divided by the ZeRO shard (dp x cp, the
    experts' dp x cp / ep) from stage 1."""
    s, w = scenario.strategy, scenario.workload
    dense_sum, expert_sum = w.param_prefix
    dense_count = sum(dense_sum[hi] - dense_sum[lo] for lo, hi in chunks)
    expert_count = sum(expert_sum[hi] - expert_sum[lo] for lo, hi in chunks)
    if s.ep == 1 and not s.zero_stage:
        return (dense_count + expert_count) / s.tp
    dense, experts = dense_count / s.tp, expert_count / (s.tp * s.ep)
    if s.zero_stage >= 1:
        dp = s.dp_degree(scenario.cluster.world_size)
        dense, experts = dense / max(1, dp * s.cp), experts / max(1, dp * s.cp // s.ep)
    return dense + experts


def stage_sync(scenario: Scenario, chunks: list[tuple[int, int]], sync_fn=None,
               groups: tuple[Cluster, Cluster] | None = None) -> tuple[float, float, dict[str, float], float]:
    """(sync seconds, codec seconds, bytes by link, ZeRO-1/2 parameter gather seconds) of a stage's
    gradients after its flush, in DDP buckets (backward order): allreduced (stage 0) or
    reduce-scattered (ZeRO-1/2) over the ranks that hold the same parameters (dp x cp; the experts'
    dp x cp / ep); ZeRO-1/2 then allgather the updated parameter shards; ZeRO-3 reduce-scatters in
    backward (sim.costs.passes) and has nothing left here. ``sync_fn(n_bytes, group, op)`` and
    ``groups``: the planner's caches (default: the library's costs)."""
    strategy, cluster, workload = scenario.strategy, scenario.cluster, scenario.workload
    dp = strategy.dp_degree(cluster.world_size)
    tp, pp, cp, ep, stage = strategy.tp, strategy.pp, strategy.cp, strategy.ep, strategy.zero_stage
    by_link = {"intra": 0.0, "inter": 0.0}
    if stage >= 3 or dp * cp == 1:
        return 0.0, 0.0, by_link, 0.0
    if groups is None:
        dense_group = grad_group(cluster, dp, tp, pp, cp)
        groups = (dense_group, expert_grad_group(cluster, dp, ep, tp, pp, cp) if ep > 1 else dense_group)
    sync_fn = sync_fn or (lambda n, g, op: _sync(n, g, op, strategy, cluster))
    op = "reduce_scatter" if stage else "allreduce"
    per_param = strategy.grad_bytes_per_param
    order = [i for lo, hi in reversed(chunks) for i in range(hi - 1, lo - 1, -1)]
    total_s = codec_s = gather_s = 0.0
    for expert_part, group in ((False, groups[0]), (True, groups[1])):
        share = per_param / (tp * ep) if expert_part else per_param / tp
        grads = [workload.layers[i].param_count * share if (workload.layers[i].kind == "Experts") == expert_part
                 else 0.0 for i in order]
        if expert_part and not any(grads):
            continue
        if group.world_size == 1:
            continue
        for bucket in assign_buckets(grads, strategy.bucket_bytes, DDP_FIRST_BUCKET_BYTES):
            t, c, b = sync_fn(sum(grads[i] for i in bucket), group, op)
            total_s += t
            codec_s += c
            for k, x in b.items():
                by_link[k] = by_link.get(k, 0.0) + x
        if stage:
            t, _, b = sync_fn(sum(grads), group, "allgather")  # parameters in the compute precision, as the gradients
            gather_s += t
            for k, x in b.items():
                by_link[k] = by_link.get(k, 0.0) + x
    return total_s, codec_s, by_link, gather_s


def _sync(n_bytes: float, group: Cluster, op: str, strategy: Strategy, cluster: Cluster) -> tuple[float, float, dict[str, float]]:
    """One bucket's (or ZeRO's gather's) seconds, codec seconds and bytes by link."""
    if op == "allreduce":
        return bucket_sync(n_bytes, group, strategy, cluster.gpu)
    if n_bytes <= 0:
        return 0.0, 0.0, {"intra": 0.0, "inter": 0.0}
    cost = op_cost(op, n_bytes, group, spec_of(strategy))
    return cost.time_s, 0.0, dict(cost.bytes_by_link)


def _tp_bytes(scenario: Scenario, micro_batch: int, dtype_bytes: int, group) -> dict[str, float]:
    """Bytes of all TP allreduces in the cluster per iteration: per group x groups x 2 passes x m
    (a reduce-scatter and an allgather move what one ring allreduce moves)."""
    from sim.costs.collectives import bytes_by_link, ring_allreduce
    from sim.costs.tensor import tp_allreduces_per_pass, tp_message_bytes

    strategy = scenario.strategy
    totals = {"intra": 0.0, "inter": 0.0}
    if strategy.tp == 1:
        return totals
    groups = scenario.cluster.world_size // strategy.tp
    for layer in scenario.workload.layers:
        count = tp_allreduces_per_pass(layer)
        if count == 0:
            continue
        per = bytes_by_link(ring_allreduce(tp_message_bytes(layer, micro_batch, dtype_bytes, 1 / strategy.cp), group))
        for k, v in per.items():
            # each group holds 1/pp of the layers; all groups together cover each layer dp x cp times
            totals[k] += v * count * 2 * strategy.micro_batches * groups / strategy.pp
    return totals
