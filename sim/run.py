"""``simulate_run(scenario, iterations) -> RunResult``: many iterations, where ranks differ.

Stragglers, slow nodes, mixed GPUs and failures only matter over many iterations, and
asynchronous training only exists over many. Synchronous training (data parallel, synchronous
PS, pipelines) waits each iteration for its slowest rank: the iteration is the single-iteration
schedule with every compute time scaled by the largest per-rank factor of that iteration (all
ranks' buckets are ready when the slowest rank's are). Asynchronous PS runs one process per
worker (sim/engine/async_ps.py).

Statistical efficiency: a stale update is worth less than a fresh one. The penalty model is the
staleness-dependent learning rate of Zhang, Gupta, Lian & Liu, "Staleness-aware Async-SGD for
Distributed Deep Learning" (IJCAI 2016): an update with staleness tau is applied with the
learning rate divided by tau, so it makes 1/max(1, tau) of a fresh update's progress.
``effective_samples_per_s`` counts each update's samples times that factor. Chen et al. 2016
("Revisiting Distributed Synchronous SGD") and Dutta et al. 2018 ("Slow and Stale Gradients Can
Win the Race", AISTATS) show the trade-off it models: async has the throughput, sync the progress
per sample, and backup workers or fewer stragglers tip the balance.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.costs.compute import OPTIMIZER_TRAFFIC, layer_times_s
from sim.costs.ps import even_placement, round_robin_placement
from sim.costs.staleness import STALENESS_PENALTIES
from sim.engine.async_ps import AsyncPlan, run_async_ps
from sim.errors import ConfigError, require_positive
from sim.faults import lognormal_jitter, rank_speed_factors
from sim.scenario import Scenario
from sim.strategy import DTYPE_BYTES


@dataclass(frozen=True)
class RunResult:
    mode: str
    """'sync' or 'async'."""
    workers: int
    iterations: int
    wall_time_s: float
    samples: float
    """Samples whose gradients were applied (lost work excluded)."""
    effective_samples: float
    """samples x the staleness penalty of their update."""
    updates: int
    staleness_histogram: tuple[int, ...]
    """Count of applied updates by staleness 0, 1, 2, ..."""
    lost_work_s: float
    lost_samples: float
    restarts: int
    events: int
    iteration_times_s: tuple[float, ...] = ()
    """Synchronous runs: each iteration's time (failures and checkpoints not included)."""

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.wall_time_s if self.wall_time_s else 0.0

    @property
    def effective_samples_per_s(self) -> float:
        return self.effective_samples / self.wall_time_s if self.wall_time_s else 0.0

    @property
    def staleness_mean(self) -> float:
        hist = np.asarray(self.staleness_histogram, dtype=float)
        return float((hist * np.arange(len(hist))).sum() / hist.sum()) if hist.sum() else 0.0

    def metrics(self) -> dict[str, Any]:
        return {
            "mode": self.mode, "workers": self.workers, "iterations": self.iterations,
            "wall_time_s": self.wall_time_s, "samples": self.samples, "samples_per_s": self.samples_per_s,
            "effective_samples_per_s": self.effective_samples_per_s, "updates": self.updates,
            "staleness_mean": self.staleness_mean, "staleness_max": len(self.staleness_histogram) - 1,
            "lost_work_s": self.lost_work_s, "lost_samples": self.lost_samples, "restarts": self.restarts,
            "events": self.events,
        }


MAX_RUN_DRAWS = 2**25
"""iterations x ranks at most 33.5 M: a run draws one compute factor per rank and iteration
(float64, 256 MiB per array at the cap; the jitter's draws and its normalisation hold two more)."""


def check_run_size(iterations: int, world_size: int, field: str = "iterations") -> int:
    """``iterations`` if a run of it on ``world_size`` ranks fits ``MAX_RUN_DRAWS``, else a ConfigError."""
    require_positive(field, iterations, integer=True)
    if iterations * world_size > MAX_RUN_DRAWS:
        raise ConfigError(field, iterations, f"at most {MAX_RUN_DRAWS // world_size:,} on {world_size:,} ranks (a run "
                          f"draws iterations x ranks compute factors, at most {MAX_RUN_DRAWS:,}: "
                          f"{8 * iterations * world_size / 2**30:.1f} GiB asked)", related=("cluster.gpus",))
    return iterations


def simulate_run(scenario: Scenario, iterations: int) -> RunResult:
    """``iterations`` synchronous iterations, or ``iterations`` steps of every asynchronous worker."""
    check_run_size(iterations, scenario.cluster.world_size)
    s = scenario.strategy
    rng = np.random.default_rng(scenario.seed)
    if s.collective == "ps" and s.ps_mode == "async":
        return _async_run(scenario, iterations, rng)
    return _sync_run(scenario, iterations, rng)


def _compute_time_of(scenario: Scenario) -> Callable[[Any], float]:
    w, s = scenario.workload, scenario.strategy
    return lambda gpu: sum(f + b for f, b in layer_times_s(w, gpu, s.precision, DTYPE_BYTES[s.precision]))


def _factors(scenario: Scenario, iterations: int, rng: np.random.Generator) -> np.ndarray:
    """(iterations, ranks): persistent speed factors x lognormal jitter, and (``variability:``,
    on by default) each GPU's own speed, lognormal of mean 1 and the published spread, drawn once
    per rank, x its per-iteration jitter (sim.costs.stragglers: the draws whose expected maximum
    one iteration uses)."""
    c, het, var = scenario.cluster, scenario.heterogeneity, scenario.variability
    shape = (iterations, c.world_size)
    persistent = rank_speed_factors(het, c.gpu, c.world_size, c.gpus_per_node, _compute_time_of(scenario))
    factors = persistent[None, :] * lognormal_jitter(rng, het.jitter_cv, shape)
    if var.stragglers and c.world_size > 1:
        gpu_cv = var.resolved_gpu_cv(c.gpu)
        if gpu_cv > 0:
            s2 = math.log1p(gpu_cv * gpu_cv)
            factors = factors * rng.lognormal(-s2 / 2, math.sqrt(s2), c.world_size)[None, :]
        if var.iteration_cv > 0:
            factors = factors * lognormal_jitter(rng, var.iteration_cv, shape)
    return factors


def _iteration_time_fn(scenario: Scenario) -> Callable[[float], float]:
    """T(scale): one synchronous iteration with every compute time multiplied by ``scale``."""
    s = scenario.strategy
    n, batch = scenario.cluster.world_size, scenario.workload.batch_size
    from sim.simulate import pipelined

    if pipelined(s):
        from sim.engine.pipeline import run_pipeline
        from sim.engine.pipeline_plan import build_pipeline_plan, scaled_pipeline_plan

        pplan = build_pipeline_plan(scenario)

        def pipeline_time(scale: float) -> float:
            return run_pipeline(scaled_pipeline_plan(pplan, scale), n, batch).iteration_time_s

        return pipeline_time
    from sim.engine.fast import run_fast
    from sim.engine.plan import build_plan

    plan = build_plan(scenario)

    def fast_time(scale: float) -> float:
        return run_fast(plan.scaled(scale), n, batch).iteration_time_s

    return fast_time


def _data_floor_s(scenario: Scenario) -> float:
    """The node's input pipeline per iteration (sim.simulate.node_data): no step is shorter; 0
    with synthetic data."""
    from sim.simulate import node_data

    data = node_data(scenario)
    return 0.0 if data is None else data.time_s


def _sync_run(scenario: Scenario, iterations: int, rng: np.random.Generator) -> RunResult:
    """Bulk-synchronous iterations; on a failure, roll back to the last checkpoint, pay the restart."""
    faults = scenario.faults
    scales = _factors(scenario, iterations, rng).max(axis=1)
    gpu_time_of = _iteration_time_fn(scenario)
    floor = _data_floor_s(scenario)

    def time_of(scale: float) -> float:
        return max(gpu_time_of(scale), floor)

    cache: dict[float, float] = {}
    replicas = scenario.strategy.dp_degree(scenario.cluster.world_size)
    samples_per_iteration = replicas * scenario.workload.batch_size
    t = lost = 0.0
    done = restarts = lost_iterations = 0
    checkpoint_t, checkpoint_done = 0.0, 0
    failed = faults.fail_rank is None
    times = []
    while done < iterations:
        scale = float(scales[done])
        if scale not in cache:
            cache[scale] = time_of(scale)
        step = cache[scale]
        if not failed and t + step > faults.fail_at_s:
            # a failure while a checkpoint is being written is noticed when the write ends
            fail_s = max(faults.fail_at_s, t)
            failed = True
            lost += fail_s - checkpoint_t
            lost_iterations += done - checkpoint_done
            done = checkpoint_done
            t = fail_s + faults.restart_s
            checkpoint_t = t
            restarts += 1
            continue
        t += step
        times.append(step)
        done += 1
        if t - checkpoint_t >= faults.checkpoint_interval_s and done < iterations:
            t += faults.checkpoint_s
            checkpoint_t, checkpoint_done = t, done
    samples = iterations * samples_per_iteration
    return RunResult(
        mode="sync", workers=scenario.cluster.world_size, iterations=iterations, wall_time_s=t,
        samples=samples, effective_samples=samples, updates=iterations, staleness_histogram=(iterations,),
        lost_work_s=lost, lost_samples=lost_iterations * samples_per_iteration, restarts=restarts,
        events=len(times), iteration_times_s=tuple(times),
    )


def build_async_plan(scenario: Scenario, iterations: int, rng: np.random.Generator) -> AsyncPlan:
    w, c, s = scenario.workload, scenario.cluster, scenario.strategy
    from sim.codecs import CODECS

    wire_per_param = CODECS[s.codec].bytes_per_elem if s.codec else s.grad_bytes_per_param
    if s.ps_placement == "round_robin":
        held = round_robin_placement([layer.param_count * wire_per_param for layer in w.layers], s.ps_servers)
    else:
        held = even_placement(w.param_count * wire_per_param, s.ps_servers)
    nominal = sum(f + b for f, b in layer_times_s(w, c.gpu, s.precision, DTYPE_BYTES[s.precision]))
    dtype = DTYPE_BYTES[s.precision]
    update = [OPTIMIZER_TRAFFIC[w.optimizer] * b / wire_per_param * dtype / c.gpu.memory_bandwidth_Bps for b in held]
    link = c.inter_link
    return AsyncPlan(
        # a worker's step is no shorter than its node's loader needs for its batch (the pipeline
        # prefetches through the pull and push too, so this is an upper bound on its effect)
        compute_s=np.maximum(nominal * _factors(scenario, iterations, rng), _data_floor_s(scenario)),
        server_bytes=tuple(held),
        server_Bps=link.effective_Bps / c.oversubscription,
        worker_Bps=link.effective_Bps * c.nics_per_node / c.oversubscription,
        alpha_s=link.alpha_s,
        update_s=tuple(update),
        gpus_per_node=c.gpus_per_node,
        fail_rank=scenario.faults.fail_rank,
        fail_at_s=scenario.faults.fail_at_s,
        max_staleness=scenario.strategy.max_staleness,
    )


def _async_run(scenario: Scenario, iterations: int, rng: np.random.Generator) -> RunResult:
    """Measured until the first surviving worker has done ``iterations`` steps: every worker is
    still running in that window, so the slowest does not stretch it (a steady-state rate)."""
    run = run_async_ps(build_async_plan(scenario, iterations, rng))
    batch = scenario.workload.batch_size
    window_s = float(run.finish_s.min()) if np.isfinite(run.finish_s).any() else float(run.wall_time_s)
    inside = run.applied_s <= window_s
    staleness = run.staleness[inside]
    penalty = STALENESS_PENALTIES[scenario.strategy.staleness_penalty](staleness)
    updates = int(inside.sum())
    return RunResult(
        mode="async", workers=scenario.cluster.world_size, iterations=iterations, wall_time_s=window_s,
        samples=updates * batch, effective_samples=float(penalty.sum()) * batch, updates=updates,
        staleness_histogram=tuple(int(v) for v in np.bincount(staleness)) if updates else (),
        lost_work_s=run.lost_work_s, lost_samples=batch if run.lost_work_s > 0 else 0.0,
        restarts=0, events=run.events,
    )


__all__ = ["RunResult", "STALENESS_PENALTIES", "simulate_run"]
