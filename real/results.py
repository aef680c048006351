"""Result rows of measured points: statistics, environment columns, atomic files."""

from __future__ import annotations

import contextlib
import csv
import io
import platform
import statistics
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

from sim.fileio import atomic_write_bytes, atomic_write_json, atomic_write_text

NO_LATENCY_NOTE = "no added latency (netem is not available; tbf/htb shape rate only)"


def mean_iqr(values: list[float]) -> tuple[float, float]:
    """The time of a repeated phase: the mean over its timed repetitions, and their interquartile
    range (p75 - p25, inclusive quantiles); NaN for no values.

    The mean, not the median: a training run lasts the sum of its steps and a step the sum of
    its collectives, so the expected value is what adds up, and what the simulator's summed
    costs predict. On shared cores a collective's time is bimodal (2 ranks, 0.25 MiB allreduce:
    0.5 ms or 2-4 ms, the slow mode in 30-50% of repetitions), so its median is the fast mode
    or the slow one by a coin's toss and tells nothing about a sum: ten such allreduces took
    14.4 ms on average where 10 x the single one's median said 5.1 ms and 10 x its mean 14.6
    (2026-11-25, the probe behind docs/validation.md). Slow launches are outvoted a level up,
    by the median over separate launches (``real.calibrate.median_round``)."""
    if not values:
        return float("nan"), float("nan")
    if len(values) == 1:
        return float(values[0]), 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    return float(statistics.fmean(values)), float(q[2] - q[0])


def slowest_per_iteration(per_rank: list[list[float]]) -> list[float]:
    """Each iteration timed as its slowest rank (nccl-tests' convention)."""
    return [max(column) for column in zip(*per_rank, strict=True)]


def step_summary(per_rank: list[list[list[float]]]) -> dict[str, float]:
    """Per-rank rows of [forward, backward, optimizer] seconds per repetition -> the mean
    (``mean_iqr``) of each part and of the whole step, every repetition counted as its slowest
    rank (the slowest rank of the sum need not be the slowest of each part: ``total_s`` is the
    former)."""
    parts = [mean_iqr(slowest_per_iteration([[row[k] for row in rows] for rows in per_rank]))[0] for k in range(3)]
    total, iqr = mean_iqr(slowest_per_iteration([[sum(row) for row in rows] for rows in per_rank]))
    return {"fwd_s": parts[0], "bwd_s": parts[1], "opt_s": parts[2], "total_s": total, "total_iqr_s": iqr}


@cache
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """Which machine a calibration or a measurement describes: host name, CPU model and count,
    memory, torch version. Numbers measured on one machine predict nothing on another."""
    import os
    import socket
    from importlib import metadata

    memory = 0
    with contextlib.suppress(OSError, IndexError, ValueError):
        memory = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0]) * 1024
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = ""
    return {"host": socket.gethostname(), "cpu_model": cpu_model(), "cpus": os.cpu_count(),
            "memory_gib": round(memory / 2**30), "torch": torch_version}


@cache
def git_revision() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                             timeout=5, cwd=Path(__file__).resolve().parent)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, timeout=5, cwd=Path(__file__).resolve().parent)
        rev = out.stdout.strip()
        return (rev + ("-dirty" if dirty.stdout.strip() else "")) if rev else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def environment_columns(*, backend: str, link: str | None, topology: str, threads: int | None,
                        cpu_binding: str | None = None, device: str | None = None) -> dict[str, Any]:
    """The columns that say where and how a row was measured; ``cpu_binding`` is the ranks' CPUs
    as the launch reported them (real/binding.py; "" where not known, e.g. under torchrun);
    ``device``: where the ranks computed (real.config.DEVICES; None: what the backend implies)."""
    import os

    import torch

    on_cuda = (device or ("cuda" if backend == "nccl" else "cpu")) == "cuda"
    gpu = torch.cuda.get_device_name(0) if on_cuda and torch.cuda.is_available() else ""
    return {
        "torch_version": torch.__version__,
        "backend": backend,
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpu_model": gpu,
        "threads_per_rank": threads,
        "cpu_binding": cpu_binding or "",
        "link": link or "loopback",
        "topology": topology if link else "",
        "link_note": NO_LATENCY_NOTE if link else "unshaped loopback",
        "git_revision": git_revision(),
    }


def default_row_path(row: dict[str, Any], root: str | Path = "results/real") -> Path:
    """results/real/<model>-<strategy>-<n>-<id>.csv, id = a hash of the row's config columns and link."""
    import hashlib
    import json

    keys = ("scenario", "model", "batch_size", "world_size", "strategy", "collective", "ps_servers", "bucket_mib",
            "overlap", "precision", "real_strategy", "compression", "backend", "link", "topology")
    config = {k: row.get(k) for k in keys}
    if row.get("device") == "cuda":  # gloo ranks on CUDA tensors: another file than the CPU's (CPU rows keep their ids)
        config["device"] = "cuda"
    ident = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return Path(root) / f"{row['model']}-{row['real_strategy']}-{row['world_size']}-{ident}.csv"


ROW_SUFFIXES = (".csv", ".json", ".parquet")
"""What ``write_rows`` writes, by the file's suffix (parquet only where pyarrow is installed)."""


def check_row_path(field: str, path: str | Path) -> Path:
    """Refuse, before anything is measured, an output file ``write_rows`` cannot write: another
    suffix, parquet without pyarrow, a path under a file or in a read-only place."""
    from sim.errors import ConfigError
    from sim.fileio import check_writable

    path = Path(path)
    if path.suffix.lower() not in ROW_SUFFIXES:
        raise ConfigError(field, str(path), "a file ending in " + ", ".join(ROW_SUFFIXES))
    if path.suffix.lower() == ".parquet" and not _has_pyarrow():
        raise ConfigError(field, str(path), "a .csv or .json file (.parquet needs pyarrow: pip install pyarrow)")
    return check_writable(field, path)


def _has_pyarrow() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None


def write_rows(path: str | Path, rows: list[dict[str, Any]]) -> Path:
    """CSV, JSON or parquet by the file's suffix (``ROW_SUFFIXES``; check_row_path first);
    written atomically (never half a file)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        return atomic_write_json(path, rows)
    if suffix == ".parquet":
        import pandas as pd

        buf = io.BytesIO()
        pd.DataFrame(rows).to_parquet(buf, engine="pyarrow", index=False)
        return atomic_write_bytes(path, buf.getvalue())
    fields: list[str] = []
    for row in rows:
        fields.extend(k for k in row if k not in fields)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return atomic_write_text(path, buf.getvalue())
