"""scalebench's discrete-event simulator of distributed training (torch-free)."""

from sim.config import Scenario, load_scenario, scenario_from_dict
from sim.result import IterationResult
from sim.simulate import simulate

__version__ = "0.1.0"
"""scalebench's version (the CLI package re-exports it): kept at the lowest floor so that
results written by any layer can carry it."""

__all__ = ["IterationResult", "Scenario", "__version__", "load_scenario", "scenario_from_dict", "simulate"]
