"""scalebench list models|gpus|links|codecs: the vocabulary, each entry with its figures and source.

    scalebench list models                 # parameters, FLOPs, default batch, source
    scalebench list gpus --catalog results/calibration/catalog.yaml
    scalebench list links --format csv
"""

from __future__ import annotations

import argparse
from typing import Any

from scalebench.commands.common import format_rows, write_out

KINDS = ("models", "gpus", "links", "codecs")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", choices=KINDS, help="what to list: models (the zoo), gpus, links (the catalog), codecs")
    parser.add_argument("--catalog", metavar="FILE.yaml", help="with gpus or links: also the entries of this catalog file")
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table",
                        help="table (default: aligned columns, sources last), csv or json")


def run(args: argparse.Namespace) -> int:
    from sim.errors import ConfigError

    if args.catalog and args.kind not in ("gpus", "links"):
        raise ConfigError("--catalog", args.catalog, "only with gpus or links")
    rows = {"models": model_rows, "gpus": gpu_rows, "links": link_rows, "codecs": codec_rows}[args.kind](args)
    write_out(format_table(rows) if args.format == "table" else format_rows(rows, args.format))
    return 0


def _catalog(args: argparse.Namespace):
    from sim.catalog import builtin_catalog, load_catalog_file

    return load_catalog_file(args.catalog) if args.catalog else builtin_catalog()


def model_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    from sim.workload import load_workload, zoo_meta, zoo_names

    rows = []
    for name in zoo_names():
        w, meta = load_workload(name), zoo_meta(name)
        arch = meta.get("architecture")
        rows.append({
            "name": name, "params": w.param_count, "layers": len(w.layers),
            "fwd_gflops_per_sample": round(w.fwd_flops_per_sample / 1e9, 4), "batch_size": w.batch_size,
            "optimizer": w.optimizer, "seq_len": arch["seq_len"] if arch else "",
            "description": w.description, "source": w.source,
        })
    return rows


def gpu_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for name, gpu in sorted(_catalog(args).gpus.items()):
        rows.append({
            "name": name,
            "peak_tflops": " ".join(f"{k} {v / 1e12:g}" for k, v in gpu.peak_flops.items()),
            "memory_GiB": round(gpu.memory_bytes / 2**30, 1), "memory_bandwidth_GBps": round(gpu.memory_bandwidth_Bps / 1e9, 1),
            "efficiency": gpu.efficiency, "launch_overhead_us": round(gpu.launch_overhead_s * 1e6, 2), "source": gpu.source,
        })
    return rows


def link_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for name, link in sorted(_catalog(args).links.items()):
        rows.append({
            "name": name, "kind": link.kind, "bandwidth_GBps": round(link.bandwidth_Bps / 1e9, 4),
            "bandwidth_Gbps": round(link.bandwidth_Bps * 8 / 1e9, 3), "efficiency": link.efficiency,
            "latency_us": round(link.latency_s * 1e6, 3), "software_latency_us": round(link.software_latency_s * 1e6, 3),
            "source": link.source,
        })
    return rows


def codec_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    from sim.codecs import CODECS, default_path

    return [{"name": name, "bytes_per_elem": c.bytes_per_elem, "scale_bytes": c.scale_bytes, "summable": c.summable,
             "default_path": default_path(c), "source": c.source} for name, c in CODECS.items()]


def format_table(rows: list[dict[str, Any]], width: int = 60) -> str:
    """Aligned columns, the source last and whole; a description is cut at ``width`` characters
    with '...' (csv and json carry it whole)."""
    if not rows:
        return ""
    columns = list(rows[0])

    def cell(value: Any, column: str) -> str:
        text = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) and column != "seq_len" else str(value)
        return text if column != "description" or len(text) <= width else text[: width - 3] + "..."

    cells = [[cell(r[c], c) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    numeric = [all(isinstance(r[c], int | float) and not isinstance(r[c], bool) for r in rows) for c in columns]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)).rstrip()

    return "\n".join([line(columns), *(line(row) for row in cells)]) + "\n"
