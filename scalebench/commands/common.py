"""Pieces several subcommands share: scenario flags, output formats."""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from typing import Any

from sim.config import read_yaml, resolve_paths

# flag -> (section, key, type)
SCENARIO_FLAGS: dict[str, tuple[str, str, Any]] = {
    "model": ("workload", "model", str),
    "batch_size": ("workload", "batch_size", int),
    "gpus": ("cluster", "gpus", int),
    "gpus_per_node": ("cluster", "gpus_per_node", int),
    "gpu": ("cluster", "gpu", str),
    "intra_link": ("cluster", "intra_link", str),
    "inter_link": ("cluster", "inter_link", str),
    "nics_per_node": ("cluster", "nics_per_node", int),
    "framework": ("strategy", "framework", str),
    "collective": ("strategy", "collective", str),
    "protocol": ("strategy", "protocol", str),
    "ps_servers": ("strategy", "ps_servers", int),
    "bucket_mib": ("strategy", "bucket_mib", float),
    "precision": ("strategy", "precision", str),
    "fidelity": ("simulation", "fidelity", str),
    "codec": ("strategy", "codec", str),
    "codec_path": ("strategy", "codec_path", str),
    "dp": ("strategy", "dp", int),
    "tp": ("strategy", "tp", int),
    "pp": ("strategy", "pp", int),
    "micro_batches": ("strategy", "micro_batches", int),
    "schedule": ("strategy", "schedule", str),
    "ps_mode": ("strategy", "ps_mode", str),
    "ps_placement": ("strategy", "ps_placement", str),
    "seed": ("simulation", "seed", int),
    "jitter_cv": ("heterogeneity", "jitter_cv", float),
}


def add_scenario_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", help="scenario YAML (workload, cluster, strategy); flags override it")
    group = parser.add_argument_group("scenario flags (override the config)")
    for flag, (_, _, kind) in SCENARIO_FLAGS.items():
        group.add_argument("--" + flag.replace("_", "-"), dest=flag, type=kind, default=None)
    group.add_argument("--no-overlap", dest="overlap", action="store_false", default=None,
                       help="reduce gradients only after backward ends")
    group.add_argument("--catalog", help="YAML file of extra gpus/links (e.g. from scalebench calibrate)")


def scenario_dict_from_args(args: argparse.Namespace, default: dict[str, Any]) -> dict[str, Any]:
    from sim.errors import ConfigError

    if args.config:
        from pathlib import Path

        spec = resolve_paths(read_yaml(args.config), Path(args.config).parent)
    else:
        spec = {k: dict(v) if isinstance(v, dict) else v for k, v in default.items()}
    if not isinstance(spec, dict):
        raise ConfigError(str(args.config), "an empty file" if spec is None else type(spec).__name__, "a YAML mapping")
    for flag, (section, key, _) in SCENARIO_FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            part = spec.setdefault(section, {})
            if part is None:  # `cluster:` with nothing under it
                part = spec[section] = {}
            if isinstance(part, str) and section == "workload":  # workload: resnet50
                part = spec[section] = {"model": part}
            if not isinstance(part, dict):
                raise ConfigError(section, part, f"a mapping (--{flag.replace('_', '-')} sets {section}.{key} in it)")
            part[key] = value
            if flag == "gpus":
                part.pop("nodes", None)
            if flag in ("tp", "pp") and value > 1 and part.get("kind", "data_parallel") == "data_parallel":
                part["kind"] = "hybrid"
    if args.overlap is not None:
        strategy = spec.setdefault("strategy", {})
        if strategy is None:
            strategy = spec["strategy"] = {}
        if not isinstance(strategy, dict):
            raise ConfigError("strategy", strategy, "a mapping (--no-overlap sets strategy.overlap in it)")
        strategy["overlap"] = args.overlap
    if not args.config:  # the default scenario is named after what the flags made of it
        spec["name"] = default_name(spec)
    return spec


def default_name(spec: dict[str, Any]) -> str:
    """``<model>-<gpus>x<gpu>-<link>`` (the inter-node link when there is more than one node)."""
    w, c = spec.get("workload") or {}, spec.get("cluster") or {}
    model = w.get("model", "layers") if isinstance(w, dict) else str(w)
    gpus, per_node = c.get("gpus", c.get("nodes", 1)), c.get("gpus_per_node", 1)
    link = c.get("inter_link") if isinstance(gpus, int) and isinstance(per_node, int) and gpus > per_node else c.get("intra_link")
    return "-".join(str(p) for p in (model, f"{gpus}x{c.get('gpu', 'v100')}", link) if p)


def format_rows(rows: list[dict[str, Any]], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(rows, indent=1, default=str) + "\n"
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def write_out(text: str) -> None:
    sys.stdout.write(text)
