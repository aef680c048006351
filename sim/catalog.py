"""Hardware as data: accelerators and links, loaded from YAML with units in the key names.

The built-in entries live in ``sim/data/gpus.yaml`` and ``sim/data/links.yaml``, each number
with its source. A user adds or overrides entries in a config file (a ``catalog:`` section
with ``gpus:`` and ``links:``) or a calibration file, without editing code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from sim.errors import ConfigError, reject_unknown_keys, require_positive
from sim.units import GIB, gbit_per_s_to_Bps, gbyte_per_s_to_Bps, tflops_to_flops, us_to_s
from sim.yamlio import load_yaml_text

COMPUTE_DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8")
LINK_KINDS = ("tcp", "roce", "infiniband", "nvlink", "pcie", "loopback", "custom")


@dataclass(frozen=True, kw_only=True)
class GPU:
    """An accelerator (or the local CPU) as the cost layer sees it."""

    name: str
    peak_flops: dict[str, float]
    """Dense peak FLOP/s per compute dtype."""
    memory_bandwidth_Bps: float
    memory_bytes: float
    efficiency: float = 0.5
    """Fraction of peak FLOP/s a dense layer reaches (roofline's compute roof is peak x this)."""
    launch_overhead_s: float = 0.0
    """Fixed cost per layer and pass (kernel launches): the floor of a tiny layer's time."""
    source: str = ""

    def flops_for(self, dtype: str) -> float:
        """Peak FLOP/s for ``dtype``; a part without that dtype runs it at its fp32 rate."""
        if dtype in self.peak_flops:
            return self.peak_flops[dtype]
        return self.peak_flops["fp32"]


@dataclass(frozen=True, kw_only=True)
class Link:
    """A link class: per-direction bandwidth, per-message latency, achievable fraction."""

    name: str
    kind: str
    bandwidth_Bps: float
    """Line rate per direction."""
    latency_s: float
    """Hardware latency of one message."""
    software_latency_s: float = 0.0
    """What the transport's software adds per message (kernel TCP, collective library)."""
    efficiency: float = 1.0
    """Fraction of line rate the transport reaches."""
    source: str = ""

    @property
    def alpha_s(self) -> float:
        """Per-message cost, the alpha of the alpha-beta model."""
        return self.latency_s + self.software_latency_s

    @property
    def effective_Bps(self) -> float:
        """Achievable bandwidth, 1/beta of the alpha-beta model."""
        return self.bandwidth_Bps * self.efficiency


_GPU_KEYS = ("peak_tflops", "memory_bandwidth_GBps", "memory_GiB", "efficiency", "launch_overhead_us", "source")
_LINK_KEYS = (
    "kind", "bandwidth_Gbps", "bandwidth_GBps", "latency_us", "software_latency_us",
    "efficiency", "source",
)


def _fraction(field_name: str, value: Any) -> float:
    require_positive(field_name, value)
    if value > 1:
        raise ConfigError(field_name, value, "a fraction in (0, 1]")
    return float(value)


def gpu_from_dict(name: str, spec: dict[str, Any], where: str = "catalog.gpus") -> GPU:
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}.{name}", spec, "a mapping with keys " + ", ".join(_GPU_KEYS))
    reject_unknown_keys(f"{where}.{name}", spec, _GPU_KEYS)
    peak = spec.get("peak_tflops")
    if not isinstance(peak, dict) or "fp32" not in peak:
        raise ConfigError(f"{where}.{name}.peak_tflops", peak, "a mapping of dtype to TFLOP/s with at least fp32")
    flops = {}
    for dtype, tflops in peak.items():
        if dtype not in COMPUTE_DTYPES:
            raise ConfigError(f"{where}.{name}.peak_tflops.{dtype}", dtype, COMPUTE_DTYPES)
        flops[dtype] = tflops_to_flops(require_positive(f"{where}.{name}.peak_tflops.{dtype}", tflops))
    for key in ("memory_bandwidth_GBps", "memory_GiB"):
        if key not in spec:
            raise ConfigError(f"{where}.{name}.{key}", None, "a positive number (required)")
    return GPU(
        name=name,
        peak_flops=flops,
        memory_bandwidth_Bps=gbyte_per_s_to_Bps(require_positive(f"{where}.{name}.memory_bandwidth_GBps", spec["memory_bandwidth_GBps"])),
        memory_bytes=require_positive(f"{where}.{name}.memory_GiB", spec["memory_GiB"]) * GIB,
        efficiency=_fraction(f"{where}.{name}.efficiency", spec.get("efficiency", 0.5)),
        launch_overhead_s=us_to_s(
            require_positive(f"{where}.{name}.launch_overhead_us", spec.get("launch_overhead_us", 0), allow_zero=True)
        ),
        source=str(spec.get("source", "")),
    )


def link_from_dict(name: str, spec: dict[str, Any], where: str = "catalog.links") -> Link:
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}.{name}", spec, "a mapping with keys " + ", ".join(_LINK_KEYS))
    reject_unknown_keys(f"{where}.{name}", spec, _LINK_KEYS)
    has_gbit, has_gbyte = "bandwidth_Gbps" in spec, "bandwidth_GBps" in spec
    if has_gbit == has_gbyte:
        raise ConfigError(f"{where}.{name}", sorted(spec), "exactly one of bandwidth_Gbps, bandwidth_GBps")
    if has_gbit:
        bandwidth = gbit_per_s_to_Bps(require_positive(f"{where}.{name}.bandwidth_Gbps", spec["bandwidth_Gbps"]))
    else:
        bandwidth = gbyte_per_s_to_Bps(require_positive(f"{where}.{name}.bandwidth_GBps", spec["bandwidth_GBps"]))
    kind = spec.get("kind", "custom")
    if kind not in LINK_KINDS:
        raise ConfigError(f"{where}.{name}.kind", kind, LINK_KINDS)
    if "latency_us" not in spec:
        raise ConfigError(f"{where}.{name}.latency_us", None, "a non-negative number (required)")
    return Link(
        name=name,
        kind=kind,
        bandwidth_Bps=bandwidth,
        latency_s=us_to_s(require_positive(f"{where}.{name}.latency_us", spec["latency_us"], allow_zero=True)),
        software_latency_s=us_to_s(
            require_positive(f"{where}.{name}.software_latency_us", spec.get("software_latency_us", 0), allow_zero=True)
        ),
        efficiency=_fraction(f"{where}.{name}.efficiency", spec.get("efficiency", 1.0)),
        source=str(spec.get("source", "")),
    )


def _read_builtin(filename: str) -> dict[str, Any]:
    text = resources.files("sim").joinpath("data", filename).read_text(encoding="utf-8")
    return load_yaml_text(text)


@dataclass(frozen=True)
class Catalog:
    """All known GPUs and links by name."""

    gpus: dict[str, GPU] = field(default_factory=dict)
    links: dict[str, Link] = field(default_factory=dict)

    def gpu(self, name: str, field_name: str = "cluster.gpu") -> GPU:
        if name not in self.gpus:
            raise ConfigError(field_name, name, self.gpus)
        return self.gpus[name]

    def link(self, name: str, field_name: str = "cluster.link") -> Link:
        if name not in self.links:
            raise ConfigError(field_name, name, self.links)
        return self.links[name]

    def extended(self, extra: dict[str, Any] | None, where: str = "catalog") -> Catalog:
        """A new catalog with the entries of ``extra`` (``{gpus: {...}, links: {...}}``) added."""
        if not extra:
            return self
        if not isinstance(extra, dict):
            raise ConfigError(where, extra, "a mapping with keys gpus, links")
        reject_unknown_keys(where, extra, ("gpus", "links"))
        gpus = dict(self.gpus)
        links = dict(self.links)
        for name, spec in (extra.get("gpus") or {}).items():
            gpus[name] = gpu_from_dict(name, spec, f"{where}.gpus")
        for name, spec in (extra.get("links") or {}).items():
            links[name] = link_from_dict(name, spec, f"{where}.links")
        return Catalog(gpus, links)


@cache
def builtin_catalog() -> Catalog:
    """The shipped catalog, parsed once per process (Catalog is immutable; ``extended`` copies)."""
    gpus = {n: gpu_from_dict(n, s, "sim/data/gpus.yaml") for n, s in _read_builtin("gpus.yaml").items()}
    links = {n: link_from_dict(n, s, "sim/data/links.yaml") for n, s in _read_builtin("links.yaml").items()}
    return Catalog(gpus, links)


def load_catalog_file(path: str | Path, base: Catalog | None = None) -> Catalog:
    """Extend ``base`` (the built-in catalog by default) with a YAML file of gpus/links."""
    from sim.config import read_yaml  # late import: config imports catalog

    data = read_yaml(path)
    return (base or builtin_catalog()).extended(data, where=str(path))
