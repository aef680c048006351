"""An experiment: a scenario (sim/config.py's keys) plus sweep axes, backend, repetitions.

```yaml
name: quickstart
workload: {model: resnet50, batch_size: 32}
cluster: {gpus_per_node: 4, gpu: v100, intra_link: nvlink2}
sweep:
  cluster.gpus: {geometric: {start: 1, stop: 64, factor: 2}}
  cluster.inter_link: [tcp_10gbe, ib_edr]
backend: sim            # sim | real | both
repetitions: 1
seed: 0
max_points: 10000
iterations: 200          # optional: each point is a multi-iteration run (sim.run.simulate_run)
plan: {objective: time, global_batch: 512}   # optional: each point is a plan (scalebench plan)
```

With ``iterations``, every simulated point runs ``simulate_run(scenario, iterations)``: stragglers
(``heterogeneity:``), failures (``faults:``) and asynchronous parameter servers only exist over
many iterations, and the row holds the run's metrics (samples/s, effective samples/s, staleness,
lost work, restarts) instead of one iteration's.

With ``plan``, every point is a search (``sim.planner``: the keys of ``scalebench plan``'s options,
``sim.planner.request.PLAN_KEYS``) over the point's workload and cluster, and its row is the winner's:
its layout, library and codec in the config columns, its simulated iteration in the metrics, and
the search's own columns (``plan_*``). The strategy section then holds only the fields a plan keeps
fixed (precision, ...). A sweep over clusters shows the best configuration of each.

Everything is validated on load, before anything runs: an unknown key, a wrong type, an empty
axis or more than ``max_points`` points is a one-line ``ConfigError`` naming the field.
"""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from sim.catalog import Catalog, builtin_catalog
from sim.config import SCENARIO_KEYS, read_yaml, resolve_path, resolve_paths, scenario_from_dict
from sim.errors import ConfigError, reject_unknown_keys, require_choice, require_positive

BACKENDS = ("sim", "real", "both")
DEFAULT_MAX_POINTS = 10_000
CASE_AXIS = "case"
"""A sweep axis of named cases, each setting several fields together (not a cartesian product)."""
EXPERIMENT_KEYS = (
    *SCENARIO_KEYS, "sweep", "backend", "repetitions", "seed", "max_points", "real", "calibration",
    "tolerance", "iterations", "plan",
)
REAL_CALL_KEYS = ("iterations", "warmup", "timeout_s", "link", "topology")
"""Keys of the ``real:`` section that are arguments of ``real.measure.measure_point``; the
section's other keys (strategy, compression, backend, threads, ...) are the harness' scenario
options and travel to it inside the point's spec as its ``real:`` section."""
REAL_DEFAULTS: dict[str, Any] = {"iterations": 20, "warmup": 3, "timeout_s": 60.0, "link": None, "topology": "shared"}
CALIBRATION_KEYS = ("single_gpu_iteration_time_s", "single_gpu_samples_per_s", "batch_size", "source")
SWEEPABLE_SECTIONS = ("name", "workload", "cluster", "strategy", "simulation", "catalog", "heterogeneity", "faults",
                      "variability")


@cache
def base_catalog() -> Catalog:
    """The built-in catalog, parsed once per process."""
    return builtin_catalog()


@dataclass(frozen=True)
class Point:
    """One resolved point of a sweep: a scenario spec to run and the axis values that chose it."""

    spec: dict[str, Any]
    """A complete scenario mapping (sim/config.py's keys) with every axis value applied."""
    axes: dict[str, Any]
    """Axis name -> value (for a case axis: the case's label)."""
    repetition: int
    source: str
    """'sim' or 'real'."""


@dataclass(frozen=True)
class Skipped:
    axes: dict[str, Any]
    reason: str


@dataclass(frozen=True)
class Experiment:
    name: str
    base: dict[str, Any]
    """The scenario keys of the config, before the sweep."""
    axes: dict[str, list[Any]]
    backend: str = "sim"
    repetitions: int = 1
    seed: int = 0
    max_points: int = DEFAULT_MAX_POINTS
    real: dict[str, Any] = field(default_factory=lambda: dict(REAL_DEFAULTS))
    """measure_point's keyword arguments."""
    real_spec: dict[str, Any] = field(default_factory=dict)
    """The harness' own options, put into a measured point's spec as ``real:``."""
    calibration: dict[str, Any] | None = None
    tolerance: dict[str, float] | None = None
    """Regression tolerances (only read by ``scalebench regress``)."""
    raw: dict[str, Any] = field(default_factory=dict)
    """The config as written (saved beside the results)."""
    iterations: int | None = None
    """Set: every simulated point is a run of this many iterations (sim.run.simulate_run)."""
    plan: dict[str, Any] | None = None
    """Set: every point is a plan search with these options (sim.planner), its row the winner's."""

    @property
    def gpu_axis(self) -> str | None:
        for name in ("cluster.gpus", "cluster.nodes"):
            if name in self.axes:
                return name
        return None

    @property
    def series_axes(self) -> list[str]:
        """Swept axes other than the GPU count: the series of the plots."""
        return [a for a in self.axes if a != self.gpu_axis]


# -- axes -----------------------------------------------------------------------------------

def expand_axis(name: str, spec: Any, max_values: int = DEFAULT_MAX_POINTS) -> list[Any]:
    """A list, or ``{geometric: {start, stop, factor}}``, or ``{range: {start, stop, step}}``;
    a range or geometric axis of more than ``max_values`` values is refused before it is built."""
    where = f"sweep.{name}"
    if isinstance(spec, list):
        values = list(spec)
    elif isinstance(spec, dict) and len(spec) == 1 and "geometric" in spec:
        values = _geometric(f"{where}.geometric", spec["geometric"], max_values)
    elif isinstance(spec, dict) and len(spec) == 1 and "range" in spec:
        values = _range(f"{where}.range", spec["range"], max_values)
    else:
        raise ConfigError(where, spec, "a list of values, {geometric: {start, stop, factor}} or {range: {start, stop, step}}")
    if not values:
        raise ConfigError(where, spec, "a non-empty axis (at least one value)")
    if name == CASE_AXIS:
        return [_case(f"{where}[{i}]", case) for i, case in enumerate(values)]
    _check_path(where, name)
    return values


def _too_many(where: str, count: float, max_values: int) -> None:
    if count > max_values:
        raise ConfigError(where, f"{count:,.0f} values", f"at most max_points={max_values:,} (raise max_points to allow more)")


def _geometric(where: str, spec: Any, max_values: int = DEFAULT_MAX_POINTS) -> list[Any]:
    if not isinstance(spec, dict):
        raise ConfigError(where, spec, "a mapping {start, stop, factor}")
    reject_unknown_keys(where, spec, ("start", "stop", "factor"))
    start = require_positive(f"{where}.start", spec.get("start"))
    stop = require_positive(f"{where}.stop", spec.get("stop"))
    factor = require_positive(f"{where}.factor", spec.get("factor", 2))
    if factor <= 1:
        raise ConfigError(f"{where}.factor", factor, "a number > 1")
    integer = all(isinstance(v, int) for v in (start, factor))
    _too_many(where, math.floor(math.log(stop / start) / math.log(factor) + 1e-9) + 1 if stop >= start else 0, max_values)
    values, value = [], start
    while value <= stop * (1 + 1e-12):
        values.append(int(round(value)) if integer else value)
        value *= factor
    return values


def _range(where: str, spec: Any, max_values: int = DEFAULT_MAX_POINTS) -> list[Any]:
    if not isinstance(spec, dict):
        raise ConfigError(where, spec, "a mapping {start, stop, step}")
    reject_unknown_keys(where, spec, ("start", "stop", "step"))
    start = require_positive(f"{where}.start", spec.get("start"), allow_zero=True)
    stop = require_positive(f"{where}.stop", spec.get("stop"), allow_zero=True)
    step = require_positive(f"{where}.step", spec.get("step", 1))
    count = int(math.floor((stop - start) / step + 1e-9)) + 1
    _too_many(where, count, max_values)
    return [start + i * step for i in range(max(0, count))]


def _check_path(where: str, path: str) -> None:
    parts = path.split(".")
    if parts[0] not in SWEEPABLE_SECTIONS or any(not p for p in parts):
        raise ConfigError(where, path, "a dotted field under " + ", ".join(SWEEPABLE_SECTIONS) + " (e.g. cluster.gpus)")


def _case(where: str, case: Any) -> dict[str, Any]:
    if not isinstance(case, dict) or not case:
        raise ConfigError(where, case, "a mapping of dotted fields to values, with an optional label")
    for key in case:
        if key != "label":
            _check_path(f"{where}.{key}", key)
    label = case.get("label", ", ".join(f"{k}={v}" for k, v in case.items()))
    return {**case, "label": str(label)}


def check_axes(axes: dict[str, list[Any]]) -> None:
    """Axes that would label rows wrongly (issue 29: the README's own example swept
    cluster.inter_link while its cases set it too; which won was not said, 18 points ran once and
    were labelled with the link they did not run on): a field set by two axes, or by an axis and a
    case, or twice inside a case (``cluster`` and ``cluster.gpus``); a value given twice on an axis;
    two cases with one label or with the same settings. Each is a ConfigError naming the later one."""
    setters: list[tuple[str, str, Any]] = []  # (dotted field, where it is set, the value there): axes, then cases
    for name, values in axes.items():
        if name == CASE_AXIS:
            labels: dict[str, int] = {}
            settings: dict[str, int] = {}
            for i, case in enumerate(values):
                where = f"sweep.{CASE_AXIS}[{i}]"
                if case["label"] in labels:
                    raise ConfigError(f"{where}.label", case["label"], f"a label no other case has (case "
                                      f"[{labels[case['label']]}] has it: one series would hold both cases' rows)")
                labels[case["label"]] = i
                same = _key({k: v for k, v in case.items() if k != "label"})
                if same in settings:
                    raise ConfigError(where, _short({k: v for k, v in case.items() if k != "label"}),
                                      f"settings no other case has (case [{settings[same]}] sets the same: the two "
                                      "labels would share one point)")
                settings[same] = i
                inside = [k for k in case if k != "label"]
                for n, key in enumerate(inside):
                    clash = next((o for o in inside[:n] if _overlap(o, key)), None)
                    if clash is not None:
                        raise ConfigError(f"{where}.{key}", case[key], f"a field not set again inside the case "
                                          f"({clash} covers it too)")
                setters += [(key, f"{where}.{key}", case[key]) for key in inside]
        else:
            seen: dict[str, int] = {}
            for i, value in enumerate(values):
                if _key(value) in seen:
                    raise ConfigError(f"sweep.{name}[{i}]", _short(value), f"each value once (it is also value "
                                      f"[{seen[_key(value)]}]: both would run as one point)")
                seen[_key(value)] = i
            setters.append((name, f"sweep.{name}", _short(values)))
    for j, (path, where, value) in enumerate(setters):
        for other_path, other_where, _ in setters[:j]:
            cases = where.startswith(f"sweep.{CASE_AXIS}[") and other_where.startswith(f"sweep.{CASE_AXIS}[")
            if _overlap(path, other_path) and not cases:  # every case sets its own fields: that is what cases are
                raise ConfigError(where, value, f"a field no other axis sets ({other_where} sets {other_path} too, "
                                  "and which would win is not said: sweep it in one place, as an axis or in the cases)")


def _overlap(a: str, b: str) -> bool:
    """One dotted field is the other or inside it (``cluster`` and ``cluster.gpus``)."""
    pa, pb = a.split("."), b.split(".")
    return pa[:len(pb)] == pb or pb[:len(pa)] == pa


def _key(value: Any) -> str:
    import json

    return json.dumps(value, sort_keys=True, default=str)


def set_dotted(spec: dict[str, Any], path: str, value: Any) -> None:
    """Set ``a.b.c`` in a nested mapping, creating sections; ``workload: resnet50`` becomes a mapping."""
    parts = path.split(".")
    node = spec
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if part == "workload" and i == 0 and isinstance(child, str):
            child = {"model": child}
        if child is None:
            child = {}
        if not isinstance(child, dict):  # `cluster: 5` would be dropped without a word
            raise ConfigError(".".join(parts[:i + 1]), _short(child), f"a mapping (the sweep sets {path} in it)")
        node[part] = child
        node = child
    node[parts[-1]] = copy.deepcopy(value)
    # cluster size is given by gpus or by nodes: the swept one replaces the other
    if path == "cluster.gpus":
        spec["cluster"].pop("nodes", None)
    elif path == "cluster.nodes":
        spec["cluster"].pop("gpus", None)


# -- loading --------------------------------------------------------------------------------

def experiment_from_dict(raw: Any, default_name: str = "experiment") -> Experiment:
    if not isinstance(raw, dict):
        raise ConfigError("config", "an empty file" if raw is None else type(raw).__name__,
                          "a YAML mapping (name, workload, cluster, strategy, sweep, ...)")
    unknown = sorted(set(raw) - set(EXPERIMENT_KEYS))
    if unknown:
        raise ConfigError(f"config.{unknown[0]}", _short(raw[unknown[0]]), "known keys: " + ", ".join(sorted(EXPERIMENT_KEYS)))
    name = raw.get("name", default_name)
    if (not isinstance(name, str) or not name or any(c in name for c in "/\\") or name.startswith(".")
            or any(c.isspace() or not c.isprintable() for c in name)):
        raise ConfigError("name", name, "a non-empty name without slashes, spaces, tabs, newlines or other control "
                          "characters (it names results/<name>/ and the plots' titles)")
    sweep = raw.get("sweep") or {}
    if not isinstance(sweep, dict):
        raise ConfigError("sweep", sweep, "a mapping of dotted field -> list or {geometric: ...}")
    max_points = require_positive("max_points", raw.get("max_points", DEFAULT_MAX_POINTS), integer=True)
    axes = {str(k): expand_axis(str(k), v, max_points) for k, v in sweep.items()}
    check_axes(axes)
    base = {k: copy.deepcopy(raw[k]) for k in SCENARIO_KEYS if k in raw}
    base["name"] = name
    experiment = Experiment(
        name=name,
        base=base,
        axes=axes,
        backend=require_choice("backend", raw.get("backend", "sim"), BACKENDS),
        repetitions=require_positive("repetitions", raw.get("repetitions", 1), integer=True),
        seed=require_positive("seed", raw.get("seed", 0), integer=True, allow_zero=True),
        max_points=max_points,
        real=_real_options(raw.get("real")),
        real_spec={k: v for k, v in (raw.get("real") or {}).items() if k not in REAL_CALL_KEYS},
        calibration=_calibration(raw.get("calibration")),
        tolerance=_tolerance(raw.get("tolerance")),
        raw=copy.deepcopy(raw),
        iterations=_iterations(raw.get("iterations"), raw.get("backend", "sim")),
        plan=_plan(raw),
    )
    total = count_points(experiment)
    if total > experiment.max_points:
        sizes = " x ".join(str(len(v)) for v in axes.values())
        raise ConfigError("sweep", f"{total} points ({sizes} x {experiment.repetitions} repetitions"
                          f"{' x 2 backends' if experiment.backend == 'both' else ''})",
                          f"at most max_points={experiment.max_points} (raise max_points to allow more)")
    return experiment


def _short(value: Any, limit: int = 60) -> Any:
    """A value short enough for a one-line error (long mappings and lists are abbreviated)."""
    text = repr(value)
    return value if len(text) <= limit else text[: limit - 3] + "..."


def load_experiment(path: str | Path) -> Experiment:
    """Read, resolve ``layers_file`` paths against the file's folder (in the base and in sweep
    values), validate."""
    raw = resolve_paths(read_yaml(path), Path(path).parent)
    sweep = raw.get("sweep") if isinstance(raw, dict) else None
    if isinstance(sweep, dict):
        key = "workload.layers_file"
        if isinstance(sweep.get(key), list):
            sweep[key] = [resolve_path(v, Path(path).parent) if isinstance(v, str) else v for v in sweep[key]]
        cases = sweep.get(CASE_AXIS)
        for case in cases if isinstance(cases, list) else []:
            if isinstance(case, dict) and isinstance(case.get(key), str):
                case[key] = resolve_path(case[key], Path(path).parent)
    return experiment_from_dict(raw, default_name=Path(path).stem)


def _real_options(spec: Any) -> dict[str, Any]:
    if spec is None:
        return dict(REAL_DEFAULTS)
    if not isinstance(spec, dict):
        raise ConfigError("real", _short(spec), "a mapping with keys " + ", ".join(REAL_CALL_KEYS) + " and the harness' options")
    out = {**REAL_DEFAULTS, **{k: v for k, v in spec.items() if k in REAL_CALL_KEYS}}
    require_positive("real.iterations", out["iterations"], integer=True)
    require_positive("real.warmup", out["warmup"], integer=True, allow_zero=True)
    require_positive("real.timeout_s", out["timeout_s"])
    for key in ("link", "topology"):
        if out[key] is not None and not isinstance(out[key], (str, dict)):
            raise ConfigError(f"real.{key}", out[key], "a name or a mapping")
    return out


def _calibration(spec: Any) -> dict[str, Any] | None:
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise ConfigError("calibration", spec, "a mapping with keys " + ", ".join(CALIBRATION_KEYS))
    reject_unknown_keys("calibration", spec, CALIBRATION_KEYS)
    given = [k for k in ("single_gpu_iteration_time_s", "single_gpu_samples_per_s") if k in spec]
    if len(given) != 1:
        raise ConfigError("calibration", sorted(spec), "exactly one of single_gpu_iteration_time_s, single_gpu_samples_per_s")
    require_positive(f"calibration.{given[0]}", spec[given[0]])
    if "batch_size" in spec:
        require_positive("calibration.batch_size", spec["batch_size"], integer=True)
    return dict(spec)


def _iterations(value: Any, backend: Any) -> int | None:
    if value is None:
        return None
    iterations = require_positive("iterations", value, integer=True)
    if backend != "sim":
        raise ConfigError("iterations", iterations, "only with backend: sim (multi-iteration runs are simulated)")
    return iterations


def _plan(raw: dict[str, Any]) -> dict[str, Any] | None:
    from sim.planner.request import PLAN_KEYS

    spec = raw.get("plan")
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise ConfigError("plan", _short(spec), "a mapping with keys " + ", ".join(PLAN_KEYS))
    reject_unknown_keys("plan", spec, PLAN_KEYS)
    for key in ("iterations", "calibration"):
        if raw.get(key) is not None:
            raise ConfigError(key, _short(raw[key]), "absent with plan: (a plan's points are single simulated iterations)")
    if raw.get("backend", "sim") != "sim":
        raise ConfigError("backend", raw["backend"], "sim with plan: (plans are searched in simulation)")
    return copy.deepcopy(spec)


def _tolerance(spec: Any) -> dict[str, float] | None:
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise ConfigError("tolerance", spec, "a mapping {efficiency_pp, iteration_time_pct}")
    reject_unknown_keys("tolerance", spec, ("efficiency_pp", "iteration_time_pct"))
    return {k: float(require_positive(f"tolerance.{k}", v)) for k, v in spec.items()}


# -- expansion ------------------------------------------------------------------------------

def count_points(experiment: Experiment) -> int:
    backends = 2 if experiment.backend == "both" else 1
    return math.prod(len(v) for v in experiment.axes.values()) * experiment.repetitions * backends


def _combination_spec(experiment: Experiment, combo: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    spec = copy.deepcopy(experiment.base)
    labels = {}
    for axis, value in combo.items():
        if axis == CASE_AXIS:
            for key, v in value.items():
                if key != "label":
                    set_dotted(spec, key, v)
            labels[axis] = value["label"]
        else:
            set_dotted(spec, axis, value)
            labels[axis] = value
    return spec, labels


def _is_combination_error(err: ConfigError, axes: dict[str, list[Any]]) -> bool:
    """An error in a section some axis touches depends on the combination; others are config errors."""
    touched = set()
    for axis, values in axes.items():
        keys = [k for v in values for k in v if k != "label"] if axis == CASE_AXIS else [axis]
        touched |= {k.split(".")[0] for k in keys}
    # the error's field and the fields it depends on (ConfigError.related: the detailed fidelity's
    # limits name the collective, the memory check every section)
    return any(f.split(".")[0].split("[")[0] in touched for f in err.fields)


def expand(experiment: Experiment, catalog: Catalog | None = None) -> tuple[list[Point], list[Skipped]]:
    """Every valid point of the sweep (cartesian product x repetitions x backends), and the
    invalid combinations with the reason each was left out. A config error that no axis
    causes, or one that leaves no valid point, is raised."""
    catalog = catalog or base_catalog()
    names = list(experiment.axes)
    points: list[Point] = []
    skipped: list[Skipped] = []
    first_error: ConfigError | None = None
    sources = {"sim": ("sim",), "real": ("real",), "both": ("sim", "real")}[experiment.backend]
    for values in itertools.product(*(experiment.axes[n] for n in names)):
        spec, labels = _combination_spec(experiment, dict(zip(names, values, strict=False)))
        try:
            if experiment.plan is not None:
                from sim.planner import plan_request_from_dict

                plan_request_from_dict({**spec, "plan": experiment.plan}, catalog)
            else:
                scenario = scenario_from_dict(spec, catalog)
                if experiment.iterations is not None:
                    from sim.run import check_run_size

                    check_run_size(experiment.iterations, scenario.cluster.world_size)
                elif "sim" in sources:
                    from sim.simulate import check_one_iteration

                    check_one_iteration(scenario)
            if experiment.calibration:
                from sim.calibration import throughput_calibrated_scenario as calibrated_scenario

                calibrated_scenario(spec, experiment.calibration, catalog)
        except ConfigError as err:
            if not _is_combination_error(err, experiment.axes):
                raise
            first_error = first_error or err
            skipped.append(Skipped(labels, str(err)))
            continue
        for rep in range(experiment.repetitions):
            rep_spec = copy.deepcopy(spec)
            rep_spec["simulation"] = dict(rep_spec.get("simulation") or {})
            rep_spec["simulation"]["seed"] = experiment.seed + rep
            for source in sources:
                if source == "real" and experiment.real_spec:
                    points.append(Point({**rep_spec, "real": copy.deepcopy(experiment.real_spec)}, labels, rep, source))
                else:
                    points.append(Point(rep_spec, labels, rep, source))
    if not points and first_error is not None:
        raise first_error
    return points, skipped
