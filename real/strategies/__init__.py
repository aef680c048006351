"""Training strategies and the per-rank measurement loop they share.

Phases on every rank (each timed iteration starts after a barrier, which is not timed):
1. baseline: rank 0 alone runs the compute-only iteration: T1. The others wait, idle, for a
   one-element broadcast after each of its steps (``_wait_for_baseline``): each wait lasts one
   step, never the whole phase, so neither gloo's timeout nor a watchdog takes a long baseline
   (many iterations, a slow model) for a hang, and every step is progress on every rank;
2. compute-only: all ranks at once run the same iteration without communication (co-located
   ranks share the cores exactly as in the real run);
3. the strategy's real iteration, warm-up excluded (then, with the job's ``trace``, one more
   iteration recorded phase by phase: real/phases.py; with its ``profile``, two more that rank 0
   records with torch.profiler: real/profiled.py);
4. communication-only: the strategy's gradient reduction replayed without compute (DDP buckets).
Per-rank lists of seconds go to rank 0, which keeps, per iteration, the slowest rank.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from real.config import real_scenario
from real.strategies.common import LocalTrainer, StepTimes, base_model, rank_batches
from real.timing import timed_phase

TRAINERS = ("ddp", "ps_sync", "pipeline")


def _trainer(ctx, scenario, options, model):
    if options.strategy == "ddp":
        from real.strategies.ddp import DDPTrainer

        return DDPTrainer(model, scenario, options, ctx.device)
    if options.strategy == "ps_sync":
        from real.strategies.ps import SyncPSTrainer

        return SyncPSTrainer(model, scenario, options)
    if options.strategy == "pipeline":
        from real.strategies.pipeline import PipelineTrainer

        return PipelineTrainer(model, scenario, options, ctx)
    raise ValueError(f"strategy {options.strategy} has no synchronous trainer")


def run_training(ctx) -> dict[str, Any]:
    job = ctx.job
    scenario, options = real_scenario(job["spec"])
    warmup = int(job["warmup"])
    batch = scenario.workload.batch_size
    model = base_model(scenario).to(ctx.device)
    data_rank = 0 if options.strategy == "pipeline" else ctx.rank  # pipeline stages share one batch
    batches = [(x.to(ctx.device), y.to(ctx.device))
               for x, y in rank_batches(scenario.workload.name, batch, scenario.seed, data_rank)]
    fault = options.fault or {}
    out: dict[str, Any] = {"rank": ctx.rank}

    if options.baseline and options.strategy != "pipeline":
        ctx.phase = "baseline (rank 0 alone)"
        if ctx.rank == 0:
            out["baseline"] = _compute_only(ctx, LocalTrainer(model, scenario.workload.name,
                                                              scenario.workload.optimizer, options.lr),
                                            batches, warmup, barrier=False)
            _baseline_step_done(ctx, more=False)
        else:
            _wait_for_baseline(ctx)
        ctx.barrier()
    if options.strategy != "pipeline":
        local = LocalTrainer(model, scenario.workload.name, scenario.workload.optimizer, options.lr)
        ctx.phase = "compute-only"
        out["compute"] = _compute_only(ctx, local, batches, warmup, barrier=True)

    ctx.phase = f"{options.strategy} set-up"
    trainer = _trainer(ctx, scenario, options, model)
    losses = []

    def one(i: int) -> tuple[float, tuple[float, float]]:
        if fault.get("rank") == ctx.rank and fault.get("iteration") == i:
            _inject(fault.get("mode", "kill"))
        x, y = batches[i % len(batches)]
        ctx.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        loss = trainer.step(x, y)
        if ctx.device.type == "cuda":
            torch.cuda.synchronize()
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        ctx.beat()
        losses.append(loss)
        return elapsed, (elapsed, cpu)

    ctx.phase = f"{options.strategy} iterations"
    timed = timed_phase(ctx, one, warmup)
    times, cpu_times = [t for t, _ in timed], [c for _, c in timed]
    out["iteration"] = times
    out["iteration_cpu"] = cpu_times
    out["losses"] = losses
    if job.get("trace"):
        from real.phases import traced_iteration

        x, y = batches[0]
        out["trace"] = traced_iteration(ctx, trainer, x, y, job.get("backend", "gloo"), options.strategy)
    if job.get("profile"):
        from real.profiled import profiled_iterations

        ctx.phase = "profiled iterations"
        out.update(profiled_iterations(ctx, trainer, batches, job["profile"], scenario.workload.name, batch))
    if hasattr(trainer, "bucket_sizes_bytes"):
        sizes = trainer.bucket_sizes_bytes()
        out["bucket_bytes"] = sizes
        ctx.phase = "communication-only"
        out["comm"] = _comm_only(ctx, sizes, warmup)
    out.update(trainer.info())
    ctx.phase = "gathering the results"
    gathered: list[Any] = [None] * ctx.world
    dist.all_gather_object(gathered, out)
    if ctx.rank != 0:
        return {}
    return {"ranks": gathered, "world": ctx.world, "threads": torch.get_num_threads(),
            **getattr(trainer, "summary", {})}


def _inject(mode: str) -> None:
    """Testing the watchdogs: die at once, or stop making progress without dying."""
    import os
    import signal

    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    while True:
        time.sleep(3600)


def _compute_only(ctx, local: LocalTrainer, batches, warmup: int, *, barrier: bool) -> list[list[float]]:
    def one(i: int) -> tuple[float, list[float]]:
        x, y = batches[i % len(batches)]
        if barrier:
            ctx.barrier()
        times: StepTimes = local.step(x, y)
        ctx.beat()
        if not barrier:  # rank 0's baseline: the others wait for this
            _baseline_step_done(ctx, more=True)
        return times.total_s, [times.forward_s, times.backward_s, times.optimizer_s]

    return timed_phase(ctx, one, warmup, collective=barrier)


def _baseline_step_done(ctx, *, more: bool) -> None:
    """Rank 0, after each baseline step (untimed): tell the waiting ranks whether another follows."""
    if ctx.world > 1:
        dist.broadcast(torch.tensor([1 if more else 0], dtype=torch.int32), src=0)


def _wait_for_baseline(ctx) -> None:
    """The other ranks during the baseline: one broadcast per step of rank 0, until it says done."""
    flag = torch.zeros(1, dtype=torch.int32)
    while True:
        ctx.waiting = True
        try:
            dist.broadcast(flag, src=0)
        finally:
            ctx.waiting = False
        ctx.beat()
        if int(flag.item()) == 0:
            return


def _comm_only(ctx, sizes_bytes: list[int], warmup: int) -> list[float]:
    """The iteration's bucket allreduces, back to back, without compute (fp32 buckets)."""
    tensors = [torch.zeros(max(1, s // 4), device=ctx.device) for s in sizes_bytes]

    def one(i: int) -> tuple[float, float]:
        ctx.barrier()
        t0 = time.perf_counter()
        for t in tensors:
            dist.all_reduce(t)
        if ctx.device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
        ctx.beat()
        return elapsed, elapsed

    return timed_phase(ctx, one, warmup)
