"""Per-layer forward and backward times of a model on this device, one rank's view.

Each top-level child runs on a detached copy of its input, so its backward can be timed alone:
forward times child i on x_i; backward times ``out_i.backward(grad_i)``, which produces child
i's parameter gradients and the gradient of its input (grad_{i-1}). Wall and CPU time of the
whole iteration are kept too: co-located ranks share cores, so wall time grows with the number
of ranks while CPU time stays about the same (see the DESIGN notes).
"""

from __future__ import annotations

import statistics
import time
from typing import Any


def layer_times(model_name: str, batch_size: int, iterations: int, warmup: int, seed: int = 0,
                beat=lambda: None) -> dict[str, Any]:
    import torch

    from real.models import build_model, loss_fn, make_batch

    model = build_model(model_name, seed)
    x0, y = make_batch(model_name, batch_size, torch.Generator().manual_seed(seed))
    out = unit_times(model, x0, y, loss_fn(model_name), iterations, warmup, beat=beat)
    return {**out, "threads": torch.get_num_threads()}


def unit_times(model, x0, y, loss, iterations: int, warmup: int, timer=None, beat=lambda: None) -> dict[str, Any]:
    """Forward and backward seconds of each top-level child of ``model`` on detached inputs (the
    module docstring), timed with ``timer`` (real.devtime.DeviceTimer: CUDA events on a GPU; the
    CPU's wall clock by default); the means over ``iterations`` after ``warmup``."""
    import torch

    from real.devtime import DeviceTimer

    timer = timer or DeviceTimer("cpu")
    children = list(model)
    fwd: list[list[float]] = [[] for _ in children]
    bwd: list[list[float]] = [[] for _ in children]
    walls, cpus = [], []
    for it in range(warmup + iterations):
        wall0, cpu0 = time.perf_counter(), time.process_time()
        inputs, outputs = [], []
        x = x0
        f_marks = []
        for child in children:
            x_in = x.detach().requires_grad_(x.is_floating_point())
            t0 = timer.mark()
            out = child(x_in)
            f_marks.append((t0, timer.mark()))
            inputs.append(x_in)
            outputs.append(out)
            x = out
        value = loss(outputs[-1], y)
        grad = torch.autograd.grad(value, outputs[-1])[0]
        b_marks: list[tuple[Any, Any] | None] = [None] * len(children)
        for i in range(len(children) - 1, -1, -1):
            t0 = timer.mark()
            if outputs[i].requires_grad:
                outputs[i].backward(grad)
            b_marks[i] = (t0, timer.mark())
            grad = inputs[i].grad
            if grad is None:
                break
        model.zero_grad(set_to_none=True)
        timer.sync()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        beat()
        if it >= warmup:
            for i in range(len(children)):
                fwd[i].append(timer.seconds(*f_marks[i]))
                marks = b_marks[i]
                bwd[i].append(timer.seconds(*marks) if marks is not None else 0.0)
            walls.append(wall)
            cpus.append(cpu)
    return {
        "layers": [f"{i}_{type(c).__name__.lower()}" for i, c in enumerate(children)],
        "param_counts": [sum(p.numel() for p in c.parameters()) for c in children],
        # means over iterations, as every repeated phase (real.results.mean_iqr): the step adds them up
        "fwd_s": [statistics.fmean(v) for v in fwd],
        "bwd_s": [statistics.fmean(v) for v in bwd],
        "iteration_wall_s": statistics.fmean(walls),
        "iteration_cpu_s": statistics.fmean(cpus),
        "clock": timer.clock,
    }


def run_layer_profile(ctx) -> dict[str, Any]:
    """Every rank profiles the same models at once (co-located), starting together."""
    import torch.distributed as dist

    job = ctx.job
    results = []
    for model_name in job["models"]:
        for batch in job["batch_sizes"]:
            dist.barrier()
            results.append({"model": model_name, "batch_size": batch,
                            **layer_times(model_name, batch, job["iterations"], job["warmup"], beat=ctx.beat)})
    gathered: list[Any] = [None] * ctx.world
    dist.all_gather_object(gathered, results)
    return {"ranks": gathered, "world": ctx.world} if ctx.rank == 0 else {}


def run_step_profile(ctx) -> dict[str, Any]:
    """The whole compute-only training step (forward, loss, backward, optimizer: the same
    ``LocalTrainer`` the harness times as its compute-only phase), on every co-located rank at
    once, each repetition started after a barrier and counted as its slowest rank. The ranks
    run the harness' threads (cores // ranks): the layer profile's detached, one-thread passes
    see neither the autograd graph of the whole model nor the threads a lone rank gets."""
    import torch
    import torch.distributed as dist

    from real.models import build_model
    from real.results import step_summary
    from real.strategies.common import LocalTrainer, rank_batches
    from real.timing import timed_phase

    job = ctx.job
    out = []
    for model_name in job["models"]:
        for batch in job["batch_sizes"]:
            local = LocalTrainer(build_model(model_name, 0), model_name, job.get("optimizer", "momentum"), 0.01)
            batches = rank_batches(model_name, batch, 0, ctx.rank)

            def one(i: int, local=local, batches=batches) -> tuple[float, list[float]]:
                x, y = batches[i % len(batches)]
                dist.barrier()
                t = local.step(x, y)
                ctx.beat()
                return t.total_s, [t.forward_s, t.backward_s, t.optimizer_s]

            rows = timed_phase(ctx, one, int(job["warmup"]))
            gathered: list[Any] = [None] * ctx.world
            dist.all_gather_object(gathered, rows)
            if ctx.rank == 0:
                out.append({"model": model_name, "batch_size": batch, **step_summary(gathered),
                            "repetitions": len(rows), "threads": torch.get_num_threads()})
    return {"rows": out, "world": ctx.world} if ctx.rank == 0 else {}
