"""Calibration: measured figures that replace the simulator's modelled ones. Torch-free.

Two sources, one module:
- one measured single-GPU figure (``single_gpu_samples_per_s`` or
  ``single_gpu_iteration_time_s``, from a paper, a vendor, your own run): every layer's roofline
  time is scaled by one factor so that one GPU takes that time (``apply_throughput_calibration``,
  what an experiment's ``calibration:`` section and ``scalebench simulate
  --single-gpu-samples-per-s`` do);
- a calibration directory written by ``scalebench calibrate`` (or ``scalebench calibrate
  --from-nccl-tests``): measured per-layer times and fitted links (``Calibration``).

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
Where the whole compute-only step was measured with k ranks (``steps``: forward, backward,
optimizer, each rank at the harness' threads, slowest rank per repetition), the layer times are
scaled to it and the optimizer step is taken from it (``layer_times_s``, ``optimizer_time_s``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sim.errors import ConfigError, require_positive
from sim.scenario import Scenario
from sim.yamlio import read_yaml

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


def workload_entry(cal: Calibration, model: str, batch_size: int) -> tuple[dict[str, Any], float] | None:
    """(the calibrated entry at the nearest measured batch, batch_size / that batch); None where
    ``model`` was not calibrated."""
    batches = {int(b): entry for b, entry in ((cal.device.get("workloads") or {}).get(model) or {}).items()}
    if not batches:
        return None
    nearest = min(batches, key=lambda b: (abs(b - batch_size), b))
    return batches[nearest], batch_size / nearest


def _workload_entry(cal: Calibration, model: str, batch_size: int) -> tuple[dict[str, Any], float]:
    """``workload_entry``, or a one-line error naming the calibrated workloads."""
    found = workload_entry(cal, model, batch_size)
    if found is None:
        workloads = cal.device.get("workloads") or {}
        raise ConfigError("calibration.workload", model, sorted(workloads) or "a calibrated workload (none in this file)")
    return found


def step_times(cal: Calibration, model: str, batch_size: int, ranks: int = 1) -> dict[str, float] | None:
    """The measured whole compute-only step with ``ranks`` co-located ranks at the calibrated
    batch: forward, backward and optimizer seconds, each scaled by total / (forward + backward +
    optimizer) so that they add up to the median step (a median of sums is not the sum of
    medians); None where it was not measured."""
    entry, _ = _workload_entry(cal, model, batch_size)
    steps = {int(k): v for k, v in (entry.get("steps") or {}).items()}
    if ranks not in steps:
        return None
    step = {k: float(steps[ranks][k]) for k in ("fwd_s", "bwd_s", "opt_s", "total_s")}
    parts = step["fwd_s"] + step["bwd_s"] + step["opt_s"]
    whole = step["total_s"] / parts if parts > 0 else 1.0
    return {k: step[k] * whole for k in ("fwd_s", "bwd_s", "opt_s")}


def layer_times_s(cal: Calibration, model: str, batch_size: int, ranks: int = 1) -> tuple[list[str], list[float], list[float]]:
    """(layer names, forward s, backward s) for ``model`` at ``batch_size`` with ``ranks`` co-located.

    The per-layer profile gives each layer's share; where the whole step was measured at this k
    (``step_times``), the shares are scaled to it: forward layers sum to the step's forward and
    backward layers to its backward. A per-layer pass on a detached input misses the whole model's autograd graph and
    runs with one thread where the harness gives a lone rank all cores."""
    entry, scale = _workload_entry(cal, model, batch_size)
    per_k = {int(k): v for k, v in (entry.get("colocated") or {}).items()}
    if ranks in per_k:
        times, factor = per_k[ranks], scale
    else:
        times, factor = per_k[1], scale * colocation_slowdown(cal, ranks)
    fwd, bwd = [t * factor for t in times["fwd_s"]], [t * factor for t in times["bwd_s"]]
    step = step_times(cal, model, batch_size, ranks)
    if step is not None and sum(fwd) > 0 and sum(bwd) > 0:
        f_scale, b_scale = step["fwd_s"] * scale / sum(fwd), step["bwd_s"] * scale / sum(bwd)
        fwd, bwd = [t * f_scale for t in fwd], [t * b_scale for t in bwd]
    return list(entry["layers"]), fwd, bwd


def step_scale(cal: Calibration, model: str, batch_size: int, ranks: int) -> tuple[float, float] | None:
    """(forward, backward) factors that take the per-layer profile with ``ranks`` co-located to
    the measured whole step at the calibrated batch nearest ``batch_size`` (what ``layer_times_s``
    applies): step forward / sum of the layers' forward, likewise backward. None where the step
    or the profile at this k was not measured. A model-specific ratio (small_cnn on 2 ranks: its
    step's backward is 0.68 of the detached layers' sum; small_transformer's step is 1.2-1.3x its
    layers with the loss), so it carries to other batch sizes of the same model and k better than
    the raw profile does."""
    entry, _ = _workload_entry(cal, model, batch_size)
    per_k = {int(k): v for k, v in (entry.get("colocated") or {}).items()}
    step = step_times(cal, model, batch_size, ranks)
    if step is None or ranks not in per_k:
        return None
    fwd, bwd = sum(per_k[ranks]["fwd_s"]), sum(per_k[ranks]["bwd_s"])
    if fwd <= 0 or bwd <= 0:
        return None
    return step["fwd_s"] / fwd, step["bwd_s"] / bwd


def optimizer_time_s(cal: Calibration, model: str, batch_size: int, ranks: int = 1) -> float | None:
    """The measured optimizer step with ``ranks`` co-located (independent of the batch), if any."""
    step = step_times(cal, model, batch_size, ranks)
    return None if step is None else step["opt_s"]


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
    return replace(scenario, workload=replace(w, layers=tuple(layers), optimizer_time_s=optimizer_time_s(
        cal, w.name, w.batch_size, scenario.cluster.gpus_per_node)))


def calibrated_scenario(spec: dict[str, Any], path: str | Path) -> Scenario:
    """A scenario dict read with the calibration's catalog and given its measured layer times.

    ``spec`` may name ``gpu: cpu_local`` and ``intra_link: gloo_loopback`` (or another link the
    calibration wrote); a ``real:`` section (the harness' options) is ignored here.
    """
    from sim.catalog import load_catalog_file
    from sim.config import scenario_from_dict

    cal = load_calibration(path)
    catalog = load_catalog_file(cal.catalog_file) if cal.catalog_file.exists() else None
    return apply_calibration(scenario_from_dict(spec, catalog, extra_keys=("real",)), cal)


# -- one measured single-GPU figure --------------------------------------------------------

MAX_ITERATION_S = 86_400.0
"""A measured single-GPU iteration of more than a day is a typo (assumed; issue 29: 1e30 s passed)."""
THROUGHPUT_KEYS = ("single_gpu_samples_per_s", "single_gpu_iteration_time_s", "batch_size", "source")


def _layer_and_optimizer_s(scenario: Scenario, batch_size: int) -> tuple[list[tuple[float, float]], float]:
    from sim.costs.compute import layer_times_s as roofline_layer_times_s
    from sim.costs.compute import optimizer_step_time_s
    from sim.strategy import DTYPE_BYTES

    workload = scenario.workload.with_batch_size(batch_size)
    precision = scenario.strategy.precision
    dtype_bytes = DTYPE_BYTES[precision]
    times = roofline_layer_times_s(workload, scenario.cluster.gpu, precision, dtype_bytes)
    optimizer_s = optimizer_step_time_s(workload.param_count, dtype_bytes, workload.optimizer, scenario.cluster.gpu)
    return times, optimizer_s


def compute_scale_factor(scenario: Scenario, calibration: dict[str, Any]) -> float:
    """k = (T_measured - t_optimizer) / (sum of modelled layer times), at the reference batch,
    with T_measured = batch / samples_per_s when given as a throughput."""
    batch = int(calibration.get("batch_size", scenario.workload.batch_size))
    if "single_gpu_iteration_time_s" in calibration:
        field = "calibration.single_gpu_iteration_time_s"
        figure = float(require_positive(field, calibration["single_gpu_iteration_time_s"], maximum=MAX_ITERATION_S,
                                        why="a day per iteration is a typo"))
        measured_s = figure
    else:
        field = "calibration.single_gpu_samples_per_s"
        figure = float(require_positive(field, calibration["single_gpu_samples_per_s"]))
        measured_s = batch / figure
    if figure == float("inf"):
        raise ConfigError(field, figure, "a positive finite number")
    _check_fed(scenario, batch, measured_s, field, figure)
    times, optimizer_s = _layer_and_optimizer_s(scenario, batch)
    layers_s = sum(f + b for f, b in times)
    if measured_s <= optimizer_s or layers_s <= 0:
        raise ConfigError(field, calibration[field.split(".")[1]],
                          f"an iteration longer than the modelled optimizer step ({optimizer_s:.3g} s)")
    return (measured_s - optimizer_s) / layers_s


def _check_fed(scenario: Scenario, batch: int, measured_s: float, field: str, figure: float) -> None:
    """A one-GPU figure is taken as the GPU's own time; with real data the host must be able to
    feed it (sim/costs/input_pipeline.py), else the figure contradicts the host and loader named."""
    from sim.simulate import node_data

    single = scenario.with_world_size(1)
    single = replace(single, workload=single.workload.with_batch_size(batch))
    data = node_data(single)
    if data is not None and data.time_s > measured_s * (1 + 1e-9):
        loader = scenario.strategy.data_loader or "the default loader"
        raise ConfigError(field, figure, f"at most what the input pipeline feeds one GPU: {loader} on "
                          f"{data.cores:g} cores prepares {batch / data.time_s:.4g} samples/s "
                          f"({batch} in {data.time_s:.4g} s; workload.data {scenario.workload.data})")


def apply_throughput_calibration(scenario: Scenario, calibration: dict[str, Any]) -> Scenario:
    """The scenario with every layer's time set to k x its roofline time at the point's batch
    (the optimizer step unchanged; the network model untouched)."""
    k = compute_scale_factor(scenario, calibration)
    times, _ = _layer_and_optimizer_s(scenario, scenario.workload.batch_size)
    layers = tuple(replace(layer, fwd_time_s=k * f, bwd_time_s=k * b)
                   for layer, (f, b) in zip(scenario.workload.layers, times, strict=False))
    return replace(scenario, workload=replace(scenario.workload, layers=layers))


def throughput_calibrated_scenario(spec: dict[str, Any], calibration: dict[str, Any] | None,
                                   catalog=None) -> Scenario:
    from sim.config import scenario_from_dict

    scenario = scenario_from_dict(spec, catalog)
    return apply_throughput_calibration(scenario, calibration) if calibration else scenario
