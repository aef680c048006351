"""torch.distributed.pipelining's own cost per micro-batch pass, a microbenchmark of its own.

A pipeline of p stages (one Linear(16, 16) each, so compute is ~0.1 ms, and heavier ones:
``STAGES``) on p co-located gloo ranks, GPipe with m micro-batches, is timed per
``schedule.step`` (mean over iterations of the slowest rank). Each rank also times its stage's own forward and backward of
one micro-batch without the schedule, all ranks at once (so with the same co-location). The
simulator, given those stage times and the calibrated ``sendrecv`` link at p ranks, predicts the
flush T(o) for a per-pass overhead o (``strategy.pipeline_overhead_s``); with equal stages and
sends faster than a stage T(o) = (m + p - 1)(f + b + 2o) + sends, in general T is continuous and
non-decreasing in o, so
  o = T^-1(T_measured)   (bisection; 0 if T(0) >= T_measured)   [the median over m in MICRO_BATCHES]
is what the schedule's bookkeeping, autograd stitching and gloo's send/recv hand-offs add per
forward or backward pass per stage beyond the stage's compute and the wire, per stage size
(it grows with the compute before each send). Written to ``<calibration>/pipeline.yaml`` per p;
read by ``pipeline_overhead_for``. No validation point is involved: the model, batch and stages
are the benchmark's own.

``python -m real.pipeline_bench JOB.json`` is one rank (real/bench_ranks.py).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import yaml

from real.bench_ranks import run_as_rank, run_ranks, timed
from real.calib_lookup import piecewise_linear
from sim.fileio import atomic_write_text

PIPELINE_FILE = "pipeline.yaml"
WIDTH = 16
MICRO_BATCH = 2
MICRO_BATCHES = (2, 4, 8)
STAGES = ({"width": WIDTH, "depth": 1, "micro_batch": MICRO_BATCH},
          {"width": 256, "depth": 2, "micro_batch": 16},
          {"width": 256, "depth": 8, "micro_batch": 16},
          {"width": 256, "depth": 24, "micro_batch": 16},
          {"width": 256, "depths": [8, 1], "micro_batch": 16},
          {"width": 256, "depths": [24, 1], "micro_batch": 16})
"""The stages the per-pass cost is measured with: equal stages, tiny (~0.1 ms per pass: the
library's own bookkeeping) and heavier (~0.4, 1.2, 3 ms per pass here), and unbalanced ones (a
heavy first stage, one-layer stages after it). A send that follows more compute costs more on
shared cores when every stage computes (2 equal stages: o 0.28, 0.44, 0.52, 0.71 ms at 0.12,
0.39, 1.15, 3 ms per pass), far less when the other stages mostly idle (a 2.5 ms first stage
and 0.25 ms ones: o 0.01-0.07 ms); validation/stall_bench.py has the collectives' side."""


def _rank_body(job: dict[str, Any]) -> list[dict[str, Any]]:
    import torch
    import torch.distributed as dist

    rank, p = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    width, micro_batch = (int(job.get(k, d)) for k, d in (("width", WIDTH), ("micro_batch", MICRO_BATCH)))
    depths = stage_depths(job, p)
    module = stage_module(width, depths[rank])
    out = []
    for m in job["micro_batches"]:
        row = _bench_one(module, rank, p, m, job["iterations"], job["warmup"], width=width, micro_batch=micro_batch)
        cpu = torch.tensor([row.pop("cpu_s")], dtype=torch.float64)
        dist.all_reduce(cpu)  # mean CPU seconds per step over ranks
        mine = torch.tensor([row.pop("own_fwd_s"), row.pop("own_bwd_s")], dtype=torch.float64)
        every = [torch.zeros(2, dtype=torch.float64) for _ in range(p)]
        dist.all_gather(every, mine)
        out.append({**row, "cpu_per_rank_s": float(cpu) / p, "depths": depths,
                    **stage_times_by_rank(row, [float(t[0]) for t in every], [float(t[1]) for t in every])})
    return out


def stage_times_by_rank(row: dict[str, Any], own_fwd_s: list[float], own_bwd_s: list[float]) -> dict[str, list[float]]:
    """Each stage's forward and backward of one micro-batch: the ranks' own means (their
    ratios: an unbalanced pipeline's light stages) scaled so the busiest stage's pass equals the
    slowest-rank mean (``stage_fwd_s`` + ``stage_bwd_s``, which holds the waits for a core:
    4 balanced stages on 2 cores read ~3 ms each on their own clocks, ~5 ms slowest-of-4)."""
    own_pass = [f + b for f, b in zip(own_fwd_s, own_bwd_s, strict=True)]
    busiest = max(own_pass)
    scale = (row["stage_fwd_s"] + row["stage_bwd_s"]) / busiest if busiest > 0 else 1.0
    return {"stage_fwd_s_by_rank": [f * scale for f in own_fwd_s], "stage_bwd_s_by_rank": [b * scale for b in own_bwd_s]}


def stage_depths(job: dict[str, Any], p: int) -> list[int]:
    """Each rank's stage depth: ``depths`` (the first stage's, then the rest's: an unbalanced
    pipeline whose later stages idle) or ``depth`` on every rank."""
    if "depths" in job:
        first, rest = (int(d) for d in job["depths"])
        return [first] + [rest] * (p - 1)
    return [int(job.get("depth", 1))] * p


def stage_module(width: int, depth: int):
    """One stage: ``depth`` Linear(width, width) layers, a Tanh between them."""
    import torch

    layers: list[torch.nn.Module] = []
    for i in range(depth):
        layers += [torch.nn.Linear(width, width)] + ([torch.nn.Tanh()] if i < depth - 1 else [])
    return layers[0] if depth == 1 else torch.nn.Sequential(*layers)


def _bench_one(module, rank: int, p: int, m: int, iterations: int, warmup: int, *, width: int = WIDTH,
               micro_batch: int = MICRO_BATCH) -> dict[str, Any]:
    """One micro-batch count: the schedule's step (slowest rank, mean) and its CPU seconds on
    this rank, then the stage's own forward and backward of one micro-batch without the schedule."""
    import torch
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    x, y = torch.randn(m * micro_batch, width), torch.randn(m * micro_batch, width)
    stage = PipelineStage(module, rank, p, torch.device("cpu"))
    schedule = ScheduleGPipe(stage, n_microbatches=m, loss_fn=torch.nn.MSELoss())

    def step() -> None:
        module.zero_grad(set_to_none=True)
        if rank == 0:
            schedule.step(x)
        elif rank == p - 1:
            schedule.step(target=y, losses=[])
        else:
            schedule.step()

    cpu0 = time.process_time()
    t_pipe = timed(step, iterations, warmup)
    cpu_s = (time.process_time() - cpu0) / (iterations + warmup)
    mb = x[:micro_batch].clone().requires_grad_(True)
    grad = torch.ones(micro_batch, width)
    t_fwd, own_fwd = (timed(lambda: module(mb), iterations * 4, warmup, own=own) for own in (False, True))
    t_both, own_both = (timed(lambda: module(mb).backward(grad), iterations * 4, warmup, own=own)
                        for own in (False, True))
    return {"ranks": p, "micro_batches": m, "micro_batch": micro_batch, "width": width, "step_s": t_pipe,
            "cpu_s": cpu_s, "stage_fwd_s": t_fwd, "stage_bwd_s": max(0.0, t_both - t_fwd),
            "own_fwd_s": own_fwd, "own_bwd_s": max(0.0, own_both - own_fwd),
            "params_per_stage": sum(q.numel() for q in module.parameters())}


def measure_pipeline(p: int, *, micro_batches: tuple[int, ...] = MICRO_BATCHES, iterations: int = 20,
                     warmup: int = 3, timeout_s: float = 300, stage: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """Run the benchmark on p co-located gloo ranks (``stage``: width, depth, micro_batch of each
    stage; the tiny one-layer stage by default); rank 0's rows."""
    job = {"micro_batches": list(micro_batches), "iterations": iterations, "warmup": warmup, "kind": "pipeline",
           **(stage or {})}
    return run_ranks(p, job, timeout_s=timeout_s, module="real.pipeline_bench")


def bench_scenario(row: dict[str, Any], link_name: str, catalog, device_name: str, overhead_s: float):
    """The simulator's scenario of one benchmark row: p one-layer stages with the measured stage
    times, GPipe, the activation (micro_batch x width fp32) over ``link_name``."""
    from sim.config import scenario_from_dict

    p, m = int(row["ranks"]), int(row["micro_batches"])
    width = int(row.get("width", WIDTH))
    fwd_s = row.get("stage_fwd_s_by_rank") or [row["stage_fwd_s"]] * p
    bwd_s = row.get("stage_bwd_s_by_rank") or [row["stage_bwd_s"]] * p
    # layer times are taken as the whole batch's (the plan gives each micro-batch 1/m of them)
    layers = [{"name": str(i), "kind": "linear", "param_count": int(row.get("params_per_stage", width * width + width)),
               "fwd_flops": 0.0, "bwd_flops": 0.0, "activation_elems": float(width), "fwd_time_s": fwd_s[i] * m,
               "bwd_time_s": bwd_s[i] * m} for i in range(p)]
    spec = {"name": f"pipeline-bench-p{p}-m{m}",
            "workload": {"model": "pipeline_bench", "batch_size": m * int(row["micro_batch"]), "layers": layers},
            "cluster": {"gpus": p, "gpus_per_node": p, "gpu": device_name, "intra_link": link_name, "inter_link": link_name},
            "strategy": {"kind": "pipeline", "pp": p, "micro_batches": m, "schedule": "gpipe",
                         "pipeline_overhead_s": overhead_s},
            "simulation": {"check_memory": False}}
    return scenario_from_dict(spec, catalog)


def overhead_per_pass_s(row: dict[str, Any], link_name: str, catalog, device_name: str) -> float:
    """o from one row: the o at which the simulator's flush equals the measured step (0 if the
    simulator is already slower without it)."""
    from sim.engine.pipeline import run_pipeline
    from sim.engine.pipeline_plan import build_pipeline_plan

    def flush_s(o: float) -> float:
        scenario = bench_scenario(row, link_name, catalog, device_name, o)
        plan = build_pipeline_plan(scenario)
        return run_pipeline(plan, scenario.cluster.world_size, scenario.workload.batch_size).iteration_time_s

    target = row["step_s"]
    if flush_s(0.0) >= target:
        return 0.0
    lo, hi = 0.0, 1e-3
    while flush_s(hi) < target:
        lo, hi = hi, 2 * hi
    for _ in range(60):  # bisection: the flush is continuous and non-decreasing in o
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if flush_s(mid) < target else (lo, mid)
    return (lo + hi) / 2


def profile_micro_batches(models: dict[str, int], ranks: tuple[int, ...], rounds: int = 3,
                          progress=print) -> dict[str, Any]:
    """Per-layer times at a micro-batch size (``{model: micro_batch}``), alone and with k
    co-located ranks, and the whole compute-only step at that size with k > 1 co-located ranks
    (one thread each, as a pipeline stage runs), in device.yaml's ``workloads`` form
    (real/calibrate.py's own profile and steps). Each is measured in ``rounds`` separate launches
    and the launch at the median is kept (``median_round``): these set the pipeline points'
    absolute compute, one launch of them moved ~30% between calibrations, and the step-to-profile
    ratio at the micro-batch differs from the full batch's (small_cnn at batch 8 on 2 ranks:
    forward 0.97x its layers, 1.22x at batch 32)."""
    from real.calibrate import _layer_entry, median_round, profile_colocated, profile_steps

    out: dict[str, Any] = {}
    for model, batch in models.items():
        profiles, steps = {}, {}
        for k in sorted(set(ranks) | {1}):
            launches, step_launches = [], []
            for r in range(rounds):
                progress(f"pipeline micro-batch: {model} layers at batch {batch}, {k} co-located rank(s), "
                         f"round {r + 1}/{rounds}")
                prof = profile_colocated([model], {model: batch}, k, iterations=20, warmup=3, timeout_s=120)[0]
                launches.append({**prof, "layers_s": sum(prof["fwd_s"]) + sum(prof["bwd_s"])})
                if k > 1:
                    step_launches.append(profile_steps([model], {model: batch}, k, iterations=10, warmup=3,
                                                       timeout_s=120, min_time_s=1.0, max_iterations=300)[model])
            profiles[k] = median_round(launches, "layers_s")
            if step_launches:
                steps[k] = median_round(step_launches, "total_s")
        out[model] = {batch: {**_layer_entry(model, profiles), **({"steps": steps} if steps else {})}}
    return out


def stage_summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    """One stage variant's launches: the busiest stage's pass (forward + backward of one
    micro-batch), the busy-stage count k_eff (``sim.costs.pipeline.busy_stages``) and o, each the
    median over every row (micro-batch counts x launches)."""
    from sim.costs.pipeline import busy_stages

    def passes(row: dict[str, Any]) -> list[float]:
        fwd = row.get("stage_fwd_s_by_rank") or [row["stage_fwd_s"]]
        bwd = row.get("stage_bwd_s_by_rank") or [row["stage_bwd_s"]]
        return [f + b for f, b in zip(fwd, bwd, strict=True)]

    return {"pass_s": statistics.median(max(passes(r)) for r in rows),
            "busy_stages": statistics.median(busy_stages(passes(r)) if len(passes(r)) > 1 else float(r["ranks"])
                                             for r in rows),
            "overhead_per_pass_s": statistics.median(r["overhead_per_pass_s"] for r in rows)}


def calibrate_pipeline(directory: str | Path, ranks: tuple[int, ...] = (2, 4), micro_batches: dict[str, int] | None = None,
                       rounds: int = 3, progress=print) -> dict[str, Any]:
    """Per p in ``ranks`` and stage variant (``STAGES``): the benchmark's rows of ``rounds``
    launches, o per row and their medians (``stage_summary``), into pipeline.yaml; with
    ``micro_batches`` ({model: micro-batch size}) also those models' per-layer profiles and whole
    steps at that size (``workloads``), for ``micro_batch_calibration``. Needs the calibration's
    device and sendrecv fits (run after ``real.calibrate.calibrate``)."""
    from real.calibrated_links import calibrated_catalog, link_for
    from sim.calibration import load_calibration

    cal = load_calibration(directory)
    catalog = calibrated_catalog(cal)
    data: dict[str, Any] = {"form": __doc__.split("\n\n")[1] if __doc__ else "", "world_sizes": {}}
    if micro_batches:
        data["workloads"] = profile_micro_batches(micro_batches, tuple(sorted({1, *ranks})), rounds, progress)
    for p in ranks:
        link = link_for(cal, "loopback", p, "sendrecv")
        by_stage = []
        for stage in STAGES:
            rows = []
            for r in range(rounds):
                progress(f"pipeline overhead: GPipe over {p} stages of {stage_depths(stage, p)} x Linear({stage['width']}) "
                         f"at micro-batch {stage['micro_batch']}, round {r + 1}/{rounds}")
                rows += measure_pipeline(p, stage=stage)
            for row in rows:
                row["overhead_per_pass_s"] = overhead_per_pass_s(row, link, catalog, cal.device_name)
            by_stage.append({**stage, **stage_summary(rows), "rows": rows})
        data["world_sizes"][p] = {"overhead_per_pass_s": by_stage[0]["overhead_per_pass_s"], "sendrecv_link": link,
                                  "by_stage": by_stage}
    atomic_write_text(Path(directory) / PIPELINE_FILE, yaml.safe_dump(data, sort_keys=False))
    return data


def micro_batch_calibration(cal):
    """The calibration with pipeline.yaml's micro-batch profiles added beside device.yaml's, so
    ``sim.calibration.layer_times_s`` finds a measured batch at the micro-batch size (small
    batches are far from linear on this CPU: DESIGN.md / the report of issue 4)."""
    from dataclasses import replace

    path = Path(cal.path) / PIPELINE_FILE
    extra = (yaml.safe_load(path.read_text()) or {}).get("workloads") if path.exists() else None
    if not extra:
        return cal
    workloads = {m: dict(v) for m, v in (cal.device.get("workloads") or {}).items()}
    for model, by_batch in extra.items():
        workloads.setdefault(model, {}).update(by_batch)
    return replace(cal, device={**cal.device, "workloads": workloads})


def pipeline_overhead_for(cal_dir: str | Path, ranks: int, pass_s: float | None = None,
                          busy: float | None = None) -> float:
    """The calibrated per-pass overhead at the nearest measured pipeline depth (0 if none). With
    ``pass_s`` (the busiest stage's forward + backward of one micro-batch): linear in pass_s
    between the stage sizes measured with equal stages (held beyond the smallest and the
    largest); with ``busy`` (the pipeline's busy-stage count k_eff) too, and unbalanced stages
    measured: o_equal(pass_s) at k_eff = p, o_unbalanced(pass_s) at the unbalanced variants'
    k_eff, linear in k_eff between them and held beyond."""
    path = Path(cal_dir) / PIPELINE_FILE
    if not path.exists():
        return 0.0
    sizes = {int(k): v for k, v in (yaml.safe_load(path.read_text()) or {}).get("world_sizes", {}).items()}
    if not sizes:
        return 0.0
    p = min(sizes, key=lambda k: (abs(k - ranks), -k))
    entry = sizes[p]
    variants = entry.get("by_stage") or []
    if pass_s is None or not variants:
        return float(entry["overhead_per_pass_s"])
    def curve(group: list[dict[str, Any]]) -> float:
        return piecewise_linear(sorted((float(b["pass_s"]), float(b["overhead_per_pass_s"])) for b in group), pass_s)

    equal = [b for b in variants if "depths" not in b]
    unequal = [b for b in variants if "depths" in b]
    o_equal = curve(equal or variants)
    if busy is None or not unequal or not equal:
        return o_equal
    k_unequal = statistics.median(float(b.get("busy_stages", 1.0)) for b in unequal)
    k_equal = statistics.median(float(b.get("busy_stages", p)) for b in equal)
    if k_equal <= k_unequal:
        return o_equal
    share = min(1.0, max(0.0, (busy - k_unequal) / (k_equal - k_unequal)))
    o_unequal = curve(unequal)
    return o_unequal + share * (o_equal - o_unequal)


if __name__ == "__main__":
    run_as_rank(_rank_body)
