"""scalebench's discrete-event simulator of distributed training (torch-free)."""

from sim.config import Scenario, load_scenario, scenario_from_dict
from sim.result import IterationResult
from sim.simulate import simulate

__all__ = ["IterationResult", "Scenario", "load_scenario", "scenario_from_dict", "simulate"]
