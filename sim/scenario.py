"""The scenario as data: one workload, one cluster, one strategy, and how to simulate them.

A plain frozen dataclass with no checks of its own, so that every floor (cost layer, engines,
memory model) can take one without importing the parser: scenarios are built and validated
in one place, ``sim.config.scenario_from_dict``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.cluster import Cluster
from sim.faults import Faults, Heterogeneity, Variability
from sim.strategy import Strategy
from sim.workload import Workload


@dataclass(frozen=True, kw_only=True)
class Scenario:
    name: str
    workload: Workload
    cluster: Cluster
    strategy: Strategy
    fidelity: str = "fast"
    """fast: identical ranks simulated once, collectives costed per step with link-load
    counting; detailed: every rank and every chunk, links shared max-min fairly."""
    seed: int = 0
    flow_engine: str = "auto"
    """detailed only: event, periodic or auto (sim.engine.detailed)."""
    heterogeneity: Heterogeneity = Heterogeneity()
    """Jitter, slow nodes, mixed GPUs: used by multi-iteration runs (sim/run.py)."""
    faults: Faults = Faults()
    variability: Variability = Variability()
    """How identical ranks differ in speed; synchronous steps wait for the slowest (sim.costs.stragglers)."""
    check_memory: bool = True

    def with_world_size(self, world_size: int) -> Scenario:
        return replace(self, cluster=self.cluster.with_world_size(world_size))
