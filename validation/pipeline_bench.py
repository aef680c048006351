"""torch.distributed.pipelining's own cost per micro-batch pass, a microbenchmark of its own.

A pipeline of p tiny stages (one Linear(16, 16) each, so compute is ~0.1 ms) on p co-located
gloo ranks, GPipe with m micro-batches of 2 samples, is timed per ``schedule.step`` (median over
iterations of the slowest rank). Each rank also times its stage's own forward and backward of
one micro-batch without the schedule, all ranks at once (so with the same co-location). The
simulator, given those stage times and the calibrated ``sendrecv`` link at p ranks, predicts the
flush T(o) for a per-pass overhead o (``strategy.pipeline_overhead_s``); with equal stages and
sends faster than a stage T(o) = (m + p - 1)(f + b + 2o) + sends, in general T is continuous and
non-decreasing in o, so
  o = T^-1(T_measured)   (bisection; 0 if T(0) >= T_measured)   [the median over m in MICRO_BATCHES]
is what the schedule's bookkeeping, autograd stitching and gloo's send/recv hand-offs add per
forward or backward pass per stage beyond the stage's compute and the wire. Written to
``<calibration>/pipeline.yaml`` per p; read by ``pipeline_overhead_for``. No validation point is
involved: the model, batch and stages are the benchmark's own.

``python -m validation.pipeline_bench JOB.json`` is one rank (RANK, WORLD_SIZE, MASTER_* set).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from scalebench.fileio import atomic_write_text

PIPELINE_FILE = "pipeline.yaml"
WIDTH = 16
MICRO_BATCH = 2
MICRO_BATCHES = (2, 4, 8)


def _rank_main(job_file: str) -> None:
    from real.binding import bind_from_env
    from sim.costs.colocation import threads_per_rank

    threads = threads_per_rank(os.cpu_count() or 1, int(os.environ["WORLD_SIZE"]))
    bind_from_env(threads)
    import torch
    import torch.distributed as dist

    job = json.loads(Path(job_file).read_text())
    torch.set_num_threads(threads)
    dist.init_process_group("gloo")
    rank, p = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    module = torch.nn.Linear(WIDTH, WIDTH)
    out = []
    for m in job["micro_batches"]:
        row = _bench_one(module, rank, p, m, job["iterations"], job["warmup"])
        cpu = torch.tensor([row.pop("cpu_s")], dtype=torch.float64)
        dist.all_reduce(cpu)  # mean CPU seconds per step over ranks
        out.append({**row, "cpu_per_rank_s": float(cpu) / p})
    if rank == 0:
        Path(job["out"]).write_text(json.dumps(out))
    dist.barrier()
    dist.destroy_process_group()


def _bench_one(module, rank: int, p: int, m: int, iterations: int, warmup: int) -> dict[str, Any]:
    """One micro-batch count: the schedule's step (slowest rank, median) and its CPU seconds on
    this rank, then the stage's own forward and backward of one micro-batch without the schedule."""
    import torch
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    from validation.microbench import _timed

    x, y = torch.randn(m * MICRO_BATCH, WIDTH), torch.randn(m * MICRO_BATCH, WIDTH)
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
    t_pipe = _timed(step, iterations, warmup)
    cpu_s = (time.process_time() - cpu0) / (iterations + warmup)
    mb = x[:MICRO_BATCH].clone().requires_grad_(True)
    grad = torch.ones(MICRO_BATCH, WIDTH)
    t_fwd = _timed(lambda: module(mb), iterations * 4, warmup)
    t_both = _timed(lambda: module(mb).backward(grad), iterations * 4, warmup)
    return {"ranks": p, "micro_batches": m, "micro_batch": MICRO_BATCH, "width": WIDTH, "step_s": t_pipe,
            "cpu_s": cpu_s, "stage_fwd_s": t_fwd, "stage_bwd_s": max(0.0, t_both - t_fwd)}


def measure_pipeline(p: int, *, micro_batches: tuple[int, ...] = MICRO_BATCHES, iterations: int = 20,
                     warmup: int = 3, timeout_s: float = 300) -> list[dict[str, Any]]:
    """Run the benchmark on p co-located gloo ranks; rank 0's rows."""
    from validation.microbench import run_ranks

    job = {"micro_batches": list(micro_batches), "iterations": iterations, "warmup": warmup, "kind": "pipeline"}
    return run_ranks(p, job, timeout_s=timeout_s, module="validation.pipeline_bench")


def bench_scenario(row: dict[str, Any], link_name: str, catalog, device_name: str, overhead_s: float):
    """The simulator's scenario of one benchmark row: p one-layer stages with the measured stage
    times, GPipe, the activation (micro_batch x width fp32) over ``link_name``."""
    from sim.config import scenario_from_dict

    p, m = int(row["ranks"]), int(row["micro_batches"])
    # layer times are taken as the whole batch's (the plan gives each micro-batch 1/m of them)
    layers = [{"name": str(i), "kind": "linear", "param_count": WIDTH * WIDTH + WIDTH, "fwd_flops": 0.0,
               "bwd_flops": 0.0, "activation_elems": float(WIDTH), "fwd_time_s": row["stage_fwd_s"] * m,
               "bwd_time_s": row["stage_bwd_s"] * m} for i in range(p)]
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
    co-located ranks, in device.yaml's ``workloads`` form (real/calibrate.py's own profile).
    Each k is profiled in ``rounds`` separate launches and the launch whose layers sum to the
    median is kept (``median_round``): these profiles set the pipeline points' absolute compute,
    and one launch of them moved ~30% between calibrations."""
    from real.calibrate import _layer_entry, median_round, profile_colocated

    out: dict[str, Any] = {}
    for model, batch in models.items():
        profiles = {}
        for k in sorted(set(ranks) | {1}):
            launches = []
            for r in range(rounds):
                progress(f"pipeline micro-batch: {model} layers at batch {batch}, {k} co-located rank(s), "
                         f"round {r + 1}/{rounds}")
                prof = profile_colocated([model], {model: batch}, k, iterations=20, warmup=3, timeout_s=120)[0]
                launches.append({**prof, "layers_s": sum(prof["fwd_s"]) + sum(prof["bwd_s"])})
            profiles[k] = median_round(launches, "layers_s")
        out[model] = {batch: _layer_entry(model, profiles)}
    return out


def calibrate_pipeline(directory: str | Path, ranks: tuple[int, ...] = (2, 4), micro_batches: dict[str, int] | None = None,
                       rounds: int = 3, progress=print) -> dict[str, Any]:
    """Per p in ``ranks``: the benchmark's rows and o (the median over m), into pipeline.yaml;
    with ``micro_batches`` ({model: micro-batch size}) also those models' per-layer profiles at
    that size (``workloads``), for ``micro_batch_calibration``. Needs the calibration's device and
    sendrecv fits (run after ``real.calibrate.calibrate``)."""
    from sim.calibration import load_calibration
    from validation.calib import calibrated_catalog, link_for

    cal = load_calibration(directory)
    catalog = calibrated_catalog(cal)
    data: dict[str, Any] = {"form": __doc__.split("\n\n")[1] if __doc__ else "", "world_sizes": {}}
    if micro_batches:
        data["workloads"] = profile_micro_batches(micro_batches, tuple(sorted({1, *ranks})), rounds, progress)
    for p in ranks:
        progress(f"pipeline overhead: GPipe over {p} one-layer stages on {p} ranks")
        link = link_for(cal, "loopback", p, "sendrecv")
        rows = measure_pipeline(p)
        for row in rows:
            row["overhead_per_pass_s"] = overhead_per_pass_s(row, link, catalog, cal.device_name)
        data["world_sizes"][p] = {"overhead_per_pass_s": statistics.median(r["overhead_per_pass_s"] for r in rows),
                                  "sendrecv_link": link, "rows": rows}
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


def pipeline_overhead_for(cal_dir: str | Path, ranks: int) -> float:
    """The calibrated per-pass overhead at the nearest measured pipeline depth (0 if none)."""
    path = Path(cal_dir) / PIPELINE_FILE
    if not path.exists():
        return 0.0
    sizes = {int(k): v for k, v in (yaml.safe_load(path.read_text()) or {}).get("world_sizes", {}).items()}
    if not sizes:
        return 0.0
    return float(sizes[min(sizes, key=lambda k: (abs(k - ranks), -k))]["overhead_per_pass_s"])


if __name__ == "__main__":
    from real.worker import exit_skipping_teardown

    _rank_main(sys.argv[1])
    exit_skipping_teardown(0)
