"""Applying a calibration file's scenario terms (sim/scenario_terms.py) to a scenario: what
``sim.config.scenario_from_dict`` does for every scenario read with a catalog that has them."""

from __future__ import annotations

from dataclasses import replace

from sim.scenario import Scenario
from sim.scenario_terms import ScenarioTerms
from sim.strategy import Strategy


def apply_terms_to_strategy(strategy: Strategy, terms: ScenarioTerms) -> Strategy:
    """The measured overheads and the identified overlap set (set, not added: a scenario
    written out with them and read again with the same catalog gets them once)."""
    if terms.multi_gpu_overhead_s:
        strategy = replace(strategy, multi_gpu_overhead_s=terms.multi_gpu_overhead_s)
    if terms.inter_node_overhead_s:
        strategy = replace(strategy, inter_node_overhead_s=terms.inter_node_overhead_s)
    if terms.overlap is not None:
        strategy = replace(strategy, overlap=terms.overlap)
    return strategy


def apply_scenario_terms(scenario: Scenario, terms: ScenarioTerms) -> Scenario:
    """The scenario with a calibration file's terms; its GPU and links come in through the catalog
    by name."""
    return replace(scenario, strategy=apply_terms_to_strategy(scenario.strategy, terms))
