"""YAML reading, one loader for every scalebench file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from sim.errors import ConfigError


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """YAML 1.1 as PyYAML reads it, except that 1e9 and 1.5e9 are floats (YAML 1.2's rule),
    not strings: people write FLOPs and bytes that way."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."),
)


def load_yaml_text(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file; a missing file or a syntax error is a ConfigError naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError("config", str(path), f"a readable YAML file ({err.strerror})") from None
    try:
        return load_yaml_text(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or "syntax error"
        raise ConfigError(f"{path}{where}", "malformed YAML", f"valid YAML ({problem})") from None
