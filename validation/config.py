"""The validation sweep, declared in YAML (experiments/validation.yaml), checked and expanded.

A config has thresholds, how to measure, how to calibrate, which held-out collective sizes
validate the network model alone, and ``sweeps``: blocks whose axes (a value or a list) are
crossed; every block starts from ``defaults``. Combinations that cannot run are dropped in
code (a link on one rank, a codec without overlap); each point has a stable id.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.config import read_yaml
from sim.errors import ConfigError, reject_unknown_keys, require_choice, require_positive
from sim.units import parse_bytes

CONFIG_KEYS = ("name", "description", "out", "threshold", "measure", "calibration", "network",
               "batch_sizes", "defaults", "sweeps")
THRESHOLD_KEYS = ("mape_percent", "worst_percent", "min_points", "why")
MEASURE_KEYS = ("iterations", "warmup", "timeout_s", "min_time_s", "max_iterations", "rounds", "step_profiles",
                "busy_percent", "max_spread_percent", "max_rounds")
CALIBRATION_KEYS = ("dir", "models", "colocated", "ranks", "links", "max_bytes", "iterations", "step_rounds",
                    "comm_rounds",
                    "codec_ranks",
                    "codec_op_ranks",
                    "framework_ranks", "pipeline_ranks", "pipeline_micro_batch", "stall_ranks",
                    "stall_bursts_ms")
NETWORK_KEYS = ("ranks", "links", "collectives", "min_bytes", "max_bytes", "iterations")
AXES = ("model", "ranks", "link", "strategy", "overlap", "bucket_mib", "codec", "microbatches")
SWEEP_KEYS = ("name", *AXES)

MODELS = ("mlp", "small_cnn", "small_transformer")
STRATEGIES = ("ddp", "ps_sync", "pipeline")
LINKS = ("loopback", "10gbit", "1gbit", "100mbit")
CODECS = ("fp32", "fp16", "bf16", "fp8")
NETWORK_COLLECTIVES = ("allreduce", "allgather", "sendrecv")
DEFAULT_BATCH = {"mlp": 64, "small_cnn": 32, "small_transformer": 8}
"""The batches `scalebench calibrate` profiles (real/calibrate.py): layer times are then measured,
not scaled."""
DEFAULTS = {"strategy": "ddp", "link": "loopback", "overlap": True, "bucket_mib": 25.0, "codec": "fp32",
            "microbatches": 4}


@dataclass(frozen=True, kw_only=True)
class Point:
    group: str
    model: str
    batch_size: int
    ranks: int
    link: str
    strategy: str
    overlap: bool
    bucket_mib: float
    codec: str
    microbatches: int

    @property
    def id(self) -> str:
        """Stable and readable: every axis in a fixed order."""
        parts = [self.strategy, self.model, f"n{self.ranks}", self.link, self.codec]
        if self.strategy == "ddp":
            parts += ["ov" if self.overlap else "noov", f"b{self.bucket_mib:g}"]
        if self.strategy == "pipeline":
            parts.append(f"m{self.microbatches}")
        return "-".join(parts)

    def columns(self) -> dict[str, Any]:
        return {"point": self.id, "sweep": self.group, "model": self.model, "batch_size": self.batch_size,
                "ranks": self.ranks, "link": self.link, "strategy": self.strategy, "overlap": self.overlap,
                "bucket_mib": self.bucket_mib, "codec": self.codec, "microbatches": self.microbatches}


@dataclass(frozen=True, kw_only=True)
class ValidationConfig:
    name: str
    path: Path
    out: Path
    mape_percent: float
    worst_percent: float | None
    min_points: int
    iterations: int
    warmup: int
    timeout_s: float
    min_time_s: float = 0.0
    """Each timed phase of a point runs at least this long (real/timing.py), up to max_iterations."""
    max_iterations: int = 0
    rounds: int = 1
    """Each point is measured in this many separate launches, all points of a round before the
    next round (minutes apart); the launch with the median iteration time is compared."""
    step_profiles: bool = False
    """Profile the whole compute-only step (the calibration's ``steps``) once more just before
    each round, and predict with the median of those launches: the points' rounds and the step
    they are predicted from then sample the same hour of a machine whose speed drifts."""
    busy_percent: float = 10.0
    """A launch during which other processes used more of the machine's CPU is disturbed: it is
    launched again (once), and a point without ``rounds`` undisturbed launches is not judged
    (validation/noise.py)."""
    max_spread_percent: float = 25.0
    """A point whose ``rounds`` best-agreeing undisturbed launches spread more is not judged."""
    max_rounds: int = 0
    """Launches a point not judged may get in all (re-measured after the rounds); 0: rounds + 2."""
    calibration: dict[str, Any]
    network: dict[str, Any]
    points: tuple[Point, ...]
    skipped: tuple[tuple[str, str], ...] = field(default=())
    """(description, reason) of combinations dropped while expanding."""

    @property
    def launch_budget(self) -> int:
        """Launches a point may get in all: ``max_rounds``, or ``rounds`` + 2 when unset."""
        return max(self.rounds, self.max_rounds or self.rounds + 2)


def _section(spec: dict[str, Any], key: str, keys: tuple[str, ...]) -> dict[str, Any]:
    value = spec.get(key) or {}
    if not isinstance(value, dict):
        raise ConfigError(key, value, "a mapping with keys " + ", ".join(keys))
    reject_unknown_keys(key, value, keys)
    return value


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _check_axis(where: str, axis: str, value: Any) -> Any:
    if axis == "model":
        return require_choice(where, value, MODELS)
    if axis == "ranks":
        return require_positive(where, value, integer=True)
    if axis == "link":
        return require_choice(where, value, LINKS)
    if axis == "strategy":
        return require_choice(where, value, STRATEGIES)
    if axis == "overlap":
        if not isinstance(value, bool):
            raise ConfigError(where, value, "true or false")
        return value
    if axis == "bucket_mib":
        return float(require_positive(where, value))
    if axis == "codec":
        return require_choice(where, value, CODECS)
    return require_positive(where, value, integer=True)


def _drop_reason(p: dict[str, Any]) -> str | None:
    if p["ranks"] == 1 and p["link"] != "loopback":
        return "one rank sends nothing: the link does not matter"
    if p["strategy"] != "ddp" and p["ranks"] < 2:
        return f"{p['strategy']} needs at least 2 ranks"
    if p["codec"] != "fp32" and (p["strategy"] != "ddp" or not p["overlap"]):
        return "codecs run as DDP communication hooks (overlap on) only"
    if p["strategy"] == "pipeline" and p["batch_size"] % p["microbatches"]:
        return "micro-batches must divide the batch"
    return None


def expand_sweeps(sweeps: Any, defaults: dict[str, Any], batches: dict[str, int]) -> tuple[list[Point], list[tuple[str, str]]]:
    if not isinstance(sweeps, list) or not sweeps:
        raise ConfigError("sweeps", sweeps, "a non-empty list of sweep blocks (mappings of axes)")
    points: dict[str, Point] = {}
    dropped: list[tuple[str, str]] = []
    for i, block in enumerate(sweeps):
        where = f"sweeps[{i}]"
        if not isinstance(block, dict):
            raise ConfigError(where, block, "a mapping with keys " + ", ".join(SWEEP_KEYS))
        reject_unknown_keys(where, block, SWEEP_KEYS)
        name = str(block.get("name", f"sweep{i}"))
        for a in AXES:
            if a not in block and a not in defaults:
                raise ConfigError(f"{where}.{a}", None, "a value or a list (no default for this axis)")
        axes = {a: [_check_axis(f"{where}.{a}", a, v) for v in _as_list(block[a] if a in block else defaults[a])] for a in AXES}
        for a, values in axes.items():
            if not values:
                raise ConfigError(f"{where}.{a}", [], "at least one value")
        for combo in itertools.product(*(axes[a] for a in AXES)):
            p = dict(zip(AXES, combo, strict=True))
            p["batch_size"] = batches[p["model"]]
            reason = _drop_reason(p)
            if reason:
                dropped.append((f"{name}: " + ", ".join(f"{k}={v}" for k, v in p.items()), reason))
                continue
            point = Point(group=name, **p)
            points.setdefault(point.id, point)
    return list(points.values()), dropped


RANK_LISTS = {"colocated": 1, "ranks": 2, "codec_ranks": 1, "codec_op_ranks": 1, "framework_ranks": 1,
              "pipeline_ranks": 2}
"""calibration lists of rank counts, and the fewest ranks each entry takes (collectives need 2)."""


def _path(field_name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(field_name, value, "a directory path")
    return value


def _check_counts(calibration: dict[str, Any], network: dict[str, Any]) -> None:
    """Rank counts, models and message sizes of the calibration and network sections."""
    from real.bench_comm import MAX_COMM_BYTES

    for key, least in RANK_LISTS.items():
        for i, v in enumerate(_as_list(calibration.get(key, []))):
            if require_positive(f"calibration.{key}[{i}]", v, integer=True) < least:
                raise ConfigError(f"calibration.{key}[{i}]", v, f"at least {least} ranks")
    for i, v in enumerate(_as_list(network.get("ranks", []))):
        if require_positive(f"network.ranks[{i}]", v, integer=True) < 2:
            raise ConfigError(f"network.ranks[{i}]", v, "at least 2 ranks (a collective)")
    for i, m in enumerate(_as_list(calibration.get("models", []))):
        require_choice(f"calibration.models[{i}]", m, MODELS)
    for section, where in ((calibration, "calibration"), (network, "network")):
        for key in ("max_bytes", "min_bytes"):
            if key in section:
                require_positive(f"{where}.{key}", section[key], integer=True, maximum=MAX_COMM_BYTES, why="per rank")
    if not isinstance(calibration.get("dir", ""), str):
        raise ConfigError("calibration.dir", calibration["dir"], "a directory path")


def load_validation_config(path: str | Path) -> ValidationConfig:
    path = Path(path)
    spec = read_yaml(path, what="--config")
    if not isinstance(spec, dict):
        raise ConfigError(str(path), "an empty file" if spec is None else type(spec).__name__, "a YAML mapping with keys " + ", ".join(CONFIG_KEYS))
    reject_unknown_keys(str(path), spec, CONFIG_KEYS)
    threshold = _section(spec, "threshold", THRESHOLD_KEYS)
    if "mape_percent" not in threshold:
        raise ConfigError("threshold.mape_percent", None, "a positive number (the MAPE above which validate fails)")
    mape = float(require_positive("threshold.mape_percent", threshold["mape_percent"]))
    worst = threshold.get("worst_percent")
    worst = None if worst is None else float(require_positive("threshold.worst_percent", worst))
    measure = _section(spec, "measure", MEASURE_KEYS)
    step_profiles = measure.get("step_profiles", False)
    if not isinstance(step_profiles, bool):
        raise ConfigError("measure.step_profiles", step_profiles, "true or false")
    calibration = _section(spec, "calibration", CALIBRATION_KEYS)
    network = _section(spec, "network", NETWORK_KEYS)
    for section, where in ((calibration, "calibration"), (network, "network")):
        for key in ("min_bytes", "max_bytes"):
            if key in section:  # 4M, 1G or a number: sim.units.parse_bytes, the one size parser
                section[key] = parse_bytes(f"{where}.{key}", section[key])
    for key in ("step_rounds", "comm_rounds", "iterations"):
        if key in calibration:
            require_positive(f"calibration.{key}", calibration[key], integer=True)
    if "iterations" in network:
        require_positive("network.iterations", network["iterations"], integer=True)
    _check_counts(calibration, network)
    for key, integer in (("stall_ranks", True), ("stall_bursts_ms", False)):
        for i, v in enumerate(_as_list(calibration.get(key, []))):
            require_positive(f"calibration.{key}[{i}]", v, integer=integer)
    for link in _as_list(calibration.get("links", ["loopback"])) + _as_list(network.get("links", [])):
        require_choice("calibration.links/network.links", link, LINKS)
    for c in _as_list(network.get("collectives", [])):
        require_choice("network.collectives", c, NETWORK_COLLECTIVES)
    defaults = _section(spec, "defaults", AXES)
    defaults = {**DEFAULTS, **{k: _check_axis(f"defaults.{k}", k, v) for k, v in defaults.items()}}
    batches = spec.get("batch_sizes") or {}
    if not isinstance(batches, dict):
        raise ConfigError("batch_sizes", batches, "a mapping model -> batch size")
    reject_unknown_keys("batch_sizes", batches, MODELS)
    batches = {**DEFAULT_BATCH, **{m: require_positive(f"batch_sizes.{m}", b, integer=True) for m, b in batches.items()}}
    points, dropped = expand_sweeps(spec.get("sweeps"), defaults, batches)
    return ValidationConfig(
        name=str(spec.get("name", path.stem)),
        path=path,
        out=Path(_path("out", spec.get("out", "results/validation"))),
        mape_percent=mape,
        worst_percent=worst,
        min_points=require_positive("threshold.min_points", threshold.get("min_points", 1), integer=True),
        iterations=require_positive("measure.iterations", measure.get("iterations", 10), integer=True),
        warmup=require_positive("measure.warmup", measure.get("warmup", 3), integer=True, allow_zero=True),
        timeout_s=float(require_positive("measure.timeout_s", measure.get("timeout_s", 120))),
        min_time_s=float(require_positive("measure.min_time_s", measure.get("min_time_s", 0), allow_zero=True)),
        max_iterations=require_positive("measure.max_iterations", measure.get("max_iterations", 0), integer=True,
                                        allow_zero=True),
        rounds=require_positive("measure.rounds", measure.get("rounds", 1), integer=True),
        step_profiles=step_profiles,
        busy_percent=float(require_positive("measure.busy_percent", measure.get("busy_percent", 10.0))),
        max_spread_percent=float(require_positive("measure.max_spread_percent", measure.get("max_spread_percent", 25.0))),
        max_rounds=require_positive("measure.max_rounds", measure.get("max_rounds", 0), integer=True, allow_zero=True),
        calibration=calibration,
        network=network,
        points=tuple(points),
        skipped=tuple(dropped),
    )
