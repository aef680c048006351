"""Running one point: a resolved scenario spec -> one result row (simulated or measured).

The functions here are module-level and take plain data, so worker processes (or Dask / Ray
workers) can run them. The row has the same columns whichever backend produced it, plus
``source``.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from experiments.config import Experiment, Point, base_catalog
from sim.errors import ConfigError

POINT_ID_CHARS = 16


@dataclass(frozen=True)
class PointFailed:
    """A point whose computation raised something other than a refusal of its input (a defect of
    the simulator or of the harness, a measured run that failed): its reason on one line. The
    runner records it in meta.json's ``failed`` and goes on with the sweep; the next run tries it
    again (no point file is written)."""

    reason: str

    @classmethod
    def of(cls, err: BaseException) -> PointFailed:
        text = " ".join(str(err).split()) or "(no message)"
        return cls(f"{type(err).__name__}: {text}"[:300])


def point_id(point: Point, experiment: Experiment) -> str:
    """Stable hash of everything that determines the point's result (not its axis labels)."""
    key = {"spec": point.spec, "source": point.source, "calibration": experiment.calibration}
    if experiment.plan is not None:
        key["plan"] = experiment.plan
    if experiment.iterations is not None and point.source == "sim":
        key["iterations"] = experiment.iterations
    if point.source == "real":
        key["real"] = experiment.real
    table = layers_file_digest(point.spec)
    if table:
        key["layers_file_sha256"] = table
    text = json.dumps(key, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:POINT_ID_CHARS]


def layers_file_digest(spec: dict[str, Any]) -> str | None:
    """The SHA-256 of the point's ``workload.layers_file``: a re-derived table is a new point."""
    workload = spec.get("workload")
    path = workload.get("layers_file") if isinstance(workload, dict) else None
    if not isinstance(path, str):
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None  # scenario validation names the unreadable file


def axis_columns(axes: dict[str, Any]) -> dict[str, Any]:
    """Axis values as columns named after the axis (``cluster.inter_link``, ``case``)."""
    return {name: (json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v) for name, v in axes.items()}


def simulate_spec(spec: dict[str, Any], calibration: dict[str, Any] | None):
    """(scenario, IterationResult) for a resolved spec, calibrated if asked."""
    from sim.calibration import throughput_calibrated_scenario as calibrated_scenario
    from sim.simulate import simulate

    scenario = calibrated_scenario(spec, calibration, base_catalog())
    return scenario, simulate(scenario)


def run_sim_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """Worker entry: ``{spec, calibration[, iterations]}`` -> the config and metric columns of one
    row: one iteration's (``simulate``), or with ``iterations`` a run's (``simulate_run``)."""
    from sim.config import scenario_columns

    if payload.get("plan") is not None:
        from experiments.plan_points import plan_columns

        return plan_columns(payload["spec"], payload["plan"])
    if payload.get("iterations"):
        return run_columns(payload["spec"], payload["calibration"], payload["iterations"])
    scenario, result = simulate_spec(payload["spec"], payload["calibration"])
    return {**scenario_columns(scenario), **result.metrics()}


def staleness_quantile(histogram: tuple[int, ...], q: float) -> float:
    """The ``q`` quantile (lower) of applied updates' staleness, from its histogram (0 if empty)."""
    total = sum(histogram)
    if not total:
        return 0.0
    seen = 0
    for staleness, count in enumerate(histogram):
        seen += count
        if seen >= q * total:
            return float(staleness)
    return float(len(histogram) - 1)


def run_columns(spec: dict[str, Any], calibration: dict[str, Any] | None, iterations: int) -> dict[str, Any]:
    """A multi-iteration run's row: config columns, the heterogeneity and fault settings, and
    RunResult's metrics with staleness quantiles and the mean time per iteration."""
    from sim.calibration import throughput_calibrated_scenario as calibrated_scenario
    from sim.config import scenario_columns
    from sim.run import simulate_run

    scenario = calibrated_scenario(spec, calibration, base_catalog())
    result = simulate_run(scenario, iterations)
    het, faults = scenario.heterogeneity, scenario.faults
    return {
        **scenario_columns(scenario),
        "jitter_cv": het.jitter_cv, "slow_nodes": het.slow_nodes, "slow_factor": het.slow_factor,
        "fail_rank": -1 if faults.fail_rank is None else faults.fail_rank,
        **result.metrics(),
        "world_size": scenario.cluster.world_size,
        "time_per_iteration_s": result.wall_time_s / iterations,
        "staleness_p50": staleness_quantile(result.staleness_histogram, 0.5),
        "staleness_p95": staleness_quantile(result.staleness_histogram, 0.95),
    }


PointOutcome = dict[str, Any] | ConfigError | PointFailed
"""A point's columns, the refusal of its input (skipped), or the reason it failed."""


def run_sim_chunk(payloads: list[dict[str, Any]]) -> list[tuple[str, PointOutcome]]:
    """Several points in one task (fewer round trips to the worker): [(point_id, columns)], or
    (point_id, the ConfigError) for a point the simulator refuses, or (point_id, PointFailed) for
    one that raised anything else, so one such point costs itself and not the sweep (the runner
    reports the first as skipped, the second as failed)."""
    out: list[tuple[str, PointOutcome]] = []
    for p in payloads:
        try:
            out.append((p["point_id"], run_sim_payload(p)))
        except ConfigError as err:
            out.append((p["point_id"], err))
        except Exception as err:  # noqa: BLE001 - a defect costs its point; the reason is kept and shown
            out.append((p["point_id"], PointFailed.of(err)))
    return out


def load_measure():
    """``real.measure.measure_point``, or a one-line ConfigError saying what is missing."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ConfigError("backend", "real", "sim only: torch is not installed (pip install -e '.[real]')") from None
    try:
        from real.measure import measure_point
    except ImportError as err:
        raise ConfigError("backend", "real", f"sim only: real.measure.measure_point is not available ({err})") from None
    return measure_point


def check_real_specs(specs: list[dict[str, Any]], options: dict[str, Any] | None = None) -> None:
    """Validate the harness' options of every measured point, and measure_point's arguments
    (the config's ``real:`` iterations, warmup, timeout_s, link, topology), before any runs (if
    the harness exposes its checkers, ``real.config.real_scenario`` and ``real.measure.check_run_options``)."""
    try:
        from real.config import real_scenario
        from real.measure import check_run_options
    except ImportError:
        return
    if options is not None:
        check_run_options(**{k: options[k] for k in ("iterations", "warmup", "timeout_s", "link", "topology")},
                          where="real.")
    for spec in specs:
        real_scenario(spec)


def run_real_point(spec: dict[str, Any], options: dict[str, Any], measure) -> dict[str, Any]:
    """Measure one point with the torch harness; its metric columns, config columns from sim."""
    from sim.config import scenario_columns, scenario_from_dict

    scenario = scenario_from_dict(spec, base_catalog(), extra_keys=("real",))
    measured = measure(spec, iterations=options["iterations"], warmup=options["warmup"],
                       timeout_s=options["timeout_s"], link=options["link"], topology=options["topology"])
    if not isinstance(measured, dict) or "iteration_time_s" not in measured:
        raise ConfigError("backend", "real", "a measure_point that returns a mapping with iteration_time_s")
    return {**scenario_columns(scenario), **measured}


@cache
def git_revision() -> str:
    """The checkout's commit (short); $SCALEBENCH_GIT_REVISION when set (a run from an exported
    tree, e.g. branches combined before a merge); 'unknown' outside a git checkout."""
    import os

    if os.environ.get("SCALEBENCH_GIT_REVISION"):
        return os.environ["SCALEBENCH_GIT_REVISION"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def provenance() -> dict[str, str]:
    from sim import __version__

    return {"scalebench_version": __version__, "git_revision": git_revision()}
