"""YAML reading, one loader for every scalebench file."""

from __future__ import annotations

import re
from typing import Any

import yaml


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
