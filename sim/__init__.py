"""scalebench's discrete-event simulator of distributed training (torch-free)."""

__version__ = "0.1.0"
"""scalebench's version (the CLI package re-exports it): kept at the lowest floor so that
results written by any layer can carry it."""

from sim.config import Scenario, load_scenario, scenario_from_dict
from sim.result import IterationResult
from sim.simulate import simulate

__all__ = ["IterationResult", "__version__", "Scenario", "load_scenario", "scenario_from_dict", "simulate"]
