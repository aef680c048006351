"""One validation point, both ways: the real harness' spec and the simulator's scenario.

Measuring goes through ``real.measure.measure_point`` (the harness' own row); predicting builds
the same workload, cluster and strategy for the simulator, with the calibrated device
(``cpu_local``), the calibrated per-layer times for that many co-located ranks
(``sim.calibration.apply_calibration``) and the gloo link fitted at that world size.
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from typing import Any

from real.calibrated_links import fitted_ranks, link_for
from real.codec_bench import codec_ops_for
from real.microbench import reduce_ns_for
from real.pipeline_bench import micro_batch_calibration, pipeline_overhead_for
from real.stall_bench import stall_for
from sim.calibration import (
    Calibration,
    apply_calibration,
    layer_times_s,
    optimizer_time_s,
    step_scale,
    step_times,
    workload_entry,
)
from sim.catalog import Catalog, Link
from sim.codecs import CODECS, default_path
from sim.config import scenario_from_dict
from sim.costs.colocation import shared_device
from sim.costs.pipeline import busy_stages
from sim.engine.pipeline_plan import stage_bounds
from sim.errors import ConfigError
from sim.workload import Layer
from validation.calib import bucket_carries, framework_overhead_s
from validation.config import Point

CODEC_NAMES = {"fp32": None, "fp16": "fp16", "bf16": "bf16", "fp8": "fp8_e4m3"}
"""The sweep's codec axis -> sim codec / real compression (fp8 runs as e4m3 with a scale)."""
HARNESS_MODULES = {"codec": "real.strategies.hooks", "ps_sync": "real.strategies.ps",
                   "pipeline": "real.strategies.pipeline"}
PIPELINE_SCHEDULE = "gpipe"
PIPELINE_STAGE_BALANCE = "flops"
"""Stages cut by FLOPs: known without measuring, so the harness and the calibrated simulator run
the same stages (by time, the simulator would cut by its calibrated times, which the harness lacks)."""


def _strategy(point: Point) -> dict[str, Any]:
    if point.strategy == "ps_sync":
        # the harness' server reduces and broadcasts the flat gradient after backward: no overlap
        return {"collective": "ps", "ps_servers": 1, "bucket_mib": point.bucket_mib, "overlap": False}
    if point.strategy == "pipeline":
        return {"kind": "pipeline", "pp": point.ranks, "micro_batches": point.microbatches,
                "schedule": PIPELINE_SCHEDULE, "stage_balance": PIPELINE_STAGE_BALANCE}
    out: dict[str, Any] = {"bucket_mib": point.bucket_mib, "overlap": point.overlap}
    if point.overlap:  # the harness gives DDP bucket_cap_mb, so torch caps the first bucket at it too
        out["first_bucket_mib"] = point.bucket_mib
    if CODEC_NAMES[point.codec]:
        out["codec"] = CODEC_NAMES[point.codec]
    return out


def real_spec(point: Point) -> dict[str, Any]:
    """The scenario dict measure_point runs (the cluster's gpu and links are the simulator's
    placeholders; the harness ignores them)."""
    real: dict[str, Any] = {"strategy": point.strategy}
    if point.codec != "fp32":
        real["compression"] = CODEC_NAMES[point.codec]
    if point.strategy == "pipeline":
        real.update({"microbatches": point.microbatches, "schedule": PIPELINE_SCHEDULE})
    return {"name": point.id, "workload": {"model": point.model, "batch_size": point.batch_size},
            "cluster": {"gpus": point.ranks, "gpus_per_node": point.ranks, "gpu": "cpu"},
            "strategy": _strategy(point), "simulation": {"check_memory": False}, "real": real}


def harness_gap(point: Point) -> str | None:
    """Why the harness in this checkout cannot run ``point`` yet (None: it can)."""
    module = HARNESS_MODULES["codec"] if point.codec != "fp32" else HARNESS_MODULES.get(point.strategy)
    if module and importlib.util.find_spec(module) is None:
        return f"not in the real harness of this checkout yet ({module.replace('.', '/')}.py missing)"
    return None


def _wire_collective(point: Point, cal: Calibration) -> str:
    """The gloo collective whose fit stands for the link: what the harness runs on the wire.
    A codec gloo cannot sum (fp8) goes through all_gather (real/strategies/hooks.py), whose
    algorithm and per-byte cost differ from allreduce's; an older calibration without an
    allgather fit falls back to the allreduce one."""
    if point.strategy == "pipeline":
        return "sendrecv"
    codec = CODEC_NAMES[point.codec]
    if codec and default_path(CODECS[codec]) == "allgather" and fitted_ranks(cal, point.link, "allgather"):
        return "allgather"
    return "allreduce"


def sim_scenario(point: Point, cal: Calibration, catalog: Catalog):
    collective = _wire_collective(point, cal)
    link = link_for(cal, point.link, point.ranks, collective) if point.ranks > 1 else link_for(cal, "loopback", 2)
    strategy = _strategy(point)
    if point.codec in ("fp16", "bf16"):
        reduce_ns = reduce_ns_for(cal.path, point.codec, point.ranks)
        if reduce_ns is not None:
            strategy["codec_reduce_ns_per_elem"] = reduce_ns
    cores = int(cal.device.get("cores") or 1)
    ops = codec_ops_for(cal.path, CODEC_NAMES[point.codec], point.ranks, cores) if CODEC_NAMES[point.codec] else None
    if ops:  # the hooks' encode/decode measured at this co-location (real/codec_bench.py)
        strategy["codec_encode_ns_per_elem"] = ops["encode_ns_per_elem"]
        strategy["codec_decode_ns_per_elem"] = ops["decode_ns_per_elem"]
    spec = {"name": point.id, "workload": {"model": point.model, "batch_size": point.batch_size},
            "cluster": {"gpus": point.ranks, "gpus_per_node": point.ranks, "gpu": cal.device_name,
                        "intra_link": link, "inter_link": link},
            "strategy": strategy, "simulation": {"check_memory": False}}
    scenario = scenario_from_dict(spec, catalog)
    # the calibrated device is this machine's CPU (real/calibrate.py writes kind: cpu; records made
    # before it did lack it): no GPU's SMs to hold, no published spread of its speed to wait on
    device = replace(shared_device(scenario.cluster.gpu, cores=cores, ranks=point.ranks), kind="cpu")
    scenario = replace(scenario, cluster=replace(scenario.cluster, gpu=device))
    if point.strategy == "ps_sync":
        ps = colocated_ps_link(scenario.cluster.intra_link, fitted_n=int(link.split("_n")[-1].split("_")[0]),
                               ranks=point.ranks)
        scenario = replace(scenario, cluster=replace(scenario.cluster, intra_link=ps, inter_link=ps))
    if point.strategy == "pipeline":
        return pipeline_calibrated(scenario, cal)
    try:
        scenario = apply_calibration(scenario, cal)
    except ConfigError:
        scenario = apply_coarse_calibration(scenario, cal)
    if point.strategy in ("ddp", "ps_sync"):
        # the stall of the step's first collective after its compute (real/stall_bench.py)
        burst_s = sum(layer.fwd_time_s + layer.bwd_time_s for layer in scenario.workload.layers)
        stall_s = stall_for(cal.path, point.ranks, burst_s, first_collective_bytes(scenario))
        scenario = with_overhead_step(scenario, "comm_stall", stall_s)
    if point.strategy == "ddp":
        scenario = with_overhead_step(scenario, "ddp_framework", framework_overhead_s(cal, point.ranks))
    return scenario


def first_collective_bytes(scenario) -> float:
    """Wire bytes one rank contributes to the iteration's first collective: the first gradient
    bucket (DDP; the whole flat gradient for the parameter server, which is one bucket after
    backward) in the codec's wire format (bytes per element / the gradient's)."""
    from sim.engine.plan import build_plan

    buckets = build_plan(scenario).buckets
    strategy = scenario.strategy
    n_bytes = sum(b.n_bytes for b in buckets) if strategy.collective == "ps" else buckets[0].n_bytes
    if strategy.codec:
        n_bytes *= CODECS[strategy.codec].bytes_per_elem / strategy.grad_bytes_per_param
    return n_bytes


def pipeline_calibrated(scenario, cal: Calibration):
    """A pipeline point: per-layer times of one micro-batch from the co-located profiles at the
    micro-batch size (pipeline.yaml's, else device.yaml's batch scaled linearly), at the pipeline's
    busy-stage count k_eff (``busy_stages``: stages idle in part of the step leave cores to the
    others), interpolated linearly between the measured k that bracket it; stored as m x those
    times because the pipeline plan gives each micro-batch 1/m of a layer's batch time; and
    torch.distributed.pipelining's own per-pass cost (strategy.pipeline_overhead_s) at p stages,
    at the busiest stage's forward + backward of one micro-batch (a send after more compute costs
    more: real/pipeline_bench.py STAGES)."""
    m, p = scenario.strategy.micro_batches, scenario.strategy.pp
    w = scenario.workload
    mcal = micro_batch_calibration(cal)

    def micro_times(k: int) -> list[tuple[float, float]]:
        micro = replace(scenario, workload=w.with_batch_size(w.batch_size // m),
                        cluster=replace(scenario.cluster, gpus_per_node=k, nodes=1))
        try:
            micro = apply_calibration(micro, mcal)
        except ConfigError:
            micro = apply_coarse_calibration(micro, mcal)
        times = [(layer.fwd_time_s, layer.bwd_time_s) for layer in micro.workload.layers]
        if step_times(mcal, w.name, w.batch_size // m, k) is not None:
            return times  # already scaled to the whole step measured at the micro-batch and k
        # the micro-batch profile is raw: scale it as the profile is scaled to its measured step
        # (which holds the loss and its gradient), the micro-batch's own step at the nearest k
        # with a stage's threads, else the full batch's
        to_step = stage_step_scale(mcal, w.name, w.batch_size // m, k) or stage_step_scale(cal, w.name, w.batch_size, k)
        if to_step is not None:
            return [(f * to_step[0], b * to_step[1]) for f, b in times]
        # no whole step measured: the loss and its gradient (the profile's iteration beyond its
        # layers) follow the last layer
        f, b = times[-1]
        times[-1] = (f, b + loss_residual_s(mcal, w.name, w.batch_size // m, k))
        return times

    measured = sorted({1, *colocated_ks(mcal, w.name)})
    alone = micro_times(1)
    bounds = stage_bounds(scenario, [f + b for f, b in alone])
    k_eff = min(float(p), busy_stages([sum(f + b for f, b in alone[lo:hi]) for lo, hi in bounds]))
    lo_k = max([k for k in measured if k <= k_eff] or [1])
    hi_k = min([k for k in measured if k >= k_eff] or [p])
    t_lo, t_hi = micro_times(lo_k), micro_times(hi_k)
    share = 0.0 if hi_k == lo_k else (k_eff - lo_k) / (hi_k - lo_k)
    layers = tuple(replace(layer, fwd_time_s=m * (a[0] + share * (b[0] - a[0])), bwd_time_s=m * (a[1] + share * (b[1] - a[1])))
                   for layer, a, b in zip(w.layers, t_lo, t_hi, strict=True))
    # the per-pass cost at this pipeline's busiest stage: one micro-batch's forward + backward
    pass_s = max(sum(x.fwd_time_s + x.bwd_time_s for x in layers[lo:hi]) / m for lo, hi in bounds)
    strategy = replace(scenario.strategy, pipeline_overhead_s=pipeline_overhead_for(cal.path, p, pass_s, k_eff))
    # the optimizer step from the whole-step calibration at the full batch (each stage steps its
    # own parameters: the plan takes it pro rata), at the busy-stage count's upper bracket
    opt_s = optimizer_time_s(cal, w.name, w.batch_size, hi_k)
    return replace(scenario, workload=replace(w, layers=layers, optimizer_time_s=opt_s), strategy=strategy)


def stage_step_scale(cal: Calibration, model: str, batch_size: int, ranks: int) -> tuple[float, float] | None:
    """``step_scale`` for a pipeline stage with ``ranks`` busy co-located stages: from the measured
    k nearest ``ranks`` (ties to the larger) whose whole step ran with the threads per rank of
    its layer profile. A pipeline rank runs cores // p threads (1 here), while the 1-rank step
    ran with all cores (2 threads: small_cnn's step is 0.45x its one-thread layers), which no
    stage gets even when the other stages idle."""
    found = workload_entry(cal, model, batch_size)
    if found is None:
        return None
    entry = found[0]
    steps = {int(k): v for k, v in (entry.get("steps") or {}).items()}
    prof = {int(k): v for k, v in (entry.get("colocated") or {}).items()}
    same = [k for k in steps if k in prof and int(steps[k].get("threads", 0)) == int(prof[k].get("threads_per_rank", -1))]
    if not same:
        return None
    return step_scale(cal, model, batch_size, min(same, key=lambda k: (abs(k - ranks), -k)))


def loss_residual_s(cal: Calibration, model: str, batch_size: int, ranks: int) -> float:
    """The loss, its gradient and zero_grad: the layer profile's iteration wall time minus its
    layers' forward and backward, taken alone (k = 1: with k ranks on 2 cores the wall time also
    holds waits for a core) and slowed like the layers at ``ranks`` (sum at k / sum alone); at the
    nearest profiled batch, scaled linearly; 0 where the profile lacks it."""
    found = workload_entry(cal, model, batch_size)
    if found is None:
        return 0.0
    entry, batch_scale = found
    prof = {int(k): v for k, v in (entry.get("colocated") or {}).items()}
    alone = prof.get(1)
    if not alone or "iteration_wall_s" not in alone:
        return 0.0
    layers_alone = sum(alone["fwd_s"]) + sum(alone["bwd_s"])
    rest = max(0.0, float(alone["iteration_wall_s"]) - layers_alone)
    near_k = prof.get(ranks) or alone
    slowdown = (sum(near_k["fwd_s"]) + sum(near_k["bwd_s"])) / layers_alone if layers_alone > 0 else 1.0
    return rest * slowdown * batch_scale


def colocated_ks(cal: Calibration, model: str) -> list[int]:
    """The co-located rank counts the calibration profiled ``model`` with (any batch)."""
    entries = (cal.device.get("workloads") or {}).get(model) or {}
    return sorted({int(k) for e in entries.values() for k in (e.get("colocated") or {})})


def with_overhead_step(scenario, name: str, overhead_s: float):
    """A calibrated per-iteration cost as a parameter-free step before the first layer: it holds
    the compute stream and moves no gradient (so the breakdown counts it as compute). Used for
    DDP's own cost (``ddp_framework``: hooks, bucket copies, hand-offs to gloo's threads, on a
    one-layer model, real/microbench.py) and for the stall of the step's first collective
    after compute (``comm_stall``, real/stall_bench.py)."""
    if overhead_s <= 0:
        return scenario
    w = scenario.workload
    step = Layer(name=name, kind="overhead", param_count=0, fwd_flops=0.0, bwd_flops=0.0,
                 activation_elems=0.0, fwd_time_s=overhead_s, bwd_time_s=0.0)
    return replace(scenario, workload=replace(w, layers=(step, *w.layers)))


def colocated_ps_link(link: Link, *, fitted_n: int, ranks: int) -> Link:
    """The link as the simulator's ``ps`` collective must see it for the harness' parameter server.

    The emulated link is one medium (one tbf, or the CPU's copies) that all concurrent flows
    share: an allreduce fit at n ranks gives each of a ring's n flows B = R / n, so R = n B.
    The simulator's one-server PS takes 2(a + n S / B') on dedicated server hosts; the harness'
    server is rank 0, also a worker, so only n - 1 gradients cross the medium each way
    (reduce, then broadcast): 2(n - 1) S / R. Hence B' = R n / (n - 1). (The simulator has no
    co-located server placement yet; this maps it onto the dedicated-host form.)"""
    medium_Bps = link.bandwidth_Bps * fitted_n
    return replace(link, name=f"{link.name}_ps", bandwidth_Bps=medium_Bps * ranks / (ranks - 1),
                   source=f"{link.source}; shared medium R = n x B, co-located server (validation/points.py)")


def _unit_of(name: str, sep: str) -> int | None:
    head = name.split(sep, 1)[0]
    return int(head) if head.isdigit() else None


def apply_coarse_calibration(scenario, cal: Calibration):
    """Calibrated units coarser than the zoo's layers (a profile times torch's top-level children,
    e.g. ``1_block``; the zoo splits that block into ``1.attn.qkv``, ``1.fc`` ...): each zoo layer
    belongs to the child its name starts with, and takes a share of that child's measured time
    proportional to its FLOPs (forward FLOPs for forward, backward FLOPs for backward; parameters
    where the child counts no FLOPs, equal shares where it has neither)."""
    w = scenario.workload
    names, fwd, bwd = layer_times_s(cal, w.name, w.batch_size, scenario.cluster.gpus_per_node)
    units = {_unit_of(n, "_"): (f, b) for n, f, b in zip(names, fwd, bwd, strict=True)}
    owner = [_unit_of(layer.name, ".") for layer in w.layers]
    if None in units or any(o not in units for o in owner):
        raise ConfigError(f"calibration.workloads.{w.name}", names, "layers named after the zoo's or its torch children")

    def shares(key) -> list[float]:
        out = []
        for i in range(len(w.layers)):
            mates = [j for j, o in enumerate(owner) if o == owner[i]]
            weights = [key(w.layers[j]) for j in mates]
            if sum(weights) <= 0:
                weights = [float(w.layers[j].param_count) for j in mates]
            if sum(weights) <= 0:
                weights = [1.0] * len(mates)
            out.append(weights[mates.index(i)] / sum(weights))
        return out

    f_share, b_share = shares(lambda x: x.fwd_flops), shares(lambda x: x.bwd_flops)
    layers = tuple(replace(layer, fwd_time_s=units[owner[i]][0] * f_share[i], bwd_time_s=units[owner[i]][1] * b_share[i])
                   for i, layer in enumerate(w.layers))
    return replace(scenario, workload=replace(w, layers=layers, optimizer_time_s=optimizer_time_s(
        cal, w.name, w.batch_size, scenario.cluster.gpus_per_node)))


def predict(point: Point, cal: Calibration, catalog: Catalog) -> dict[str, Any]:
    """The simulator's row for ``point`` (metrics of one iteration); on an emulated link whose
    token bucket carries the whole iteration's traffic (``bucket_carries``), the row on the
    unshaped loopback fit at the same world size."""
    from sim.simulate import simulate

    scenario = sim_scenario(point, cal, catalog)
    row = simulate(scenario).metrics()
    volume = row["bytes_intra"] + row["bytes_inter"]
    # the twin is simulated only where the burst alone could carry the traffic
    if (point.link != "loopback" and point.ranks > 1 and point.strategy != "pipeline"
            and bucket_carries(point.link, volume, float("inf"))):
        free = sim_scenario(replace(point, link="loopback"), cal, catalog)
        free_row = simulate(free).metrics()
        if bucket_carries(point.link, volume, free_row["iteration_time_s"]):
            scenario, row = free, free_row
    row["intra_link"] = scenario.cluster.intra_link.name
    return row
