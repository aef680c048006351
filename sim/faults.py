"""Heterogeneity and faults, as data, and the random draws they need (one seeded Generator).

``heterogeneity:`` per-rank compute jitter (lognormal, a coefficient of variation), slow nodes,
mixed GPU types. ``faults:`` a worker lost at a time, checkpoint interval and restart cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.catalog import GPU, Catalog
from sim.errors import ConfigError, reject_unknown_keys, require_bool, require_positive

HETEROGENEITY_KEYS = ("jitter_cv", "slow_nodes", "slow_factor", "mixed_gpus")
VARIABILITY_KEYS = ("stragglers", "gpu_cv", "iteration_cv")
FAULT_KEYS = ("fail_rank", "fail_at_s", "checkpoint_interval_s", "checkpoint_s", "restart_s")
MAX_JITTER_CV = 10.0
"""A coefficient of variation of 10 already draws factors up to ~90 x a rank's mean (200
iterations x 32 ranks, lognormal_jitter); larger values are percentages written as ratios (50 for 50 %)."""
MAX_SLOW_FACTOR = 1e6
"""A node a million times slower does no work in any run; times past it overflow long runs' sums."""


@dataclass(frozen=True, kw_only=True)
class Heterogeneity:
    jitter_cv: float = 0.0
    """Coefficient of variation of each rank's per-iteration compute time (lognormal)."""
    slow_nodes: int = 0
    """The last ``slow_nodes`` nodes run every computation ``slow_factor`` times slower."""
    slow_factor: float = 1.0
    mixed_gpus: tuple[tuple[GPU, int], ...] = ()
    """(GPU, count): the last ranks are of these types instead of the cluster's GPU."""


@dataclass(frozen=True, kw_only=True)
class Variability:
    """How much identical ranks differ in speed (sim.costs.stragglers): synchronous steps wait for
    the slowest. On by default in one iteration (the expected slowest of N) and in runs (drawn
    per rank and iteration)."""

    stragglers: bool = True
    """False: every rank computes at exactly its nominal speed (``--no-stragglers``)."""
    gpu_cv: float | None = None
    """Per-GPU persistent speed spread (coefficient of variation); None: the published figure for
    GPUs (sim.costs.stragglers.GPU_CV, Sinha et al. SC'22), 0 for CPU devices (no source)."""
    iteration_cv: float = 0.0
    """Per-rank, per-iteration jitter (coefficient of variation); 0 unless given (no source separates it)."""

    def resolved_gpu_cv(self, gpu: GPU) -> float:
        from sim.costs.stragglers import GPU_CV

        if self.gpu_cv is not None:
            return self.gpu_cv
        return GPU_CV if gpu.kind == "gpu" else 0.0

    def scale(self, gpu: GPU, ranks: int) -> float:
        """The expected slowest of ``ranks`` ranks' compute factor (1: nobody waited for)."""
        if not self.stragglers or ranks <= 1:
            return 1.0
        from sim.costs.stragglers import straggler_scale

        return straggler_scale(ranks, self.resolved_gpu_cv(gpu), self.iteration_cv)


@dataclass(frozen=True, kw_only=True)
class Faults:
    fail_rank: int | None = None
    fail_at_s: float = math.inf
    checkpoint_interval_s: float = math.inf
    """Synchronous training checkpoints at the first iteration boundary after each interval."""
    checkpoint_s: float = 0.0
    """Time to write one checkpoint (the job pauses)."""
    restart_s: float = 0.0
    """Time from the failure to training again (detect, replace the worker, reload)."""


def heterogeneity_from_dict(spec: Any, catalog: Catalog, where: str = "heterogeneity") -> Heterogeneity:
    if spec is None:
        return Heterogeneity()
    if not isinstance(spec, dict):
        raise ConfigError(where, spec, "a mapping with keys " + ", ".join(HETEROGENEITY_KEYS))
    reject_unknown_keys(where, spec, HETEROGENEITY_KEYS)
    factor = float(require_positive(f"{where}.slow_factor", spec.get("slow_factor", 1.0), maximum=MAX_SLOW_FACTOR,
                                    why="slower than that is a dead node: faults.fail_rank models it"))
    if factor < 1:
        raise ConfigError(f"{where}.slow_factor", factor, "a number >= 1 (times slower)")
    mixed = spec.get("mixed_gpus") or {}
    if not isinstance(mixed, dict) or not all(isinstance(k, str) for k in mixed):
        raise ConfigError(f"{where}.mixed_gpus", mixed, "a mapping of GPU name to count, e.g. {k80: 4}")
    return Heterogeneity(
        jitter_cv=float(require_positive(f"{where}.jitter_cv", spec.get("jitter_cv", 0.0), allow_zero=True,
                                         maximum=MAX_JITTER_CV, why="a ratio, not a percentage: 0.1 is 10 %")),
        slow_nodes=require_positive(f"{where}.slow_nodes", spec.get("slow_nodes", 0), integer=True, allow_zero=True),
        slow_factor=factor,
        mixed_gpus=tuple(
            (catalog.gpu(name, f"{where}.mixed_gpus"), require_positive(f"{where}.mixed_gpus.{name}", count, integer=True))
            for name, count in mixed.items()
        ),
    )


def stragglers_line(variability: Variability, gpu: GPU, ranks: int | None = None,
                    off: str = "--no-stragglers: off") -> str:
    """One line for an output: whether synchronous steps wait for the slowest rank, how much
    (with ``ranks``), and where the figure comes from."""
    from sim.costs.stragglers import GPU_CV, GPU_CV_SOURCE

    if not variability.stragglers:
        return "stragglers: off (every rank at its nominal speed: variability.stragglers false, --no-stragglers)"
    cv = variability.resolved_gpu_cv(gpu)
    source = GPU_CV_SOURCE if variability.gpu_cv is None and cv == GPU_CV else "variability.gpu_cv"
    if variability.gpu_cv is None and gpu.kind != "gpu":
        source = "no published figure for CPUs: variability.gpu_cv sets one"
    jitter = f", per-iteration CV {100 * variability.iteration_cv:.3g} %" if variability.iteration_cv else ""
    whom = (f"the expected slowest of {ranks} ranks, compute x{variability.scale(gpu, ranks):.4f}" if ranks
            else "the expected slowest rank")
    return f"stragglers: steps wait for {whom} (per-GPU CV {100 * cv:.3g} %{jitter}: {source}); {off}"


def variability_from_dict(spec: Any, where: str = "variability") -> Variability:
    if spec is None:
        return Variability()
    if not isinstance(spec, dict):
        raise ConfigError(where, spec, "a mapping with keys " + ", ".join(VARIABILITY_KEYS))
    reject_unknown_keys(where, spec, VARIABILITY_KEYS)
    stragglers = require_bool(f"{where}.stragglers", spec.get("stragglers", True))
    gpu_cv = spec.get("gpu_cv")
    if gpu_cv is not None:
        gpu_cv = float(require_positive(f"{where}.gpu_cv", gpu_cv, allow_zero=True, maximum=MAX_JITTER_CV,
                                        why="a ratio, not a percentage: 0.015 is 1.5 %"))
    return Variability(
        stragglers=stragglers, gpu_cv=gpu_cv,
        iteration_cv=float(require_positive(f"{where}.iteration_cv", spec.get("iteration_cv", 0.0), allow_zero=True,
                                            maximum=MAX_JITTER_CV, why="a ratio, not a percentage: 0.05 is 5 %")),
    )


MAX_RECOVERY_S = 86_400.0
"""Writing a checkpoint or restarting a job takes seconds to minutes; past a day it is a typo
(assumed; issue 29's families: 1e30 s passed)."""


def faults_from_dict(spec: Any, where: str = "faults") -> Faults:
    if spec is None:
        return Faults()
    if not isinstance(spec, dict):
        raise ConfigError(where, spec, "a mapping with keys " + ", ".join(FAULT_KEYS))
    reject_unknown_keys(where, spec, FAULT_KEYS)
    rank = spec.get("fail_rank")
    if rank is not None:
        rank = require_positive(f"{where}.fail_rank", rank, integer=True, allow_zero=True)
        if "fail_at_s" not in spec:
            raise ConfigError(f"{where}.fail_at_s", None, "the failure time in seconds (with fail_rank)")

    def seconds(key: str, default: float, never: bool = False) -> float:
        # fail_at_s and checkpoint_interval_s may be .inf: no failure, no checkpoint; writing a
        # checkpoint or restarting takes a finite time, at most MAX_RECOVERY_S
        return float(require_positive(f"{where}.{key}", spec.get(key, default), allow_zero=True, allow_inf=never,
                                      maximum=None if never else MAX_RECOVERY_S,
                                      why="" if never else "a day: a typo beyond it"))

    interval = float(require_positive(f"{where}.checkpoint_interval_s", spec.get("checkpoint_interval_s", math.inf),
                                      allow_inf=True))
    return Faults(fail_rank=rank, fail_at_s=seconds("fail_at_s", math.inf, never=True), checkpoint_interval_s=interval,
                  checkpoint_s=seconds("checkpoint_s", 0.0), restart_s=seconds("restart_s", 0.0))


def check_against_cluster(het: Heterogeneity, faults: Faults, world_size: int, nodes: int) -> None:
    if het.slow_nodes > nodes:
        raise ConfigError("heterogeneity.slow_nodes", het.slow_nodes, f"at most cluster.nodes={nodes}")
    mixed = sum(count for _, count in het.mixed_gpus)
    if mixed > world_size:
        raise ConfigError("heterogeneity.mixed_gpus", mixed, f"at most the world size {world_size} ranks in all")
    if faults.fail_rank is not None and faults.fail_rank >= world_size:
        raise ConfigError("faults.fail_rank", faults.fail_rank, f"a rank in 0..{world_size - 1}")


def rank_speed_factors(het: Heterogeneity, base_gpu: GPU, world_size: int, gpus_per_node: int,
                       compute_time_of: Any = None) -> np.ndarray:
    """Persistent per-rank slowdowns (>= 1 for slow nodes): slow nodes x slow_factor; a rank
    of another GPU type x (its compute time / the cluster GPU's), from ``compute_time_of(gpu)``."""
    factors = np.ones(world_size)
    if het.slow_nodes:
        factors[world_size - het.slow_nodes * gpus_per_node:] *= het.slow_factor
    end = world_size
    for gpu, count in het.mixed_gpus:
        ratio = compute_time_of(gpu) / compute_time_of(base_gpu) if compute_time_of else 1.0
        factors[end - count:end] *= ratio
        end -= count
    return factors


def lognormal_jitter(rng: np.random.Generator, cv: float, shape: tuple[int, ...]) -> np.ndarray:
    """Multiplicative jitter, lognormal with mean 1 and coefficient of variation ``cv``
    (sigma^2 = ln(1 + cv^2), mu = -sigma^2 / 2), drawn as ``shape`` = (iterations, ranks).

    Each rank's draws are rescaled so that their mean over the run is exactly 1: jitter moves a
    rank's time between iterations but neither adds nor removes work, so any slowdown of
    synchronous training is the cost of waiting for the slowest rank, not of more compute."""
    if cv == 0:
        return np.ones(shape)
    sigma2 = math.log1p(cv * cv)
    draws = rng.lognormal(mean=-sigma2 / 2, sigma=math.sqrt(sigma2), size=shape)
    return draws / draws.mean(axis=0, keepdims=True)
