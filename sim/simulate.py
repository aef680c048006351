"""``simulate(scenario) -> IterationResult``: pure, no files written."""

from __future__ import annotations

from dataclasses import replace

from sim.engine.fast import run_fast
from sim.engine.plan import build_plan
from sim.result import IterationResult
from sim.scenario import Scenario


def _run(scenario: Scenario) -> IterationResult:
    if scenario.fidelity == "detailed":
        from sim.engine.detailed import run_detailed

        return run_detailed(scenario)
    if pipelined(scenario.strategy):
        from sim.engine.pipeline import run_pipeline
        from sim.engine.pipeline_plan import build_pipeline_plan

        return run_pipeline(build_pipeline_plan(scenario), scenario.cluster.world_size, scenario.workload.batch_size)
    return run_fast(build_plan(scenario), scenario.cluster.world_size, scenario.workload.batch_size)


def pipelined(strategy) -> bool:
    """Whether the pipeline engine runs the iteration (stages, tensor, context or expert parallelism,
    micro-batches, or ZeRO-3's per-unit gathers); else the data-parallel fast path."""
    return strategy.model_parallel or strategy.micro_batches > 1 or strategy.zero_stage >= 3


def baseline_time_s(scenario: Scenario) -> float:
    """T1: the same per-GPU work on a single GPU (nothing to communicate).

    With model parallelism, the whole batch of one replica on one GPU, as plain data parallelism
    (a GPU of unbounded memory: no recomputation, no sharding)."""
    single = replace(scenario.with_world_size(1), fidelity="fast")
    single = replace(single, strategy=replace(single.strategy, kind="data_parallel", dp=None, tp=1, pp=1,
                                              micro_batches=1, codec=None, codec_path=None, cp=1, ep=1, vpp=1,
                                              sequence_parallel=False, recompute="none", zero_stage=0))
    return run_fast(build_plan(single), 1, scenario.workload.batch_size).iteration_time_s


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
    result = _run(scenario)
    memory = max(b.total_bytes for b in memory_per_rank(scenario))
    return replace(result, baseline_time_s=baseline_time_s(scenario), memory_bytes=memory)
