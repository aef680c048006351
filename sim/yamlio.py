"""YAML reading, one loader for every scalebench file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from sim.errors import ConfigError

_MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A key given twice in one mapping (YAML 1.1 as PyYAML reads it keeps the last, silently)."""

    def __init__(self, key: Any, first_line: int, mark: Any) -> None:
        self.key = key
        self.first_line = first_line
        super().__init__(None, None, f"duplicate key {key!r} (first given on line {first_line})", mark)


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """YAML 1.1 as PyYAML reads it, except that 1e9 and 1.5e9 are floats (YAML 1.2's rule),
    not strings: people write FLOPs and bytes that way; and a key given twice in one mapping
    is an error (YAML 1.2 forbids it; PyYAML would keep the last value without a word)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:  # '<<' merges defaults that explicit keys may override
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base class reports it
                    continue
                if first is not None:
                    raise DuplicateKeyError(key, first, key_node.start_mark)
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


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


MAX_YAML_BYTES = 16 * 2**20
"""A config, catalog or calibration file is a few KiB; past this it is not one (a dataset, /dev/zero)."""


def read_yaml(path: str | Path, what: str = "config") -> Any:
    """Parse a YAML file; a missing, unreadable, binary or oversized file, a syntax error or a
    key given twice is a ConfigError naming the file (and the line)."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_YAML_BYTES + 1)
    except OSError as err:
        raise ConfigError(what, str(path), f"a readable YAML file ({err.strerror or err})") from None
    if len(data) > MAX_YAML_BYTES:
        raise ConfigError(what, str(path), f"a YAML file of at most {MAX_YAML_BYTES // 2**20} MiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(what, str(path), f"a UTF-8 YAML text file (byte {err.start} is not UTF-8: a binary file?)") from None
    try:
        return load_yaml_text(text)
    except DuplicateKeyError as err:
        line = err.problem_mark.line + 1 if err.problem_mark is not None else err.first_line
        raise ConfigError(f"{path} line {line}", f"duplicate key {err.key!r}",
                          f"each key once in a mapping (first given on line {err.first_line})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or getattr(err, "reason", None) or "syntax error"
        raise ConfigError(f"{path}{where}", "malformed YAML", f"valid YAML ({problem})") from None
