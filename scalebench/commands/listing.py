"""scalebench list models|gpus|links|hosts|codecs|nccl|mpi|loaders: the vocabulary, each entry with its figures and source.

    scalebench list models                 # parameters, FLOPs, default batch, source
    scalebench list gpus --catalog results/calibration/catalog.yaml
    scalebench list links --format csv     # the 'assumed' column names a figure that is an assumption
    scalebench list nccl                   # the NCCL releases modelled: table set, source commit, what it has
    scalebench list loaders                # the input pipelines: ms a core per image, workers, source
"""

from __future__ import annotations

import argparse
from typing import Any

from scalebench.commands.common import format_rows, write_out

KINDS = ("models", "gpus", "links", "hosts", "codecs", "nccl", "mpi", "loaders")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", choices=KINDS, help="what to list: models (the zoo), gpus, links, hosts (the catalog), "
                                                   "codecs, nccl (the NCCL releases modelled), mpi (the MPI implementations), "
                                                   "loaders (the input pipelines that decode real images)")
    parser.add_argument("--catalog", metavar="FILE.yaml", help="with gpus, links or hosts: also the entries of this "
                                                               "catalog file")
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table",
                        help="table (default: aligned columns, sources last), csv or json")


def run(args: argparse.Namespace) -> int:
    from sim.errors import ConfigError

    if args.catalog and args.kind not in ("gpus", "links", "hosts"):
        raise ConfigError("--catalog", args.catalog, "only with gpus, links or hosts")
    rows = {"models": model_rows, "gpus": gpu_rows, "links": link_rows, "hosts": host_rows, "codecs": codec_rows,
            "nccl": nccl_rows, "mpi": mpi_rows, "loaders": loader_rows}[args.kind](args)
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
            "tcp_stream_Gbps": "" if link.tcp_stream_Bps is None else round(link.tcp_stream_Bps * 8 / 1e9, 3),
            "assumed": " ".join(link.assumed) or "-", "source": link.source,
        })
    return rows


def host_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    return [{"name": name, "cpu": h.cpu, "cores": h.cores, "tcp_stream_Gbps": round(h.tcp_stream_Bps * 8 / 1e9, 3),
             "memcpy_GBps": round(h.memcpy_Bps / 1e9, 3), "reduce_GBps": round(h.reduce_Bps / 1e9, 3),
             "pcie_GBps": round(h.pcie_Bps / 1e9, 3), "assumed": " ".join(h.assumed) or "-", "source": h.source}
            for name, h in sorted(_catalog(args).hosts.items())]


def loader_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    from sim.costs.input_pipeline import DEFAULT_LOADER, LOADERS

    return [{"name": name + (" (default)" if name == DEFAULT_LOADER else ""),
             **{f"ms_per_image_{kind}": round(1e3 * c, 3) for kind, c in loader.core_s_per_image.items()},
             "workers": loader.workers or "cores", "per": "node" if loader.per_node else "GPU", "source": loader.source}
            for name, loader in LOADERS.items()]


def nccl_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    from sim.costs.backends.nccl_tables import DEFAULT_NCCL_VERSION, NCCL_VERSIONS, known_versions

    rows = []
    for version in known_versions():
        t = NCCL_VERSIONS[version]
        rows.append({"version": version + (" (default)" if version == DEFAULT_NCCL_VERSION else ""),
                     "tables": t.release, "algorithms": "/".join(t.algorithms), "protocols": "/".join(t.protocols),
                     "chooser": t.tuner, "sockets": "settable" if t.socket.settable else "one per connection",
                     "send_recv": "yes" if t.p2p else "no", "multi_node": "yes" if t.multi_node else "no",
                     "source": f"NVIDIA/nccl {t.commit[:10]}: {t.note}"})
    return rows


def mpi_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    from sim.costs.backends.mpi import DEFAULT_MPI_LIBRARY, MPI_LIBRARIES

    return [{"name": name + (" (default)" if name == DEFAULT_MPI_LIBRARY else ""), "rules": lib.rules,
             "cuda_aware": "modelled" if lib.cuda_aware else "no", "source": lib.source}
            for name, lib in MPI_LIBRARIES.items()]


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
