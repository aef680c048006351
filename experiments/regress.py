"""The CI regression check of scaling efficiency and iteration time.

A suite file (experiments/regress.yaml) lists experiment configs under ``scenarios:``; each is
simulated in this process and every point is compared, by point id, with the baseline row in
``experiments/baselines/<scenario>.csv`` (package data). A point fails when its efficiency moved by more than
``efficiency_pp`` percentage points or its iteration time by more than ``iteration_time_pct``
percent (defaults at the top of the suite, overridable per scenario with ``tolerance:``). A point
with no baseline, or a baseline point the suite no longer produces, also fails: baselines are
rewritten only on purpose, with ``--update``.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.config import expand, experiment_from_dict
from experiments.points import axis_columns, point_id, run_sim_payload
from sim.config import read_yaml
from sim.errors import ConfigError, reject_unknown_keys, require_positive
from sim.fileio import atomic_write

DEFAULT_TOLERANCE = {"efficiency_pp": 1.0, "iteration_time_pct": 5.0}
BASELINE_COLUMNS = ("point_id", "label", "world_size", "scaling_efficiency", "iteration_time_s")


@dataclass(frozen=True)
class Check:
    scenario: str
    point_id: str
    label: str
    baseline_efficiency: float | None
    efficiency: float | None
    baseline_time_s: float | None
    time_s: float | None
    status: str
    """OK, FAIL (moved beyond tolerance), NEW (no baseline) or GONE (baseline point not produced)."""

    @property
    def failed(self) -> bool:
        return self.status != "OK"


def load_suite(path: str | Path) -> tuple[dict[str, float], list[dict[str, Any]]]:
    raw = read_yaml(path, what="suite")
    if not isinstance(raw, dict):
        raise ConfigError(str(path), type(raw).__name__, "a mapping with keys tolerance, scenarios")
    reject_unknown_keys(str(path), raw, ("tolerance", "scenarios"))
    tolerance = dict(DEFAULT_TOLERANCE)
    for key, value in (raw.get("tolerance") or {}).items():
        if key not in DEFAULT_TOLERANCE:
            raise ConfigError(f"tolerance.{key}", value, "known keys: " + ", ".join(DEFAULT_TOLERANCE))
        tolerance[key] = float(require_positive(f"tolerance.{key}", value))
    scenarios = raw.get("scenarios")
    if not isinstance(scenarios, list) or not scenarios:
        raise ConfigError("scenarios", scenarios, "a non-empty list of experiment configs")
    for i, entry in enumerate(scenarios):
        if not isinstance(entry, dict):
            raise ConfigError(f"scenarios[{i}]", entry, "an experiment config (a mapping: name, workload, cluster, sweep, ...)")
    return tolerance, scenarios


def simulate_scenario(raw: dict[str, Any]) -> tuple[str, dict[str, float], list[dict[str, Any]]]:
    """(name, tolerance overrides, rows) for one suite entry, simulated in this process."""
    experiment = experiment_from_dict(raw)
    if experiment.backend != "sim":
        raise ConfigError(f"scenarios.{experiment.name}.backend", experiment.backend, "sim (the regression suite is simulated)")
    points, _ = expand(experiment)
    rows = []
    for point in points:
        pid = point_id(point, experiment)
        metrics = run_sim_payload({"spec": point.spec, "calibration": experiment.calibration})
        label = " ".join(f"{k.split('.')[-1]}={v}" for k, v in axis_columns(point.axes).items()) or experiment.name
        rows.append({"point_id": pid, "label": label, "world_size": metrics["world_size"],
                     "scaling_efficiency": metrics["scaling_efficiency"], "iteration_time_s": metrics["iteration_time_s"]})
    return experiment.name, experiment.tolerance or {}, rows


def read_baseline(path: Path) -> dict[str, dict[str, Any]]:
    """point_id -> row of a baseline CSV; an unreadable file, a missing column or a value that is
    not a finite number (a time that is not > 0) is a ConfigError naming the file and row."""
    if not path.exists():
        return {}
    from sim.fileio import read_input_text

    text = read_input_text(str(path), path, what="a baseline CSV (`scalebench regress --update` rewrites it)")
    try:
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
    except (ValueError, csv.Error) as err:
        raise ConfigError(str(path), "unreadable", f"a baseline CSV ({type(err).__name__}); "
                          "`scalebench regress --update` rewrites it") from None
    out = {}
    for i, r in enumerate(rows, start=2):  # line 1 is the header
        for key in ("point_id", "scaling_efficiency", "iteration_time_s"):
            if not r.get(key):
                raise ConfigError(f"{path} line {i}", f"no {key}", "columns " + ", ".join(BASELINE_COLUMNS)
                                  + " (`scalebench regress --update` rewrites it)")
        for key in ("scaling_efficiency", "iteration_time_s"):
            try:
                value = float(r[key])
            except ValueError:
                value = float("nan")
            require_positive(f"{path} line {i} {key}", value, allow_zero=key == "scaling_efficiency")
        out[r["point_id"]] = r
    return out


def write_baseline(path: Path, rows: list[dict[str, Any]]) -> None:
    def write(fh):
        writer = csv.DictWriter(fh, fieldnames=list(BASELINE_COLUMNS), lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: (repr(v) if isinstance(v, float) else v) for k, v in r.items()} for r in rows)

    atomic_write(path, write)


def compare(name: str, rows: list[dict[str, Any]], baseline: dict[str, dict[str, Any]],
            tolerance: dict[str, float]) -> list[Check]:
    checks = []
    for r in rows:
        b = baseline.get(r["point_id"])
        if b is None:
            checks.append(Check(name, r["point_id"], r["label"], None, r["scaling_efficiency"], None,
                                r["iteration_time_s"], "NEW"))
            continue
        b_eff, b_time = float(b["scaling_efficiency"]), float(b["iteration_time_s"])
        eff_moved = abs(r["scaling_efficiency"] - b_eff) * 100 > tolerance["efficiency_pp"]
        time_moved = abs(r["iteration_time_s"] / b_time - 1) * 100 > tolerance["iteration_time_pct"]
        checks.append(Check(name, r["point_id"], r["label"], b_eff, r["scaling_efficiency"], b_time,
                            r["iteration_time_s"], "FAIL" if eff_moved or time_moved else "OK"))
    produced = {r["point_id"] for r in rows}
    for pid, b in baseline.items():
        if pid not in produced:
            checks.append(Check(name, pid, b.get("label", ""), float(b["scaling_efficiency"]), None,
                                float(b["iteration_time_s"]), None, "GONE"))
    return checks


def check_baselines_dir(path: Path, names: list[str]) -> None:
    """Baselines to compare with: a directory holding at least one of the suite's ``<name>.csv``
    (issue 29: a missing directory, a file or an empty directory gave exit 1 and nothing on stderr,
    every point NEW). A scenario whose file is missing while others are there is NEW: a new scenario."""
    wanted = ", ".join(f"{n}.csv" for n in names if n)
    if not path.exists():
        raise ConfigError("--baselines", str(path), f"a directory of baselines ({wanted}); it does not exist "
                          "(`scalebench regress --update --baselines DIR` writes them)")
    if not path.is_dir():
        raise ConfigError("--baselines", str(path), f"a directory of baselines ({wanted}), not a file")
    if not any((path / f"{n}.csv").is_file() for n in names if n):
        raise ConfigError("--baselines", str(path), f"a directory holding the suite's baselines ({wanted}); it has "
                          "none of them (`scalebench regress --update --baselines DIR` writes them)")


def run_suite(suite: str | Path, baselines_dir: str | Path, update: bool = False) -> list[Check]:
    """Simulate the suite; compare with (or, with ``update``, rewrite) the baselines."""
    tolerance, scenarios = load_suite(suite)
    baselines_dir = Path(baselines_dir)
    if not update:
        check_baselines_dir(baselines_dir, [str(raw.get("name", "")) for raw in scenarios])
    checks: list[Check] = []
    for raw in scenarios:
        name, override, rows = simulate_scenario(raw)
        path = baselines_dir / f"{name}.csv"
        if update:
            write_baseline(path, rows)
        checks += compare(name, rows, read_baseline(path), {**tolerance, **override})
    return checks


def format_checks(checks: list[Check]) -> str:
    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.2f}"

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{1e3 * v:.3f}"

    def delta(a: float | None, b: float | None, scale: float) -> str:
        return "-" if a is None or b is None else f"{scale * (b - a):+.2f}"

    header = (f"{'status':<6} {'scenario':<24} {'point':<52} {'eff. base %':>11} {'eff. now %':>10} {'Δ pp':>7} "
              f"{'iter. base ms':>13} {'iter. now ms':>12} {'Δ %':>7}")
    lines = [header]
    for c in checks:
        rel = "-" if c.baseline_time_s is None or c.time_s is None else f"{100 * (c.time_s / c.baseline_time_s - 1):+.2f}"
        lines.append(f"{c.status:<6} {c.scenario:<24} {c.label[:52]:<52} {pct(c.baseline_efficiency):>11} "
                     f"{pct(c.efficiency):>10} {delta(c.baseline_efficiency, c.efficiency, 100):>7} "
                     f"{ms(c.baseline_time_s):>13} {ms(c.time_s):>12} {rel:>7}")
    return "\n".join(lines)
