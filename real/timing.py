"""How many timed repetitions a phase runs: at least ``iterations``, and enough to fill
``min_time_s`` (estimated from the warm-up repetitions), at most ``max_iterations``.

A fixed count of 10 leaves a millisecond-scale iteration on shared cores with a median that
moves 30% between runs (its IQR is as large as the median); timing for a minimum duration is
what ``timeit``'s autorange and google-benchmark's ``--benchmark_min_time`` do. Every rank must
run the same number of collectives, so the ranks agree on the largest count (one allreduce,
outside the timed region).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any


def repetitions(warm_s: list[float], *, iterations: int, min_time_s: float = 0.0, max_iterations: int = 0) -> int:
    """max(iterations, ceil(min_time_s / mean warm-up time)), capped at max_iterations (0: no more
    than iterations)."""
    if min_time_s <= 0 or not warm_s:
        return iterations
    per_s = statistics.fmean(warm_s)
    want = iterations if per_s <= 0 else math.ceil(min_time_s / per_s)
    cap = max(iterations, max_iterations or iterations)
    return max(iterations, min(cap, want))


def agreed_repetitions(warm_s: list[float], job: dict, *, collective: bool = True) -> int:
    """``repetitions`` from the job's ``iterations``/``min_time_s``/``max_iterations``; with
    ``collective``, the largest over ranks (every rank then runs that many)."""
    count = repetitions(warm_s, iterations=int(job["iterations"]), min_time_s=float(job.get("min_time_s", 0) or 0),
                        max_iterations=int(job.get("max_iterations", 0) or 0))
    if not collective:
        return count
    import torch
    import torch.distributed as dist

    agreed = torch.tensor([count], dtype=torch.int64)
    dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
    return int(agreed.item())


def timed_phase(ctx, one: Callable[[int], tuple[float, Any]], warmup: int, *, collective: bool = True,
                least: int | None = None) -> list[Any]:
    """Run ``one(i)`` (-> (seconds, record)) ``warmup`` times untimed, then as many times as the job
    asks (real/timing.py: at least ``least`` or the job's ``iterations``, enough for ``min_time_s``),
    every rank the same number when ``collective``; the records of the timed repetitions."""
    warm = [one(i)[0] for i in range(warmup)]
    count = agreed_repetitions(warm, ctx.job if least is None else {**ctx.job, "iterations": least},
                               collective=collective)
    return [one(warmup + i)[1] for i in range(count)]
