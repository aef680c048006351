"""What one iteration of a dp x pp x tp layout consists of, costed (pure; no SimPy).

Per stage: forward and backward seconds of one micro-batch (each tensor-parallel rank does 1/t
of every layer's work, plus the layer's TP allreduces on the critical path), the send of the
boundary activation to the next stage (and of its gradient back), the stage's gradient
synchronisation over its data-parallel group after the flush, and its optimizer step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.costs.collectives import link_of
from sim.costs.comm import spec_of
from sim.costs.compute import layer_times_s, workload_optimizer_time_s
from sim.costs.network import message_time_s
from sim.costs.pipeline import layer_unit, split_units
from sim.costs.tensor import tp_layer_comm_s
from sim.engine.plan import DDP_FIRST_BUCKET_BYTES, assign_buckets, bucket_sync
from sim.errors import ConfigError
from sim.parallel import check_placement, dp_group, stage_boundary_link, tp_group
from sim.scenario import Scenario
from sim.strategy import DTYPE_BYTES


@dataclass(frozen=True)
class StagePlan:
    index: int
    layers: tuple[int, int]
    """[start, end) layer indices."""
    fwd_s: float
    """One micro-batch's forward on this stage, TP allreduces included."""
    bwd_s: float
    tp_comm_s: float
    """Of fwd_s + bwd_s, the TP allreduces."""
    send_s: float
    """Activation (and, backwards, its gradient) to/from the next stage; 0 for the last stage."""
    send_link: str
    send_bytes: float
    dp_sync_s: float
    codec_s: float
    dp_bytes_by_link: dict[str, float]
    optimizer_s: float
    param_count: int


@dataclass(frozen=True)
class PipelinePlan:
    stages: tuple[StagePlan, ...]
    micro_batches: int
    schedule: str
    dp: int
    tp: int
    tp_bytes_by_link: dict[str, float]
    """Whole cluster, one iteration."""


def build_pipeline_plan(scenario: Scenario) -> PipelinePlan:
    workload, cluster, strategy = scenario.workload, scenario.cluster, scenario.strategy
    tp, pp, m = strategy.tp, strategy.pp, strategy.micro_batches
    dp = strategy.dp_degree(cluster.world_size)
    check_placement(cluster, tp, pp)
    dtype_bytes = DTYPE_BYTES[strategy.precision]
    micro_batch = workload.batch_size // m
    times = micro_batch_times_s(scenario, micro_batch, dtype_bytes)
    tp_cluster = tp_group(cluster, tp)
    dp_cluster = dp_group(cluster, dp, tp, pp)
    tp_spec = replace(spec_of(strategy), collective="auto")
    tp_comm = [tp_layer_comm_s(layer, micro_batch, dtype_bytes, tp_cluster, tp_spec) for layer in workload.layers]
    fwd = [f / tp + c for (f, _), c in zip(times, tp_comm, strict=True)]
    bwd = [b / tp + c for (_, b), c in zip(times, tp_comm, strict=True)]
    bounds = stage_bounds(scenario, [f + b for f, b in zip(fwd, bwd, strict=True)])
    # the framework's own cost per micro-batch pass per stage (strategy.pipeline_overhead_s,
    # calibrated by real/pipeline_bench.py): stage pass = its layers + overhead
    over_s = strategy.pipeline_overhead_s
    stages = []
    for s, (lo, hi) in enumerate(bounds):
        params = sum(layer.param_count for layer in workload.layers[lo:hi])
        shard_params = params / tp
        send_bytes, send_s, link = 0.0, 0.0, "intra"
        if s < pp - 1:
            link = stage_boundary_link(cluster, dp, tp, pp, s)
            # the stage's output: the last of its layers that has an activation (a positional
            # embedding added in place lists none)
            out_elems = next((x.activation_elems for x in reversed(workload.layers[lo:hi]) if x.activation_elems), 0.0)
            send_bytes = micro_batch * out_elems * dtype_bytes
            # each TP rank sends its 1/t slice; on the network the t slices share the node's NICs
            load = 1.0 if link == "intra" else tp * cluster.oversubscription / cluster.nics_per_node
            send_s = message_time_s(send_bytes / tp, link_of(cluster, link), load)
        dp_s, codec_s, dp_bytes = _stage_dp_sync(scenario, lo, hi, dp_cluster)
        stages.append(StagePlan(
            index=s, layers=(lo, hi), fwd_s=sum(fwd[lo:hi]) + over_s, bwd_s=sum(bwd[lo:hi]) + over_s,
            tp_comm_s=2 * sum(tp_comm[lo:hi]), send_s=send_s, send_link=link, send_bytes=send_bytes,
            dp_sync_s=dp_s, codec_s=codec_s, dp_bytes_by_link=dp_bytes,
            optimizer_s=workload_optimizer_time_s(workload, shard_params, dtype_bytes, cluster.gpu),
            param_count=params,
        ))
    return PipelinePlan(tuple(stages), m, strategy.schedule, dp, tp, _tp_bytes(scenario, micro_batch, dtype_bytes, tp_cluster))


def stage_bounds(scenario: Scenario, times_s: list[float] | None = None) -> list[tuple[int, int]]:
    """[start, end) zoo-layer indices of each pipeline stage, cut between top-level modules
    (``layer_unit``) by ``strategy.stage_balance``: time (``times_s``, one micro-batch's forward +
    backward per layer; the simulator's own when None), flops (forward + backward FLOPs) or params.
    The real harness calls this too (real/strategies/pipeline.py), so both run the same stages."""
    workload, strategy = scenario.workload, scenario.strategy
    layers = workload.layers
    if strategy.stage_balance == "params":
        costs = [float(layer.param_count) for layer in layers]
    elif strategy.stage_balance == "flops":
        costs = [layer.fwd_flops + layer.bwd_flops for layer in layers]
    else:
        if times_s is None:
            micro = workload.batch_size // strategy.micro_batches
            times_s = [f + b for f, b in micro_batch_times_s(scenario, micro, DTYPE_BYTES[strategy.precision])]
        costs = list(times_s)
    units = [layer_unit(layer.name) for layer in layers]
    count = len(dict.fromkeys(units))
    if strategy.pp > count:
        raise ConfigError("strategy.pp", strategy.pp, f"at most {workload.name}'s {count} top-level modules "
                          "(stages are cut between them)")
    return split_units(costs, units, strategy.pp)


def micro_batch_times_s(scenario: Scenario, micro_batch: int, dtype_bytes: int) -> list[tuple[float, float]]:
    """(forward, backward) per layer for one micro-batch: the roofline at the micro-batch size;
    a layer's measured times (taken at the full batch) scaled by micro_batch / batch."""
    workload = scenario.workload
    times = layer_times_s(workload.with_batch_size(micro_batch), scenario.cluster.gpu, scenario.strategy.precision, dtype_bytes)
    share = micro_batch / workload.batch_size
    return [(f * share, b * share) if layer.fwd_time_s is not None and layer.bwd_time_s is not None else (f, b)
            for layer, (f, b) in zip(workload.layers, times, strict=True)]


def _stage_dp_sync(scenario: Scenario, lo: int, hi: int, group) -> tuple[float, float, dict[str, float]]:
    """The stage's gradient shard (params / t) reduced over its DP group in DDP buckets, after the flush."""
    strategy, cluster = scenario.strategy, scenario.cluster
    per_param = strategy.grad_bytes_per_param / strategy.tp
    grads = [scenario.workload.layers[i].param_count * per_param for i in range(hi - 1, lo - 1, -1)]
    total_s = codec_s = 0.0
    by_link = {"intra": 0.0, "inter": 0.0}
    for bucket in assign_buckets(grads, strategy.bucket_bytes, DDP_FIRST_BUCKET_BYTES):
        t, c, b = bucket_sync(sum(grads[i] for i in bucket), group, strategy, cluster.gpu)
        total_s += t
        codec_s += c
        for k, v in b.items():
            by_link[k] = by_link.get(k, 0.0) + v
    return total_s, codec_s, by_link


def _tp_bytes(scenario: Scenario, micro_batch: int, dtype_bytes: int, group) -> dict[str, float]:
    """Bytes of all TP allreduces in the cluster per iteration: per group x groups x 2 passes x m."""
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
        per = bytes_by_link(ring_allreduce(tp_message_bytes(layer, micro_batch, dtype_bytes), group))
        for k, v in per.items():
            # each group holds 1/pp of the layers; all groups together cover each layer dp times
            totals[k] += v * count * 2 * strategy.micro_batches * groups / strategy.pp
    return totals
