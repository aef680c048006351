"""Measured runs of a user's own job at small scale, read for ``scalebench calibrate --from-runs``.

Three sources, one ``Run`` per measured configuration (GPUs, GPUs per node):
- ``scalebench real`` rows (CSV, JSON or parquet, as ``--out`` writes them): ``world_size``,
  ``gpus_per_node``, ``iteration_time_s`` and its phases ``compute_time_s``, ``comm_time_s``,
  ``exposed_comm_time_s``; the spread from ``iteration_time_iqr_s`` (IQR / 1.349 for a normal
  spread, over the square root of ``iterations``); the scenario from the row's own columns
  (model, batch_size, gpu, links, strategy) where they name catalog entries;
- a plain CSV: ``gpus``, ``gpus_per_node``, ``iteration_s`` or ``samples_per_s`` (with the
  scenario's per-GPU batch), optionally ``compute_s``, ``comm_s``, ``exposed_comm_s`` and
  ``sd_s`` or ``sd_pct`` (the iteration time's uncertainty);
- torch profiler traces (``prof.export_chrome_trace``) of those runs: the iteration is the mean
  ``ProfilerStep#N`` span; communication the union of the GPU kernels whose name holds ``nccl``
  within the steps, compute the union of the others; the GPUs from the trace's
  ``distributedInfo.world_size`` (torch.profiler writes it when torch.distributed is initialised),
  GPUs per node from the scenario.

A run's uncertainty, where nothing gives it, is assumed 1 % of its iteration time (launches of
one job on a dedicated cluster; the fit weighs runs by it: sim/runs_fit.py).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.errors import ConfigError

DEFAULT_SD_FRACTION = 0.01
"""Assumed: a run's iteration time is known to 1 % where the input says nothing."""
REAL_SCENARIO_COLUMNS = ("model", "batch_size", "gpu", "intra_link", "inter_link", "nics_per_node", "framework",
                         "backend", "collective", "bucket_mib", "overlap", "precision")


@dataclass(frozen=True)
class Run:
    gpus: int
    gpus_per_node: int
    iteration_s: float
    sd_s: float
    """Uncertainty of ``iteration_s`` (one standard deviation)."""
    compute_s: float | None = None
    comm_s: float | None = None
    exposed_comm_s: float | None = None
    where: str = ""

    @property
    def nodes(self) -> int:
        return max(1, self.gpus // self.gpus_per_node)

    @property
    def config(self) -> tuple[int, int]:
        return self.gpus, self.gpus_per_node


def _value(where: str, key: str, value: Any, *, integer: bool = False, positive: bool = True) -> float:
    try:
        number = float(value) if not isinstance(value, (bool, list, dict)) else float("nan")
    except (TypeError, ValueError):
        number = float("nan")
    if not math.isfinite(number) or number < 0 or (positive and number == 0) or (integer and number != int(number)):
        kind = "a positive integer" if integer else ("a positive" if positive else "a non-negative") + " finite number"
        raise ConfigError(f"{where}: {key}", value, kind)
    return number


def _first(record: dict[str, Any], *keys: str) -> tuple[str, Any] | None:
    for key in keys:
        if record.get(key) not in (None, "", "nan", "NaN"):
            value = record[key]
            if isinstance(value, float) and math.isnan(value):
                continue
            return key, value
    return None


def run_from_record(where: str, record: dict[str, Any], *, gpus_per_node: int | None = None,
                    batch_size: int | None = None) -> Run:
    """One run from a row of any of the tabular forms (module docstring)."""
    rec = {str(k).strip().lower(): v for k, v in record.items() if k is not None}
    gpus_kv = _first(rec, "gpus", "world_size")
    if gpus_kv is None:
        raise ConfigError(where, sorted(rec), "a gpus (or world_size) column")
    gpus = int(_value(where, *gpus_kv, integer=True))
    gpn_kv = _first(rec, "gpus_per_node")
    if gpn_kv is not None:
        gpn = int(_value(where, *gpn_kv, integer=True))
    elif gpus_per_node is not None:
        gpn = gpus_per_node
    else:
        raise ConfigError(f"{where}: gpus_per_node", None, "a gpus_per_node column, or the scenario's cluster.gpus_per_node")
    gpn = min(gpn, gpus)
    if gpus % gpn:
        raise ConfigError(f"{where}: gpus", gpus, f"a multiple of gpus_per_node={gpn}")
    t_kv = _first(rec, "iteration_s", "iteration_time_s")
    if t_kv is not None:
        iteration = _value(where, *t_kv)
    else:
        thr_kv = _first(rec, "samples_per_s", "throughput_samples_per_s")
        if thr_kv is None:
            raise ConfigError(where, sorted(rec), "iteration_s (or iteration_time_s) or samples_per_s")
        batch_kv = _first(rec, "batch_size")
        batch = _value(where, *batch_kv, integer=True) if batch_kv else batch_size
        if batch is None:
            raise ConfigError(f"{where}: batch_size", None, "the per-GPU batch (a batch_size column or the scenario's "
                              "workload.batch_size) to turn samples/s into an iteration time")
        iteration = batch * gpus / _value(where, *thr_kv)
    sd_kv = _first(rec, "sd_s")
    pct_kv = _first(rec, "sd_pct")
    iqr_kv = _first(rec, "iteration_time_iqr_s")
    if sd_kv is not None:
        sd = _value(where, *sd_kv, positive=False)
    elif pct_kv is not None:
        sd = iteration * _value(where, *pct_kv, positive=False) / 100
    elif iqr_kv is not None:
        iters_kv = _first(rec, "iterations")
        n_iter = _value(where, *iters_kv, integer=True) if iters_kv else 1
        sd = max(_value(where, *iqr_kv, positive=False) / 1.349 / math.sqrt(n_iter), DEFAULT_SD_FRACTION * iteration)
    else:
        sd = DEFAULT_SD_FRACTION * iteration

    def phase(*keys: str, difference: bool = False) -> float | None:
        kv = _first(rec, *keys)
        if kv is None:
            return None
        if difference:  # iteration - compute phase, two measurements: a negative one means none exposed
            try:
                return max(0.0, float(kv[1]))
            except (TypeError, ValueError):
                pass
        return _value(where, *kv, positive=False)

    return Run(gpus, gpn, iteration, sd, phase("compute_s", "compute_time_s"), phase("comm_s", "comm_time_s"),
               phase("exposed_comm_s", "exposed_comm_time_s", difference=True), where)


def scenario_hint(record: dict[str, Any]) -> dict[str, Any] | None:
    """The scenario dict a ``scalebench real`` row describes, where its columns name one."""
    if not all(record.get(k) not in (None, "") for k in ("model", "gpu", "intra_link")):
        return None
    strategy = {k: record[k] for k in ("framework", "backend", "collective", "precision") if record.get(k) not in (None, "")}
    if record.get("bucket_mib") not in (None, ""):
        strategy["bucket_mib"] = float(record["bucket_mib"])
    if record.get("overlap") not in (None, ""):
        strategy["overlap"] = str(record["overlap"]).lower() in ("true", "1")
    cluster = {"gpu": record["gpu"], "intra_link": record["intra_link"]}
    if record.get("inter_link") not in (None, ""):
        cluster["inter_link"] = record["inter_link"]
    workload: dict[str, Any] = {"model": record["model"]}
    if record.get("batch_size") not in (None, ""):
        workload["batch_size"] = int(float(record["batch_size"]))
    return {"workload": workload, "cluster": cluster, "strategy": strategy}


def _trace_run(path: Path, data: dict[str, Any], gpus_per_node: int | None) -> Run:
    """A run from a torch profiler chrome trace (module docstring)."""
    where = str(path)
    events = data.get("traceEvents")
    if not isinstance(events, list):
        raise ConfigError(where, "no traceEvents", "a torch profiler trace (prof.export_chrome_trace)")
    info = data.get("distributedInfo") or {}
    world = info.get("world_size") if isinstance(info, dict) else None
    if world is None:
        raise ConfigError(f"{where}: distributedInfo.world_size", None, "a trace of a torch.distributed run (torch.profiler "
                          "writes distributedInfo when the process group is initialised)")
    gpus = int(_value(where, "distributedInfo.world_size", world, integer=True))
    steps = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
             if isinstance(e, dict) and str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"
             and "dur" in e]
    if not steps:
        raise ConfigError(where, "no ProfilerStep#N spans", "a trace of training steps (torch.profiler.profile(..., "
                          "schedule=...) with prof.step() each iteration)")
    kernels = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), "nccl" in str(e.get("name", "")).lower())
               for e in events if isinstance(e, dict) and e.get("cat") == "kernel" and e.get("ph") == "X"]

    def busy(is_comm: bool, lo: float, hi: float) -> float:
        spans = sorted((max(a, lo), min(b, hi)) for a, b, c in kernels if c == is_comm and b > lo and a < hi)
        total, end = 0.0, -math.inf
        for a, b in spans:
            if b <= end:
                continue
            total += b - max(a, end)
            end = b
        return total

    n = len(steps)
    iteration_us = sum(b - a for a, b in steps) / n
    comm = sum(busy(True, a, b) for a, b in steps) / n if kernels else None
    compute = sum(busy(False, a, b) for a, b in steps) / n if kernels else None
    gpn = gpus_per_node or gpus
    return Run(gpus, min(gpn, gpus), iteration_us * 1e-6, DEFAULT_SD_FRACTION * iteration_us * 1e-6,
               None if compute is None else compute * 1e-6, None if comm is None else comm * 1e-6, None, where)


def read_runs(path: str | Path, *, gpus_per_node: int | None = None,
              batch_size: int | None = None) -> tuple[list[Run], dict[str, Any] | None]:
    """(runs, the scenario a ``scalebench real`` file describes or None) of one file."""
    path = Path(path)
    try:
        if path.suffix.lower() == ".parquet":
            import pandas as pd

            try:
                records: list[Any] = pd.read_parquet(path).to_dict("records")
            except ImportError:
                raise ConfigError("--from-runs", str(path), "a CSV or JSON file (reading parquet needs pyarrow)") from None
            text = None
        else:  # bounded, UTF-8 checked: a binary file was a UnicodeDecodeError traceback (bad_input_driver.py)
            from sim.fileio import read_input_text

            text = read_input_text("--from-runs", path, what="a readable file of measured runs (CSV, JSON or a trace)",
                                   limit_bytes=2 * 2**30)
    except OSError as err:
        raise ConfigError("--from-runs", str(path), f"a readable file of measured runs ({err.strerror})") from None
    if text is not None and path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path}:{err.lineno}", "malformed JSON", f"valid JSON ({err.msg})") from None
        if isinstance(data, dict) and "traceEvents" in data:
            return [_trace_run(path, data, gpus_per_node)], None
        found = data if isinstance(data, list) else data.get("rows") if isinstance(data, dict) else None
        if not isinstance(found, list):
            raise ConfigError(str(path), type(data).__name__, "a list of run rows (scalebench real --out run.json) or a "
                              "torch profiler trace")
        records = found
        wheres = [f"{path}: row {i}" for i in range(1, len(records) + 1)]
    elif text is not None:
        records = list(csv.DictReader(text.splitlines()))
        wheres = [f"{path}:{i}" for i in range(2, len(records) + 2)]
    else:
        wheres = [f"{path}: row {i}" for i in range(1, len(records) + 1)]
    if not records:
        raise ConfigError(str(path), "no rows", "at least one measured run")
    for where, record in zip(wheres, records, strict=True):
        if not isinstance(record, dict):
            raise ConfigError(where, type(record).__name__, "a row: a mapping of column to value")
    runs = [run_from_record(w, r, gpus_per_node=gpus_per_node, batch_size=batch_size)
            for w, r in zip(wheres, records, strict=True)]
    return runs, scenario_hint(records[0])
