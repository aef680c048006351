"""``simulate(scenario) -> IterationResult``: pure, no files written."""

from __future__ import annotations

from dataclasses import replace

from sim.config import Scenario
from sim.engine.fast import run_fast
from sim.engine.plan import build_plan
from sim.result import IterationResult


def _run(scenario: Scenario) -> IterationResult:
    if scenario.fidelity == "detailed":
        from sim.engine.detailed import run_detailed

        return run_detailed(scenario)
    return run_fast(build_plan(scenario), scenario.cluster.world_size, scenario.workload.batch_size)


def baseline_time_s(scenario: Scenario) -> float:
    """T1: the same per-GPU work on a single GPU (nothing to communicate)."""
    single = replace(scenario.with_world_size(1), fidelity="fast")
    return run_fast(build_plan(single), 1, scenario.workload.batch_size).iteration_time_s


def simulate(scenario: Scenario) -> IterationResult:
    """One training iteration of ``scenario``, with speedup and efficiency against one GPU."""
    result = _run(scenario)
    return replace(result, baseline_time_s=baseline_time_s(scenario))
