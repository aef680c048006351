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


MAX_YAML_NODES = 400_000
MAX_ALIAS_SHARE_ABOVE = {400_000: 0.99, 4_000_000: 0.10}
"""Alias expansion, as go-yaml bounds it (gopkg.in/yaml.v3 decode.go, allowedAliasRatio and
alias_ratio_range_low / _high): a document of up to 400,000 nodes once aliases are expanded may
owe 99 % of them to aliases, one of 4,000,000 or more only 10 % (linear in between). A 1 KB
'billion laughs' expands to 387 M nodes and walking it took minutes and GBs here (issue 29)."""
MAX_YAML_DEPTH = 64
"""Nesting levels (assumed: a scenario nests 4, a fabric file 3; 64 keeps Python's recursion, 1,000, far away)."""


def allowed_alias_share(expanded_nodes: int) -> float:
    """The share of a document's expanded nodes that may come from aliases (go-yaml's rule)."""
    (low, high_share), (high, low_share) = MAX_ALIAS_SHARE_ABOVE.items()
    if expanded_nodes <= low:
        return high_share
    if expanded_nodes >= high:
        return low_share
    return high_share - (high_share - low_share) * (expanded_nodes - low) / (high - low)


class AliasBomb(ValueError):
    """A YAML document whose aliases expand beyond ALLOWED (or refer to themselves)."""


def check_expansion(root: yaml.Node) -> tuple[int, int]:
    """(expanded nodes, distinct nodes) of a composed document, in time linear in its distinct
    nodes (each node's expanded size is computed once); raises AliasBomb past go-yaml's alias
    share, on an alias inside itself, or past MAX_YAML_DEPTH."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in _children(node))
            continue
        if key in size:
            continue
        if key in on_path:
            raise AliasBomb("an alias inside the node it names (a recursive structure)")
        if depth > MAX_YAML_DEPTH:
            raise AliasBomb(f"more than {MAX_YAML_DEPTH} levels of nesting")
        on_path.add(key)
        stack.append((node, depth, True))
        for child in _children(node):
            if id(child) in on_path:
                raise AliasBomb("an alias inside the node it names (a recursive structure)")
            if id(child) not in size:
                stack.append((child, depth + 1, False))
    expanded, distinct = size[id(root)], len(size)
    aliased = expanded - distinct
    if aliased > 100 and expanded > 1000 and aliased / expanded > allowed_alias_share(expanded):
        raise AliasBomb(f"aliases that expand {distinct:,} nodes to {expanded:,} (at most "
                        f"{100 * allowed_alias_share(expanded):.0f} % of a document's nodes may come from aliases)")
    return expanded, distinct


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def load_yaml_text(text: str) -> Any:
    """Parse one YAML document, its alias expansion bounded first (check_expansion): PyYAML
    shares an alias' object, but everything that walks the result (a copy, a message, a hash)
    expands it."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_expansion(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


MAX_YAML_BYTES = 16 * 2**20
"""A config, catalog or calibration file is a few KiB; past this it is not one (a dataset, /dev/zero)."""


def read_yaml(path: str | Path, what: str = "config") -> Any:
    """Parse a YAML file; a missing, unreadable, binary, oversized or non-regular file (a named
    pipe nobody writes to, a device), a syntax error, a key given twice or aliases that expand
    without bound is a ConfigError naming the file (and the line)."""
    from sim.fileio import read_input_bytes

    path = Path(path)
    data = read_input_bytes(what, path, what="a readable YAML file", limit_bytes=MAX_YAML_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(what, str(path), f"a UTF-8 YAML text file (byte {err.start} is not UTF-8: a binary file?)") from None
    try:
        return load_yaml_text(text)
    except AliasBomb as err:
        raise ConfigError(what, str(path), f"YAML whose aliases stay bounded (it has {err})") from None
    except DuplicateKeyError as err:
        line = err.problem_mark.line + 1 if err.problem_mark is not None else err.first_line
        raise ConfigError(f"{path} line {line}", f"duplicate key {err.key!r}",
                          f"each key once in a mapping (first given on line {err.first_line})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or getattr(err, "reason", None) or "syntax error"
        raise ConfigError(f"{path}{where}", "malformed YAML", f"valid YAML ({problem})") from None
