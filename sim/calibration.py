"""Calibration written by ``scalebench calibrate``, loaded by the simulator. Torch-free.

A calibration directory holds
- ``catalog.yaml``: a device entry (``gpus: {cpu_local: ...}``) and link entries
  (``links: {gloo_loopback: ..., gloo_tbf_1gbit: ...}``) in the catalog's format, so
  ``scalebench simulate --catalog DIR/catalog.yaml --gpu cpu_local --intra-link gloo_loopback``
  works on its own;
- ``device.yaml``: measured per-layer forward/backward seconds per workload and batch, alone
  and with k co-located ranks, and the co-location slowdown;
- ``links.yaml``: every fit (backend, collective, link setting, world size) with its form;
- ``comm.csv``: the raw microbenchmark rows the fits come from.

``apply_calibration(scenario, cal)`` puts measured layer times into a scenario's workload.
Co-location model (ranks on one machine share its cores): per-rank compute time with k ranks
= time alone x s(k), s measured at the k that were run; between them linear interpolation;
beyond the largest measured k_max, processor sharing: s(k) = s(k_max) x k / k_max.
Batch sizes not measured scale linearly from the nearest measured batch (t ~ batch).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sim.config import Scenario, read_yaml
from sim.errors import ConfigError

DEVICE_FILE = "device.yaml"
CATALOG_FILE = "catalog.yaml"
LINKS_FILE = "links.yaml"


@dataclass(frozen=True, kw_only=True)
class Calibration:
    path: Path
    device: dict[str, Any]
    links: dict[str, Any]

    @property
    def catalog_file(self) -> Path:
        return self.path / CATALOG_FILE

    @property
    def device_name(self) -> str:
        return str(self.device.get("device", "cpu_local"))


def load_calibration(path: str | Path) -> Calibration:
    path = Path(path)
    if path.is_file():
        path = path.parent
    if not (path / DEVICE_FILE).exists():
        raise ConfigError("calibration", str(path), f"a directory written by scalebench calibrate (with {DEVICE_FILE})")
    device = read_yaml(path / DEVICE_FILE) or {}
    links = read_yaml(path / LINKS_FILE) if (path / LINKS_FILE).exists() else {}
    return Calibration(path=path, device=device, links=links or {})


def colocation_slowdown(cal: Calibration, ranks: int) -> float:
    """s(k): per-rank compute time with ``ranks`` co-located ranks over the time alone."""
    measured = {int(k): float(v) for k, v in (cal.device.get("colocation_slowdown") or {1: 1.0}).items()}
    measured.setdefault(1, 1.0)
    ks = sorted(measured)
    if ranks in measured:
        return measured[ranks]
    if ranks > ks[-1]:
        return measured[ks[-1]] * ranks / ks[-1]
    lo = max(k for k in ks if k < ranks)
    hi = min(k for k in ks if k > ranks)
    return measured[lo] + (measured[hi] - measured[lo]) * (ranks - lo) / (hi - lo)


def layer_times_s(cal: Calibration, model: str, batch_size: int, ranks: int = 1) -> tuple[list[str], list[float], list[float]]:
    """(layer names, forward s, backward s) for ``model`` at ``batch_size`` with ``ranks`` co-located."""
    workloads = cal.device.get("workloads") or {}
    if model not in workloads:
        raise ConfigError("calibration.workload", model, sorted(workloads) or "a calibrated workload (none in this file)")
    batches = {int(b): entry for b, entry in workloads[model].items()}
    nearest = min(batches, key=lambda b: (abs(b - batch_size), b))
    entry = batches[nearest]
    scale = batch_size / nearest
    per_k = {int(k): v for k, v in (entry.get("colocated") or {}).items()}
    if ranks in per_k:
        times, factor = per_k[ranks], scale
    else:
        times, factor = per_k[1], scale * colocation_slowdown(cal, ranks)
    return list(entry["layers"]), [t * factor for t in times["fwd_s"]], [t * factor for t in times["bwd_s"]]


def apply_calibration(scenario: Scenario, cal: Calibration) -> Scenario:
    """The scenario with measured per-layer times (ranks per node = the co-located ranks)."""
    w = scenario.workload
    names, fwd, bwd = layer_times_s(cal, w.name, w.batch_size, scenario.cluster.gpus_per_node)
    by_name = dict(zip(names, zip(fwd, bwd, strict=True), strict=True))
    layers = []
    for i, layer in enumerate(w.layers):
        if layer.name in by_name:
            f, b = by_name[layer.name]
        elif len(names) == len(w.layers):
            f, b = fwd[i], bwd[i]
        else:
            raise ConfigError(f"calibration.workloads.{w.name}", layer.name, "layers " + ", ".join(names))
        layers.append(replace(layer, fwd_time_s=f, bwd_time_s=b))
    return replace(scenario, workload=replace(w, layers=tuple(layers)))
