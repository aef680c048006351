"""The *what*: a model as an ordered table of layers, and the built-in zoo.

Layer tables are data files under ``sim/data/workloads/`` (``<name>.yaml`` for the metadata
and published totals, ``<name>.csv`` for the layers), derived from torch definitions by
``scripts/derive_layer_tables.py`` with torch's FLOP counter, so sim/ never imports torch.
FLOPs and activations are per sample; parameters are counted in elements and turned into
bytes by the strategy's precision.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any

from sim.errors import ConfigError, reject_unknown_keys, require_choice, require_positive
from sim.yamlio import load_yaml_text

OPTIMIZERS = ("sgd", "momentum", "adam")
LAYER_COLUMNS = ("layer", "kind", "param_count", "fwd_flops", "bwd_flops", "activation_elems")


@dataclass(frozen=True, kw_only=True)
class Layer:
    name: str
    kind: str
    param_count: int
    """Trainable parameters; backward produces a gradient of the same size."""
    fwd_flops: float
    """Forward FLOPs per sample."""
    bwd_flops: float
    """Backward FLOPs per sample (input and weight gradients)."""
    activation_elems: float
    """Elements of the layer's output per sample (what the next layer reads, what backward keeps)."""
    fwd_time_s: float | None = None
    """Measured forward time for the workload's batch on the cluster's device, if calibrated."""
    bwd_time_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class Workload:
    name: str
    layers: tuple[Layer, ...]
    batch_size: int
    """Samples per GPU per iteration (weak scaling keeps it fixed as GPUs are added)."""
    optimizer: str = "momentum"
    optimizer_time_s: float | None = None
    """Measured optimizer step over all parameters on the cluster's device, if calibrated
    (sim/calibration.py); None: the memory-bound roofline of sim/costs/compute.py."""
    description: str = ""
    source: str = ""
    published: dict[str, Any] | None = None

    @property
    def param_count(self) -> int:
        return sum(layer.param_count for layer in self.layers)

    @property
    def fwd_flops_per_sample(self) -> float:
        return sum(layer.fwd_flops for layer in self.layers)

    @property
    def bwd_flops_per_sample(self) -> float:
        return sum(layer.bwd_flops for layer in self.layers)

    def with_batch_size(self, batch_size: int) -> Workload:
        return replace(self, batch_size=require_positive("workload.batch_size", batch_size, integer=True))


def _zoo_dir():
    return resources.files("sim").joinpath("data", "workloads")


@cache
def zoo_names() -> tuple[str, ...]:
    return tuple(sorted(p.name[:-5] for p in _zoo_dir().iterdir() if p.name.endswith(".yaml")))


def _parse_layers(text: str, where: str) -> tuple[Layer, ...]:
    rows = list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))
    if not rows:
        raise ConfigError(where, "empty layer table", "at least one layer row")
    missing = [c for c in LAYER_COLUMNS if c not in rows[0]]
    if missing:
        raise ConfigError(where, f"missing column {missing[0]}", "columns " + ", ".join(LAYER_COLUMNS))
    layers = []
    for i, row in enumerate(rows):
        try:
            layers.append(
                Layer(
                    name=row["layer"],
                    kind=row["kind"],
                    param_count=int(row["param_count"]),
                    fwd_flops=float(row["fwd_flops"]),
                    bwd_flops=float(row["bwd_flops"]),
                    activation_elems=float(row["activation_elems"]),
                    fwd_time_s=float(row["fwd_time_s"]) if row.get("fwd_time_s") else None,
                    bwd_time_s=float(row["bwd_time_s"]) if row.get("bwd_time_s") else None,
                )
            )
        except ValueError as err:
            raise ConfigError(f"{where} row {i + 1}", row, f"numbers in numeric columns ({err})") from None
    return tuple(layers)


@cache
def _load_zoo_entry(name: str) -> Workload:
    meta = load_yaml_text(_zoo_dir().joinpath(f"{name}.yaml").read_text(encoding="utf-8"))
    layers = _parse_layers(_zoo_dir().joinpath(meta.get("layers_file", f"{name}.csv")).read_text(encoding="utf-8"), f"{name}.csv")
    return Workload(
        name=name,
        layers=layers,
        batch_size=int(meta.get("default_batch_size", 32)),
        optimizer=meta.get("optimizer", "momentum"),
        description=meta.get("description", ""),
        source=meta.get("source", ""),
        published=meta.get("published"),
    )


def load_workload(name: str, field_name: str = "workload.model") -> Workload:
    """A zoo model by name (a copy: callers may ``replace`` freely)."""
    if name not in zoo_names():
        raise ConfigError(field_name, name, zoo_names())
    return _load_zoo_entry(name)


WORKLOAD_KEYS = ("model", "batch_size", "optimizer", "layers")


def workload_from_dict(spec: dict[str, Any], where: str = "workload") -> Workload:
    """``{model: resnet50, batch_size: 32, optimizer: momentum}``; ``layers`` gives a custom table.

    A custom table is a list of mappings with the keys of ``LAYER_COLUMNS`` (``layer`` may be
    ``name``), optionally ``fwd_time_s``/``bwd_time_s`` measured at this batch size.
    """
    if isinstance(spec, str):
        spec = {"model": spec}
    if not isinstance(spec, dict):
        raise ConfigError(where, spec, "a mapping with keys " + ", ".join(WORKLOAD_KEYS))
    reject_unknown_keys(where, spec, WORKLOAD_KEYS)
    if "layers" in spec:
        name = str(spec.get("model", "custom"))
        layers = _custom_layers(spec["layers"], f"{where}.layers")
        workload = Workload(name=name, layers=layers, batch_size=1, source="inline config")
    elif "model" in spec:
        workload = load_workload(spec["model"], f"{where}.model")
    else:
        raise ConfigError(f"{where}.model", None, "a zoo model name (" + ", ".join(zoo_names()) + ") or a layers table")
    batch = spec.get("batch_size", workload.batch_size)
    workload = workload.with_batch_size(require_positive(f"{where}.batch_size", batch, integer=True))
    if "optimizer" in spec:
        workload = replace(workload, optimizer=require_choice(f"{where}.optimizer", spec["optimizer"], OPTIMIZERS))
    return workload


def _custom_layers(rows: Any, where: str) -> tuple[Layer, ...]:
    if not isinstance(rows, list) or not rows:
        raise ConfigError(where, rows, "a non-empty list of layers")
    layers = []
    for i, row in enumerate(rows):
        at = f"{where}[{i}]"
        if not isinstance(row, dict):
            raise ConfigError(at, row, "a mapping")
        row = dict(row)
        if "name" in row:
            row["layer"] = row.pop("name")
        reject_unknown_keys(at, row, (*LAYER_COLUMNS, "fwd_time_s", "bwd_time_s"))
        fwd_time_s, bwd_time_s = _measured_times(at, row.get("fwd_time_s"), row.get("bwd_time_s"))
        fwd_flops = require_positive(f"{at}.fwd_flops", row.get("fwd_flops", 0), allow_zero=True)
        layers.append(
            Layer(
                name=str(row.get("layer", f"layer{i}")),
                kind=str(row.get("kind", "custom")),
                param_count=require_positive(f"{at}.param_count", row.get("param_count", 0), integer=True, allow_zero=True),
                fwd_flops=fwd_flops,
                bwd_flops=require_positive(f"{at}.bwd_flops", row["bwd_flops"] if "bwd_flops" in row else 2 * fwd_flops,
                                           allow_zero=True),
                activation_elems=require_positive(f"{at}.activation_elems", row.get("activation_elems", 0), allow_zero=True),
                fwd_time_s=fwd_time_s,
                bwd_time_s=bwd_time_s,
            )
        )
    return tuple(layers)


def _measured_times(at: str, fwd: Any, bwd: Any) -> tuple[float | None, float | None]:
    """A layer's measured times: both (finite seconds >= 0) or neither; one alone would be ignored
    (sim/costs/compute.py uses them only as a pair)."""
    if fwd is None and bwd is None:
        return None, None
    if fwd is None or bwd is None:
        given, missing = ("fwd_time_s", "bwd_time_s") if bwd is None else ("bwd_time_s", "fwd_time_s")
        raise ConfigError(f"{at}.{missing}", None, f"a time in seconds beside {given} (both measured times or neither)")
    return (float(require_positive(f"{at}.fwd_time_s", fwd, allow_zero=True)),
            float(require_positive(f"{at}.bwd_time_s", bwd, allow_zero=True)))
