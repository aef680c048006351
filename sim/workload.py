"""The *what*: a model as an ordered table of layers, and the built-in zoo.

Layer tables are data files under ``sim/data/workloads/`` (``<name>.yaml`` for the metadata
and published totals, ``<name>.csv`` for the layers), derived from torch definitions by
``real.derive`` (``scalebench layers --zoo``) with torch's FLOP counter, so sim/ never imports
torch. A transformer's YAML holds its ``architecture`` instead of a CSV: its table is built in
closed form (sim.transformer) at any ``seq_len``. A user's own model comes as a CSV written by
``scalebench layers MODULE:CALLABLE`` (``layers_file``). FLOPs and activations are per sample;
parameters are counted in elements and turned into bytes by the strategy's precision.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, replace
from functools import cache, cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from sim.errors import ConfigError, reject_unknown_keys, require_choice, require_positive
from sim.transformer import Architecture, architecture_from_dict, transformer_rows, with_seq_len
from sim.yamlio import load_yaml_text

OPTIMIZERS = ("sgd", "momentum", "adam")
LAYER_COLUMNS = ("layer", "kind", "param_count", "fwd_flops", "bwd_flops", "activation_elems")
MAX_LAYER_ROWS = 100_000
"""Rows of a layer table at most (a file or inline): the zoo's deepest has under 1,000 (Llama 2 70B:
80 layers of a few rows); 100,000 simulate in ~13 s here, a 16 MiB file of 600,000 in over a minute.
Assumed, a typo guard."""
TIME_COLUMNS = ("fwd_time_s", "bwd_time_s")
META_PREFIX = "# meta: "
"""A layer file's comment line with its JSON metadata: name, batch_size, dtype, and times_batch_size
(the batch at which its fwd_time_s / bwd_time_s were measured)."""
DECODER = "decoder"
"""The parameterised transformer: ``{model: decoder, architecture: {layers, hidden, heads, seq_len, vocab, ...}}``."""


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
    global_batch_tokens: int | None = None
    """Tokens per optimizer step its authors trained with (a zoo preset's ``global_batch_tokens``):
    a plan without --global-batch uses it (global batch = tokens / seq_len). None: not published."""
    global_batch_source: str = ""
    architecture: Architecture | None = None
    """A transformer's dimensions when its table is the closed form of sim.transformer (the zoo's
    transformers, ``seq_len``/``architecture`` overrides, the decoder); the memory model then
    counts its activations tensor by tensor (sim.costs.activations). None: a table (CNNs, a
    layers file, an inline table), whose activations are each layer's output."""
    data: str = "synthetic"
    """What the job reads (sim.costs.input_pipeline.DATA_KINDS): synthetic (nothing: tensors made
    on the GPU, as benchmarks do) or real images the host's cores decode and augment, which may
    bound the step (sim/costs/input_pipeline.py)."""

    @property
    def param_count(self) -> int:
        return sum(layer.param_count for layer in self.layers)

    @cached_property
    def unit_names(self) -> tuple[str, ...]:
        """The top-level modules in order: each layer's name up to its first '.' (what
        sim.costs.pipeline.layer_unit says); computed once (frozen: the cache cannot go stale)."""
        return tuple(dict.fromkeys(layer.name.split(".", 1)[0] for layer in self.layers))

    @cached_property
    def param_prefix(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Prefix sums of the parameters (dense, and of the mixture-of-experts' routed experts,
        kind Experts): the parameters of layers [lo, hi) are prefix[hi] - prefix[lo]."""
        dense, experts = [0], [0]
        for layer in self.layers:
            expert = layer.kind == "Experts"
            dense.append(dense[-1] + (0 if expert else layer.param_count))
            experts.append(experts[-1] + (layer.param_count if expert else 0))
        return tuple(dense), tuple(experts)

    @cached_property
    def layer_units(self) -> tuple[str, ...]:
        """Each layer's top-level module name."""
        return tuple(layer.name.split(".", 1)[0] for layer in self.layers)

    @cached_property
    def unit_index(self) -> tuple[int, ...]:
        """Each layer's top-level module as its position in ``unit_names``."""
        position = {name: i for i, name in enumerate(self.unit_names)}
        return tuple(position[layer.name.split(".", 1)[0]] for layer in self.layers)

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
    """A layer table's rows, each checked as an inline layer is (sim.workload._custom_layers): a
    non-negative integer param_count, finite non-negative FLOPs and activations, measured times in
    pairs. An unknown column (a misspelt ``fwd_time``), a row with more or fewer cells than the
    header, or one time column without the other is an error naming the file and the row."""
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    reader = csv.reader(lines)
    header = next(reader, None)
    if header is None:
        raise ConfigError(where, "empty layer table", "a header row and at least one layer row")
    header = [h.strip() for h in header]
    allowed = (*LAYER_COLUMNS, *TIME_COLUMNS)
    missing = [c for c in LAYER_COLUMNS if c not in header]
    if missing:
        raise ConfigError(where, f"missing column {missing[0]}", "columns " + ", ".join(LAYER_COLUMNS)
                          + " (and optionally " + ", ".join(TIME_COLUMNS) + ")")
    unknown = [c for c in header if c not in allowed]
    if unknown:
        raise ConfigError(f"{where} column {unknown[0]!r}", unknown[0], "one of " + ", ".join(allowed)
                          + " (a misspelt column would be dropped without a word)")
    repeated = [c for c in header if header.count(c) > 1]
    if repeated:
        raise ConfigError(f"{where} column {repeated[0]!r}", "given twice", "each column once")
    times = [c for c in TIME_COLUMNS if c in header]
    if len(times) == 1:
        other = TIME_COLUMNS[1 - TIME_COLUMNS.index(times[0])]
        raise ConfigError(f"{where} column {other!r}", None, f"beside {times[0]}: both measured times or neither")
    layers = []
    for i, cells in enumerate(reader):
        at = f"{where} row {i + 1}"
        if len(cells) != len(header):
            raise ConfigError(at, ",".join(cells), f"{len(header)} cells, one per column of the header (it has "
                              f"{len(cells)})")
        row = dict(zip(header, (c.strip() for c in cells), strict=True))
        layers.append(_table_layer(at, row))
        if len(layers) > MAX_LAYER_ROWS:
            raise ConfigError(where, f"more than {MAX_LAYER_ROWS:,} layer rows", f"at most {MAX_LAYER_ROWS:,} rows "
                              "(the zoo's deepest model has under 1,000)")
    if not layers:
        raise ConfigError(where, "empty layer table", "at least one layer row")
    return tuple(layers)


def _table_layer(at: str, row: dict[str, str]) -> Layer:
    """One row of a layer table, as numbers, checked."""
    def number(key: str, integer: bool = False) -> float:
        text = row[key]
        try:
            value: float = int(text) if integer else float(text)
        except ValueError:
            raise ConfigError(f"{at}.{key}", text, "a non-negative integer" if integer else "a finite number >= 0") from None
        return require_positive(f"{at}.{key}", value, integer=integer, allow_zero=True)

    fwd_time, bwd_time = (row.get(k) or None for k in TIME_COLUMNS)
    measured = _measured_times(at, None if fwd_time is None else number("fwd_time_s"),
                               None if bwd_time is None else number("bwd_time_s"))
    return Layer(name=row["layer"], kind=row["kind"], param_count=int(number("param_count", integer=True)),
                 fwd_flops=number("fwd_flops"), bwd_flops=number("bwd_flops"),
                 activation_elems=number("activation_elems"), fwd_time_s=measured[0], bwd_time_s=measured[1])


def layer_file_meta(text: str, where: str = "layer table") -> dict[str, Any]:
    """The ``# meta: {...}`` line of a layer file (empty if it has none); its batch sizes, when
    given, are positive integers (a ConfigError naming the file otherwise)."""
    meta: dict[str, Any] = {}
    for line in text.splitlines():
        if line.startswith(META_PREFIX):
            try:
                parsed = json.loads(line[len(META_PREFIX):])
            except ValueError:
                parsed = None
            meta = parsed if isinstance(parsed, dict) else {}
            break
        if not line.startswith("#"):
            break
    for key in ("batch_size", "times_batch_size"):
        if meta.get(key) is not None:
            require_positive(f"{where} meta {key}", meta[key], integer=True)
    return meta


def read_layers_file(path: str | Path, where: str = "workload.layers_file") -> tuple[tuple[Layer, ...], dict[str, Any]]:
    """A table written by ``scalebench layers`` (or by hand: LAYER_COLUMNS, optionally the time
    columns): its layers and metadata."""
    from sim.fileio import read_input_bytes

    data = read_input_bytes(where, path, what="a readable layer table (CSV)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(where, str(path), f"a UTF-8 layer table (CSV) (byte {err.start} is not UTF-8)") from None
    return _parse_layers(text, str(path)), layer_file_meta(text, str(path))


@cache
def zoo_meta(name: str) -> dict[str, Any]:
    return load_yaml_text(_zoo_dir().joinpath(f"{name}.yaml").read_text(encoding="utf-8"))


def zoo_architecture(name: str) -> Architecture | None:
    """A zoo transformer's dimensions (None for the other models)."""
    arch = zoo_meta(name).get("architecture")
    return None if arch is None else architecture_from_dict(arch, where=f"zoo {name}")


@cache
def transformer_layers(arch: Architecture) -> tuple[Layer, ...]:
    return tuple(Layer(name=r[0], kind=r[1], param_count=r[2], fwd_flops=float(r[3]), bwd_flops=float(r[4]),
                       activation_elems=float(r[5])) for r in transformer_rows(arch))


@cache
def _load_zoo_entry(name: str) -> Workload:
    meta = zoo_meta(name)
    arch = zoo_architecture(name)
    if arch is not None:
        layers = transformer_layers(arch)
    else:
        layers = _parse_layers(_zoo_dir().joinpath(meta.get("layers_file", f"{name}.csv")).read_text(encoding="utf-8"),
                               f"{name}.csv")
    return Workload(
        name=name,
        layers=layers,
        batch_size=int(meta.get("default_batch_size", 32)),
        optimizer=meta.get("optimizer", "momentum"),
        description=meta.get("description", ""),
        source=meta.get("source", ""),
        published=meta.get("published"),
        global_batch_tokens=meta.get("global_batch_tokens"),
        global_batch_source=meta.get("global_batch_source", ""),
        architecture=arch,
    )


def load_workload(name: str, field_name: str = "workload.model") -> Workload:
    """A zoo model by name (a copy: callers may ``replace`` freely)."""
    if name not in zoo_names():
        raise ConfigError(field_name, name, zoo_names())
    return _load_zoo_entry(name)


WORKLOAD_KEYS = ("model", "batch_size", "optimizer", "layers", "layers_file", "seq_len", "architecture", "data")
WORKLOAD_FIELDS: dict[str, str] = {
    "model": "a zoo model name, or 'decoder' (the parameterised transformer, with architecture); with layers or "
             "layers_file: the model's name in the results",
    "batch_size": "samples per GPU per iteration (a positive integer; default: the model's)",
    "optimizer": "one of " + ", ".join(OPTIMIZERS),
    "layers": "an inline layer table: a list of {layer, kind, param_count, fwd_flops, bwd_flops, activation_elems"
              "[, fwd_time_s, bwd_time_s]}",
    "layers_file": "a CSV written by `scalebench layers` (relative to the config file)",
    "seq_len": "tokens per sample of a transformer model (bert_*, gpt2_*, gpt3_*, llama*, mixtral_*, deepseek_*, decoder)",
    "architecture": "a transformer's dimensions (sim.transformer.ARCHITECTURE_KEYS), over the preset's",
    "data": "what the job reads: synthetic (default: nothing), imagenet_jpeg (ILSVRC-2012's JPEGs) or "
            "imagenet_jpeg_256 (resized to 256 x 256): real images are decoded on the host's cores "
            "(sim/costs/input_pipeline.py)",
}
"""Each workload key and what it takes (the CLI's help and ``scalebench schema`` read this)."""


def workload_from_dict(spec: dict[str, Any], where: str = "workload") -> Workload:
    """``{model: resnet50, batch_size: 32, optimizer: momentum}``; ``layers`` gives a custom table,
    ``layers_file`` one written by ``scalebench layers``; a transformer takes ``seq_len`` and
    ``architecture`` (``model: decoder`` needs the whole architecture).

    A custom table is a list of mappings with the keys of ``LAYER_COLUMNS`` (``layer`` may be
    ``name``), optionally ``fwd_time_s``/``bwd_time_s`` measured at this batch size.
    """
    if isinstance(spec, str):
        spec = {"model": spec}
    if not isinstance(spec, dict):
        raise ConfigError(where, spec, "a mapping with keys " + ", ".join(WORKLOAD_KEYS))
    reject_unknown_keys(where, spec, WORKLOAD_KEYS)
    tables = [k for k in ("layers", "layers_file") if k in spec]
    if len(tables) > 1:
        raise ConfigError(f"{where}.layers_file", spec["layers_file"], "either layers or layers_file, not both")
    times_batch = None
    if tables and any(k in spec for k in ("seq_len", "architecture")):
        key = "seq_len" if "seq_len" in spec else "architecture"
        raise ConfigError(f"{where}.{key}", spec[key], f"only with a transformer model, not with {tables[0]}")
    if "layers" in spec:
        name = str(spec.get("model", "custom"))
        layers = _custom_layers(spec["layers"], f"{where}.layers")
        workload = Workload(name=name, layers=layers, batch_size=1, source="inline config")
    elif "layers_file" in spec:
        path = spec["layers_file"]
        if not isinstance(path, str) or not path:
            raise ConfigError(f"{where}.layers_file", path, "a path to a CSV written by `scalebench layers`")
        layers, meta = read_layers_file(path, f"{where}.layers_file")
        times_batch = meta.get("times_batch_size")
        name = str(spec.get("model", meta.get("name") or Path(path).stem))
        batch = meta.get("batch_size")
        if "batch_size" not in spec and not isinstance(batch, int):
            raise ConfigError(f"{where}.batch_size", None, f"a positive integer ({path} records no batch size)")
        workload = Workload(name=name, layers=layers, batch_size=batch if isinstance(batch, int) and batch > 0 else 1,
                            source=f"layers_file {path}")
    elif "model" in spec:
        workload = _model_workload(spec, where)
    else:
        raise ConfigError(f"{where}.model", None, "a zoo model name (" + ", ".join(zoo_names()) + ") or a layers table")
    batch = spec.get("batch_size", workload.batch_size)
    workload = workload.with_batch_size(require_positive(f"{where}.batch_size", batch, integer=True))
    if times_batch is not None and workload.batch_size != times_batch and any(la.fwd_time_s is not None for la in layers):
        raise ConfigError(f"{where}.batch_size", workload.batch_size,
                          f"{times_batch}, the batch at which {spec['layers_file']}'s layer times were measured")
    if "optimizer" in spec:
        workload = replace(workload, optimizer=require_choice(f"{where}.optimizer", spec["optimizer"], OPTIMIZERS))
    if "data" in spec:
        from sim.costs.input_pipeline import DATA_KINDS

        workload = replace(workload, data=require_choice(f"{where}.data", spec["data"], DATA_KINDS))
    return workload


def _model_workload(spec: dict[str, Any], where: str) -> Workload:
    """A zoo model; a transformer at ``seq_len`` with ``architecture`` over its preset; or the decoder."""
    name = spec["model"]
    if name == DECODER:
        if "architecture" not in spec:
            raise ConfigError(f"{where}.architecture", None, "the decoder's dimensions {layers, hidden, heads, seq_len, "
                              "vocab[, family, kv_heads, ffn_hidden, ...]}")
        arch = architecture_from_dict(spec["architecture"], f"{where}.architecture")
        base = Workload(name=DECODER, layers=(), batch_size=1, optimizer="adam", description="parameterised transformer",
                        source="sim.transformer")
    else:
        base = load_workload(name, f"{where}.model")
        if not any(k in spec for k in ("seq_len", "architecture")):
            return base
        preset = zoo_architecture(name)
        if preset is None:
            key = "seq_len" if "seq_len" in spec else "architecture"
            transformers = [n for n in zoo_names() if zoo_meta(n).get("architecture")] + [DECODER]
            raise ConfigError(f"{where}.{key}", spec[key], "only with a transformer model: " + ", ".join(transformers))
        arch = preset
        if "architecture" in spec:
            arch = architecture_from_dict(spec["architecture"], f"{where}.architecture", base=preset)
    if "seq_len" in spec:
        arch = with_seq_len(arch, spec["seq_len"], where)
    if "architecture" in spec:  # another model than the preset's authors trained: their batch is not its own
        base = replace(base, global_batch_tokens=None, global_batch_source="")
    return replace(base, layers=transformer_layers(arch), architecture=arch)


def _custom_layers(rows: Any, where: str) -> tuple[Layer, ...]:
    if not isinstance(rows, list) or not rows:
        raise ConfigError(where, rows, "a non-empty list of layers")
    if len(rows) > MAX_LAYER_ROWS:
        raise ConfigError(where, f"{len(rows):,} layers", f"at most {MAX_LAYER_ROWS:,} (the zoo's deepest model has "
                          "under 1,000)")
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
        if "fwd_flops" not in row and fwd_time_s is None:
            raise ConfigError(f"{at}.fwd_flops", None, "the layer's forward FLOPs per sample (0 for a layer without "
                              "compute), or measured fwd_time_s and bwd_time_s: without either it would take no time")
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
