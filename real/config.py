"""The real harness' own options, beside the scenario (workload, cluster, strategy).

A scenario dict may carry a ``real:`` section with the keys below; everything else comes from
``sim.config``. Checked in the launching process, before any rank starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.config import Scenario, scenario_from_dict
from sim.errors import ConfigError, reject_unknown_keys, require_choice, require_positive

BACKENDS = ("gloo", "nccl")
REAL_STRATEGIES = ("ddp", "ps_sync", "ps_async", "pipeline")
COMPRESSIONS = ("none", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8")
PIPELINE_SCHEDULES = ("gpipe", "1f1b")
LINKS = ("100mbit", "1gbit", "10gbit")
"""Emulated link rates (tc rate strings); any '<number>mbit|gbit' is accepted too."""
TOPOLOGIES = ("shared", "per_link")

REAL_KEYS = (
    "strategy", "compression", "backend", "lr", "threads", "baseline", "microbatches",
    "schedule", "fault",
)


@dataclass(frozen=True, kw_only=True)
class RealOptions:
    strategy: str = "ddp"
    """ddp | ps_sync | ps_async | pipeline (the scenario's strategy.collective=ps means ps_sync)."""
    compression: str = "none"
    """Gradient format on the wire (DDP communication hook); none = fp32."""
    backend: str = "gloo"
    lr: float = 0.01
    threads: int = 0
    """torch threads per rank; 0 = the machine's cores divided among the ranks."""
    baseline: bool = True
    """Also time rank 0 alone (the others idle) for T1, speedup and scaling efficiency."""
    microbatches: int = 4
    schedule: str = "gpipe"
    fault: dict[str, Any] | None = None
    """Testing only: {rank: r, iteration: i, mode: kill|hang} kills (SIGKILL) or hangs rank r at iteration i."""


def real_options_from_dict(spec: dict[str, Any] | None, scenario: Scenario) -> RealOptions:
    spec = dict(spec or {})
    if not isinstance(spec, dict):
        raise ConfigError("real", spec, "a mapping with keys " + ", ".join(REAL_KEYS))
    reject_unknown_keys("real", spec, REAL_KEYS)
    default_strategy = "ps_sync" if scenario.strategy.collective == "ps" else "ddp"
    strategy = require_choice("real.strategy", spec.get("strategy", default_strategy), REAL_STRATEGIES)
    compression = require_choice("real.compression", spec.get("compression", "none"), COMPRESSIONS)
    if compression.startswith("fp8"):
        _require_float8(compression)
    fault = spec.get("fault")
    if fault is not None and (not isinstance(fault, dict) or not {"rank", "iteration"} <= set(fault)
                              or fault.get("mode", "kill") not in ("kill", "hang")):
        raise ConfigError("real.fault", fault, "{rank: R, iteration: I, mode: kill|hang}")
    options = RealOptions(
        strategy=strategy,
        compression=compression,
        backend=require_choice("real.backend", spec.get("backend", "gloo"), BACKENDS),
        lr=float(require_positive("real.lr", spec.get("lr", 0.01))),
        threads=require_positive("real.threads", spec.get("threads", 0), integer=True, allow_zero=True),
        baseline=bool(spec.get("baseline", True)),
        microbatches=require_positive("real.microbatches", spec.get("microbatches", 4), integer=True),
        schedule=require_choice("real.schedule", spec.get("schedule", "gpipe"), PIPELINE_SCHEDULES),
        fault=fault,
    )
    _check_against_scenario(options, scenario)
    return options


def _require_float8(compression: str) -> None:
    """fp8 needs a torch that has the dtype; checked only when torch is importable."""
    try:
        import torch
    except ImportError:
        return
    attr = {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}[compression]
    if not hasattr(torch, attr):
        raise ConfigError("real.compression", compression, f"a format this torch {torch.__version__} has (no torch.{attr})")


def _check_against_scenario(options: RealOptions, scenario: Scenario) -> None:
    from real.models import MODELS

    name = scenario.workload.name
    if name not in MODELS or not MODELS[name].cpu_sized:
        raise ConfigError("workload.model", name, sorted(n for n, m in MODELS.items() if m.cpu_sized))
    world = scenario.cluster.world_size
    if options.strategy == "pipeline":
        units = len(MODELS[name].build())
        if world > units:
            raise ConfigError("cluster.gpus", world, f"at most {units} pipeline stages (the model's top-level layers)")
        if scenario.workload.batch_size % options.microbatches:
            raise ConfigError("real.microbatches", options.microbatches, f"a divisor of workload.batch_size={scenario.workload.batch_size}")
    if options.strategy in ("ps_sync", "ps_async") and world < 2:
        raise ConfigError("cluster.gpus", world, "at least 2 ranks for a parameter server")
    if options.strategy == "ps_sync" and scenario.strategy.ps_servers > world:
        raise ConfigError("strategy.ps_servers", scenario.strategy.ps_servers, f"at most the world size {world}")
    if options.compression != "none" and options.strategy != "ddp":
        raise ConfigError("real.compression", options.compression, "none with strategy " + options.strategy)


def real_scenario(spec: dict[str, Any]) -> tuple[Scenario, RealOptions]:
    """Validate a scenario dict with a ``real:`` section; models only torch knows get a layer table."""
    if not isinstance(spec, dict):
        raise ConfigError("config", type(spec).__name__, "a mapping (workload, cluster, strategy, real)")
    _check_model(spec.get("workload"))
    spec = _with_layer_table(spec)
    scenario = scenario_from_dict(spec, extra_keys=("real",))
    return scenario, real_options_from_dict(spec.get("real"), scenario)


def _check_model(workload: Any) -> None:
    from real.models import MODELS

    name = workload.get("model") if isinstance(workload, dict) else workload
    if isinstance(workload, dict) and "layers" in workload:
        return
    if name not in MODELS or not MODELS[name].cpu_sized:
        raise ConfigError("workload.model", name, sorted(n for n, m in MODELS.items() if m.cpu_sized))


def _with_layer_table(spec: dict[str, Any]) -> dict[str, Any]:
    """A CPU-sized model the simulator's zoo lacks gets its table from the torch definition."""
    from sim.workload import zoo_names

    workload = spec.get("workload")
    if isinstance(workload, str):
        workload = {"model": workload}
    if not isinstance(workload, dict) or "layers" in workload or workload.get("model") in zoo_names():
        return spec
    from real.models import MODELS

    if workload.get("model") not in MODELS:
        return spec
    from real.layers import torch_layer_table

    return {**spec, "workload": {**workload, "layers": torch_layer_table(workload["model"])}}
