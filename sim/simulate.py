"""``simulate(scenario) -> IterationResult``: pure, no files written."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from sim.engine.fast import run_fast
from sim.engine.plan import build_plan
from sim.result import IterationResult
from sim.scenario import Scenario


def _runner(scenario: Scenario) -> Callable[[float], IterationResult]:
    """``run(scale)``: one iteration of ``scenario`` with every compute time x ``scale``."""
    n, batch = scenario.cluster.world_size, scenario.workload.batch_size
    if scenario.fidelity == "detailed":
        from sim.engine.detailed import run_detailed

        return lambda scale: run_detailed(scenario, compute_scale=scale)
    if pipelined(scenario.strategy):
        from sim.engine.pipeline import run_pipeline
        from sim.engine.pipeline_plan import build_pipeline_plan, scaled_pipeline_plan

        pplan = build_pipeline_plan(scenario)
        return lambda scale: run_pipeline(scaled_pipeline_plan(pplan, scale), n, batch)
    plan = build_plan(scenario)
    return lambda scale: run_fast(plan.scaled(scale), n, batch)


def with_stragglers(run: Callable[[float], IterationResult], scale: float) -> IterationResult:
    """The iteration waiting for its slowest rank: ``run(scale)``'s time and timeline, with the
    nominal rank's breakdown (``run(1)``: compute, overlap slowdown, exposed communication, bubble)
    and the difference as ``straggler_wait_time_s``."""
    base = run(1.0)
    if scale == 1.0:
        return base
    slow = run(scale)
    return replace(slow, compute_time_s=base.compute_time_s, forward_time_s=base.forward_time_s,
                   backward_time_s=base.backward_time_s, optimizer_time_s=base.optimizer_time_s,
                   exposed_comm_time_s=base.exposed_comm_time_s, exposed_comm_terms=base.exposed_comm_terms,
                   overlap_slowdown_time_s=base.overlap_slowdown_time_s, bubble_time_s=base.bubble_time_s,
                   tp_comm_time_s=base.tp_comm_time_s, model_comm_time_s=base.model_comm_time_s,
                   recompute_time_s=base.recompute_time_s, events=base.events + slow.events,
                   straggler_wait_time_s=max(0.0, slow.iteration_time_s - base.iteration_time_s), straggler_scale=scale)


def _run(scenario: Scenario) -> IterationResult:
    scale = scenario.variability.scale(scenario.cluster.gpu, scenario.cluster.world_size)
    return with_stragglers(_runner(scenario), scale)


def pipelined(strategy) -> bool:
    """Whether the pipeline engine runs the iteration (stages, tensor, context or expert parallelism,
    micro-batches, or ZeRO-3's per-unit gathers); else the data-parallel fast path."""
    return strategy.model_parallel or strategy.micro_batches > 1 or strategy.zero_stage >= 3


def node_data(scenario: Scenario):
    """The node's input pipeline per iteration (sim.costs.input_pipeline.node_data), None with
    synthetic data: the replicas' images spread over the nodes (gpus_per_node x batch under data
    parallelism), one training process per GPU."""
    from sim.catalog import host_of
    from sim.costs.input_pipeline import DEFAULT_LOADER
    from sim.costs.input_pipeline import node_data as costed

    s, c, w = scenario.strategy, scenario.cluster, scenario.workload
    images = s.dp_degree(c.world_size) * w.batch_size / c.nodes
    return costed(w.data, s.data_loader or DEFAULT_LOADER, images, c.gpus_per_node, host_of(c).cores, s.data_workers)


def with_input_pipeline(result: IterationResult, scenario: Scenario) -> IterationResult:
    """The iteration bounded by its node's input pipeline: max(GPU timeline, data time), the
    difference reported as data_wait_time_s (sim/costs/input_pipeline.py)."""
    data = node_data(scenario)
    if data is None:
        return result
    wait = max(0.0, data.time_s - result.iteration_time_s)
    return replace(result, iteration_time_s=result.iteration_time_s + wait, data_time_s=data.time_s,
                   data_wait_time_s=wait)


def baseline_time_s(scenario: Scenario) -> float:
    """T1: the same per-GPU work on a single GPU (nothing to communicate), fed by the same host.

    With model parallelism, the whole batch of one replica on one GPU, as plain data parallelism
    (a GPU of unbounded memory: no recomputation, no sharding)."""
    single = replace(scenario.with_world_size(1), fidelity="fast")
    single = replace(single, strategy=replace(single.strategy, kind="data_parallel", dp=None, tp=1, pp=1,
                                              micro_batches=1, codec=None, codec_path=None, cp=1, ep=1, vpp=1,
                                              sequence_parallel=False, recompute="none", zero_stage=0))
    return with_input_pipeline(run_fast(build_plan(single), 1, scenario.workload.batch_size), single).iteration_time_s


def _changed(value: object, default: object) -> str:
    """``key=value`` for the fields of a dataclass that differ from its defaults."""
    from dataclasses import fields

    return ", ".join(f"{f.name}={getattr(value, f.name)!r}" for f in fields(value)  # type: ignore[arg-type]
                     if getattr(value, f.name) != getattr(default, f.name))


def check_one_iteration(scenario: Scenario) -> None:
    """What one iteration cannot show is refused rather than left out of the answer: asynchronous
    training, stragglers (heterogeneity:) and failures (faults:) exist only over many iterations."""
    from sim.errors import ConfigError
    from sim.faults import Faults, Heterogeneity

    run = "a run: scalebench simulate --iterations N, an experiment's iterations: N, or sim.run.simulate_run"
    if scenario.strategy.collective == "ps" and scenario.strategy.ps_mode == "async":
        raise ConfigError("strategy.ps_mode", "async", f"sync for one iteration; asynchronous training is {run}")
    if scenario.heterogeneity != Heterogeneity():
        raise ConfigError("heterogeneity", _changed(scenario.heterogeneity, Heterogeneity()), f"nothing for one iteration (it has no stragglers); jitter, slow nodes "
                          f"and mixed GPUs need {run}")
    if scenario.faults != Faults():
        raise ConfigError("faults", _changed(scenario.faults, Faults()), f"nothing for one iteration (it has no failures); faults need {run}")


def simulate(scenario: Scenario) -> IterationResult:
    """One training iteration of ``scenario``, with speedup and efficiency against one GPU."""
    from sim.memory import memory_per_rank

    check_one_iteration(scenario)
    result = with_input_pipeline(_run(scenario), scenario)
    memory = max(b.total_bytes for b in memory_per_rank(scenario))
    return replace(result, baseline_time_s=baseline_time_s(scenario), memory_bytes=memory)
