"""Calibrate compute from one measured single-GPU figure.

A config may say what one GPU really does for its workload:

```yaml
calibration:
  single_gpu_samples_per_s: 219     # or single_gpu_iteration_time_s: 0.146
  batch_size: 32                    # the batch the figure was measured at (default: each point's)
  source: "ChainerMN paper, P100, ResNet-50"
```

The roofline's layer times are then all multiplied by one factor k so that one GPU at the
reference batch takes exactly the measured time:

    T_measured = batch / samples_per_s            (if given as a throughput)
    k = (T_measured - t_optimizer) / sum_layers (t_fwd + t_bwd)    at the reference batch

and every point's layers run at k x their roofline times (``Layer.fwd_time_s``/``bwd_time_s``),
its optimizer step unchanged. The communication model is untouched, so calibration moves the
compute-to-communication ratio, which is what scaling efficiency depends on.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sim.catalog import Catalog
from sim.config import Scenario, scenario_from_dict
from sim.costs.compute import layer_times_s, optimizer_step_time_s
from sim.errors import ConfigError
from sim.strategy import DTYPE_BYTES


def _layer_and_optimizer_s(scenario: Scenario, batch_size: int) -> tuple[list[tuple[float, float]], float]:
    workload = scenario.workload.with_batch_size(batch_size)
    precision = scenario.strategy.precision
    dtype_bytes = DTYPE_BYTES[precision]
    times = layer_times_s(workload, scenario.cluster.gpu, precision, dtype_bytes)
    optimizer_s = optimizer_step_time_s(workload.param_count, dtype_bytes, workload.optimizer, scenario.cluster.gpu)
    return times, optimizer_s


def compute_scale_factor(scenario: Scenario, calibration: dict[str, Any]) -> float:
    """k = (T_measured - t_optimizer) / (sum of modelled layer times), at the reference batch."""
    batch = int(calibration.get("batch_size", scenario.workload.batch_size))
    if "single_gpu_iteration_time_s" in calibration:
        measured_s = float(calibration["single_gpu_iteration_time_s"])
        field = "calibration.single_gpu_iteration_time_s"
    else:
        measured_s = batch / float(calibration["single_gpu_samples_per_s"])
        field = "calibration.single_gpu_samples_per_s"
    times, optimizer_s = _layer_and_optimizer_s(scenario, batch)
    layers_s = sum(f + b for f, b in times)
    if measured_s <= optimizer_s or layers_s <= 0:
        raise ConfigError(field, calibration[field.split(".")[1]],
                          f"an iteration longer than the modelled optimizer step ({optimizer_s:.3g} s)")
    return (measured_s - optimizer_s) / layers_s


def apply_calibration(scenario: Scenario, calibration: dict[str, Any]) -> Scenario:
    """The scenario with every layer's time set to k x its roofline time at the point's batch."""
    k = compute_scale_factor(scenario, calibration)
    times, _ = _layer_and_optimizer_s(scenario, scenario.workload.batch_size)
    layers = tuple(replace(layer, fwd_time_s=k * f, bwd_time_s=k * b)
                   for layer, (f, b) in zip(scenario.workload.layers, times, strict=False))
    return replace(scenario, workload=replace(scenario.workload, layers=layers))


def calibrated_scenario(spec: dict[str, Any], calibration: dict[str, Any] | None,
                        catalog: Catalog | None = None) -> Scenario:
    scenario = scenario_from_dict(spec, catalog)
    return apply_calibration(scenario, calibration) if calibration else scenario
