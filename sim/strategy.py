"""The *how*: parallelism, collective algorithm, buckets, precision."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.errors import ConfigError, reject_unknown_keys, require_choice, require_positive
from sim.units import mib_to_bytes

STRATEGY_KINDS = ("data_parallel",)
COLLECTIVES = ("ring", "tree", "hierarchical", "ps")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}
"""Bytes per element of each dtype (tf32 is stored as fp32)."""

DDP_DEFAULT_BUCKET_MIB = 25.0
"""PyTorch DistributedDataParallel's default bucket_cap_mb (torch/nn/parallel/distributed.py)."""

STRATEGY_KEYS = ("kind", "collective", "ps_servers", "bucket_mib", "overlap", "precision")


@dataclass(frozen=True, kw_only=True)
class Strategy:
    kind: str = "data_parallel"
    collective: str = "ring"
    """Gradient reduction: ring | tree | hierarchical | ps (sharded parameter servers)."""
    ps_servers: int = 1
    """With collective=ps: parameter-server hosts, each holding 1/ps_servers of the model."""
    bucket_bytes: int = mib_to_bytes(DDP_DEFAULT_BUCKET_MIB)
    """Gradients are reduced in buckets of about this size, in backward order (DDP-style)."""
    overlap: bool = True
    """Start a bucket's reduction as soon as it is full, during the remaining backward."""
    precision: str = "fp32"
    """Compute and gradient dtype."""

    @property
    def grad_bytes_per_param(self) -> int:
        return DTYPE_BYTES[self.precision]


def strategy_from_dict(spec: dict[str, Any] | None, where: str = "strategy") -> Strategy:
    spec = spec or {}
    if not isinstance(spec, dict):
        raise ConfigError(where, spec, "a mapping with keys " + ", ".join(STRATEGY_KEYS))
    reject_unknown_keys(where, spec, STRATEGY_KEYS)
    overlap = spec.get("overlap", True)
    if not isinstance(overlap, bool):
        raise ConfigError(f"{where}.overlap", overlap, "true or false")
    bucket_mib = require_positive(f"{where}.bucket_mib", spec.get("bucket_mib", DDP_DEFAULT_BUCKET_MIB))
    return Strategy(
        kind=require_choice(f"{where}.kind", spec.get("kind", "data_parallel"), STRATEGY_KINDS),
        collective=require_choice(f"{where}.collective", spec.get("collective", "ring"), COLLECTIVES),
        ps_servers=require_positive(f"{where}.ps_servers", spec.get("ps_servers", 1), integer=True),
        bucket_bytes=max(1, mib_to_bytes(bucket_mib)),
        overlap=overlap,
        precision=require_choice(f"{where}.precision", spec.get("precision", "fp32"), PRECISIONS),
    )
