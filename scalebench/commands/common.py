"""Pieces several subcommands share: the scenario flags (sim/flags.py), output formats, the torch check."""

from __future__ import annotations

import sys

from sim.fileio import format_rows
from sim.flags import (
    BOTH,
    REAL,
    SCENARIO_FLAGS,
    SIM,
    add_scenario_arguments,
    byte_size,
    default_name,
    scenario_dict_from_args,
    vocabulary,
)

__all__ = ["BOTH", "REAL", "SCENARIO_FLAGS", "SIM", "TORCH_EXTRA", "add_scenario_arguments", "byte_size", "default_name",
           "format_rows", "require_torch", "scenario_dict_from_args", "vocabulary", "write_out"]

TORCH_EXTRA = "the torch extra: pip install 'scalebench[real]' (in a checkout: pip install -e '.[real]')"


def require_torch() -> None:
    """A one-line error naming the extra to install, for commands that run torch."""
    try:
        import torch  # noqa: F401
    except ImportError:
        from sim.errors import ConfigError

        raise ConfigError("torch", "not installed", TORCH_EXTRA) from None



def write_out(text: str) -> None:
    sys.stdout.write(text)
