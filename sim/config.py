"""Reading and checking a scenario: the one place a workload, a cluster and a strategy are
validated together (degrees, placement, faults, memory, the collective library's options), above
the engines and the cost layer, which only ever see a checked ``sim.scenario.Scenario``.

This is the one description that both sim/ and real/ consume. It is torch-free.

Why the parsers are written by hand and not pydantic models (judged for issue 29; the schema
side is sim/schema.py's): every section already parses into a frozen dataclass of SI units
(``bucket_mib: 512K`` -> bytes, ``latency_us`` -> seconds, catalog entries deriving from a
``base``), a bad value is one line naming its dotted field and what is allowed (CLI exit 2), and
what spans sections (dp x tp x pp = GPUs, memory, placement, the library's options) is checked
here, after each section. pydantic would validate types and bounds and emit the schema with
descriptions, but each of those conversions and cross-section rules would become a validator,
its errors multi-line reports to rewrite into our one line, and the move would touch every
parser other work changes at the same time; sim/schema.py generates the schema from the same key
tuples and registries instead, and tests/test_schema.py holds the two equal.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from sim.catalog import Catalog, builtin_catalog
from sim.cluster import Cluster, cluster_from_dict
from sim.costs.backends import BACKENDS, default_backend
from sim.errors import (
    ConfigError,
    reject_unknown_keys,
    require_bool,
    require_choice,
    require_positive,
)
from sim.faults import (
    check_against_cluster,
    faults_from_dict,
    heterogeneity_from_dict,
    variability_from_dict,
)
from sim.memory import check_memory
from sim.parallel import check_placement
from sim.scenario import Scenario
from sim.strategy import Strategy, check_degrees, check_large_model, strategy_from_dict
from sim.workload import workload_from_dict
from sim.yamlio import read_yaml

__all__ = ["FIDELITIES", "SCENARIO_KEYS", "Scenario", "load_scenario", "read_yaml", "resolve_backend", "resolve_path",
           "resolve_paths", "scenario_columns", "scenario_from_dict", "validate_scenario"]

FIDELITIES = ("fast", "detailed")
SIMULATION_KEYS = ("fidelity", "seed", "check_memory", "flow_engine")
FLOW_ENGINES = ("auto", "event", "periodic")
SCENARIO_KEYS = (
    "name", "description", "workload", "cluster", "strategy", "simulation", "catalog",
    "heterogeneity", "faults", "variability",
)


def resolve_paths(spec: Any, base_dir: str | Path) -> Any:
    """``workload.layers_file`` and a fabric file (``cluster.topology``) relative to the folder of the
    config file that names them (in place; absolute paths and anything that is not a mapping are
    left alone)."""
    workload = spec.get("workload") if isinstance(spec, dict) else None
    if isinstance(workload, dict) and isinstance(workload.get("layers_file"), str):
        workload["layers_file"] = resolve_path(workload["layers_file"], base_dir)
    cluster = spec.get("cluster") if isinstance(spec, dict) else None
    if isinstance(cluster, dict):
        topology = cluster.get("topology")
        if isinstance(topology, str):
            from sim.topology.spec import KINDS

            if topology not in KINDS:
                cluster["topology"] = resolve_path(topology, base_dir)
        elif isinstance(topology, dict) and isinstance(topology.get("path"), str):
            topology["path"] = resolve_path(topology["path"], base_dir)
    return spec


def resolve_path(path: str, base_dir: str | Path) -> str:
    """``path`` relative to ``base_dir``, absolute; symlinks resolved where they resolve (a loop is
    left for the reader to name in one line: Path.resolve raised RuntimeError on it)."""
    if not path or Path(path).is_absolute():
        return path
    joined = Path(base_dir) / path
    try:
        return str(joined.resolve())
    except (OSError, RuntimeError):
        import os

        return os.path.abspath(joined)


def scenario_from_dict(spec: dict[str, Any], catalog: Catalog | None = None, extra_keys: tuple[str, ...] = ()) -> Scenario:
    """Build and validate a Scenario; ``extra_keys`` are top-level keys another layer owns."""
    if not isinstance(spec, dict):
        raise ConfigError("config", type(spec).__name__, "a YAML mapping with keys " + ", ".join(SCENARIO_KEYS))
    reject_unknown_keys("config", spec, (*SCENARIO_KEYS, *extra_keys))
    catalog = (catalog or builtin_catalog()).extended(spec.get("catalog"))
    if "workload" not in spec:
        raise ConfigError("workload", None, "a workload section (e.g. {model: resnet50, batch_size: 32})")
    simulation = spec.get("simulation") or {}
    if not isinstance(simulation, dict):
        raise ConfigError("simulation", simulation, "a mapping with keys " + ", ".join(SIMULATION_KEYS))
    reject_unknown_keys("simulation", simulation, SIMULATION_KEYS)
    check_memory = require_bool("simulation.check_memory", simulation.get("check_memory", True))
    seed = require_positive("simulation.seed", simulation.get("seed", 0), integer=True, allow_zero=True)
    scenario = Scenario(
        name=str(spec.get("name", "scenario")),
        workload=workload_from_dict(spec["workload"]),
        cluster=cluster_from_dict(spec.get("cluster") or {}, catalog, seed=seed),
        strategy=strategy_from_dict(spec.get("strategy")),
        fidelity=require_choice("simulation.fidelity", simulation.get("fidelity", "fast"), FIDELITIES),
        seed=seed,
        flow_engine=require_choice("simulation.flow_engine", simulation.get("flow_engine", "auto"), FLOW_ENGINES),
        heterogeneity=heterogeneity_from_dict(spec.get("heterogeneity"), catalog),
        faults=faults_from_dict(spec.get("faults")),
        variability=variability_from_dict(spec.get("variability")),
        check_memory=check_memory,
    )
    scenario = replace(scenario, strategy=resolve_backend(scenario.strategy, scenario.cluster))
    if catalog.terms is not None:  # a calibration file's terms (sim/scenario_terms.py)
        from sim.calibrated import apply_scenario_terms

        scenario = apply_scenario_terms(scenario, catalog.terms)
    validate_scenario(scenario)
    return scenario


def resolve_backend(strategy: Strategy, cluster: Cluster) -> Strategy:
    """The strategy with its collective library named (NCCL on GPUs, gloo on CPUs) and its
    algorithm and protocol checked against what that library offers."""
    backend = strategy.backend or default_backend(cluster.gpu)
    if backend == "nccl" and cluster.gpu.kind == "cpu":
        raise ConfigError("strategy.backend", backend, f"gloo or mpi on {cluster.gpu.name} (a CPU: kind cpu in the "
                          "catalog); NCCL runs on NVIDIA GPUs", related=("cluster.gpu",))
    library = BACKENDS[backend]
    composed = ("auto", "hierarchical", "hierarchical_root", "ps")
    if strategy.collective not in composed and strategy.collective not in library.algorithms:
        raise ConfigError("strategy.collective", strategy.collective,
                          f"one of {', '.join(composed + library.algorithms)} with backend {backend}")
    if strategy.protocol is not None and strategy.protocol not in library.protocols:
        raise ConfigError("strategy.protocol", strategy.protocol,
                          f"auto with backend {backend}" if not library.protocols
                          else f"one of auto, {', '.join(library.protocols)} with backend {backend}")
    from sim.costs.comm import COMPOSED_ROOT_COLLECTIVES

    roots = library.algorithms + COMPOSED_ROOT_COLLECTIVES
    if strategy.root_collective is not None and strategy.root_collective not in roots:
        raise ConfigError("strategy.root_collective", strategy.root_collective,
                          f"one of {', '.join(roots)} with backend {backend}")
    for field in ("nccl_socket_nthreads", "nccl_nsocks_perthread"):
        if getattr(strategy, field) is not None and backend != "nccl":
            raise ConfigError(f"strategy.{field}", getattr(strategy, field), "only with backend nccl (NCCL's socket transport)")
    check_library_settings(backend, strategy, cluster)
    return replace(strategy, backend=backend)


def check_library_settings(backend: str, strategy: Strategy, cluster: Cluster, where: str = "strategy",
                           names: dict[str, str] | None = None) -> None:
    """What a library's named release has: NCCL_SOCKET_NTHREADS only from 2.4.8, NCCL 1.x on one
    node, a CUDA-aware MPI only where modelled. Errors name ``names[key]`` (a command's flags) or
    ``where.key``."""
    from sim.costs.backends.mpi import MPI_LIBRARIES
    from sim.costs.backends.nccl_tables import tables_for

    def name(key: str) -> str:
        return (names or {}).get(key, f"{where}.{key}")

    if backend == "nccl":
        t = tables_for(strategy.nccl_version, name("nccl_version"))
        for field in ("nccl_socket_nthreads", "nccl_nsocks_perthread"):
            if getattr(strategy, field) is not None and not t.socket.settable:
                raise ConfigError(name(field), getattr(strategy, field),
                                  f"unset with nccl_version {strategy.nccl_version} (NCCL_SOCKET_NTHREADS and "
                                  "NCCL_NSOCKS_PERTHREAD arrived in 2.4.8: src/transport/net_socket.cc)")
        if cluster.nodes > 1 and not t.multi_node:
            raise ConfigError(name("nccl_version"), strategy.nccl_version,
                              f"2.0 or later across {cluster.nodes} nodes (NCCL 1.x is single-node)")
    if backend == "mpi" and strategy.mpi_gpu_buffers == "cuda_aware":
        library = MPI_LIBRARIES[strategy.mpi_library or "mpich-3"]
        if not library.cuda_aware:
            raise ConfigError(name("mpi_gpu_buffers"), "cuda_aware",
                              f"host_copy or host_copy_pinned with mpi_library {library.name} (CUDA-aware modelled: "
                              + ", ".join(n for n, lib in MPI_LIBRARIES.items() if lib.cuda_aware) + ")")


def validate_scenario(scenario: Scenario) -> None:
    """Checks that need more than one section: degrees, placement, faults, what the detailed
    fidelity models, memory."""
    s, c, w = scenario.strategy, scenario.cluster, scenario.workload
    check_degrees(s, c.world_size, len(w.layers), w.batch_size)
    check_large_model(s, w, c.world_size)
    check_against_cluster(scenario.heterogeneity, scenario.faults, c.world_size, c.nodes)
    if s.model_parallel:
        check_placement(c, s.tp, s.pp, s.cp)
    _require_compute(scenario)
    if scenario.fidelity == "detailed":
        from sim.engine.detailed import check_detailed

        check_detailed(scenario)
    if scenario.check_memory:
        check_memory(scenario)


def _require_compute(scenario: Scenario) -> None:
    """A workload must take time on the cluster's GPU: with every layer's FLOPs (or measured
    times) zero and no launch overhead, one GPU's iteration lasts 0 s and throughput, speedup and
    efficiency have no value."""
    from sim.costs.compute import layer_times_s
    from sim.strategy import DTYPE_BYTES

    w, gpu, precision = scenario.workload, scenario.cluster.gpu, scenario.strategy.precision
    times = layer_times_s(w, gpu, precision, DTYPE_BYTES[precision])
    for layer, (f, b) in zip(w.layers, times, strict=True):
        if not math.isfinite(f + b):
            raise ConfigError(f"workload layer {layer.name}", f"{layer.fwd_flops:g} + {layer.bwd_flops:g} FLOPs x batch "
                              f"{w.batch_size} on {gpu.name}", "FLOPs, activations and a batch whose time is a finite "
                              "number of seconds (this one overflows)", related=("workload", "cluster", "catalog"))
    if sum(f + b for f, b in times) <= 0:
        raise ConfigError("workload.layers", f"{w.name}: every layer takes 0 s on {gpu.name}",
                          "at least one layer with FLOPs, activations or measured times > 0 (or a GPU with a launch "
                          "overhead)", related=("cluster.gpu", "catalog"))


PS_KEYS = ("ps_servers", "ps_mode", "ps_placement", "ps_layout", "max_staleness", "staleness_penalty")
"""Strategy keys of the parameter server: they do nothing unless the collective is ps."""


def inapplicable_settings(spec: dict[str, Any], scenario: Scenario) -> list[tuple[str, Any, str]]:
    """The settings ``spec`` gives explicitly that do nothing for ``scenario``: (field, value, why).
    A single run says so (``scalebench simulate``: an error for a flag, a note for a config key); a
    sweep may set them in its base for the points where they apply (a schedule for the pp > 1 ones)."""
    out: list[tuple[str, Any, str]] = []
    def section(name: str) -> dict[str, Any]:
        part = spec.get(name)
        return part if isinstance(part, dict) else {}

    strategy, simulation, cluster = section("strategy"), section("simulation"), section("cluster")
    variability = section("variability")
    s, c = scenario.strategy, scenario.cluster
    if "schedule" in strategy and s.pp == 1:
        out.append(("strategy.schedule", strategy["schedule"], "only with pipeline stages (strategy.pp > 1): one stage "
                    "has no schedule"))
    for key in PS_KEYS:
        if key in strategy and s.collective != "ps":
            out.append((f"strategy.{key}", strategy[key], f"only with strategy.collective ps (here "
                        f"{s.collective}: no parameter servers)"))
    if simulation.get("flow_engine", "auto") != "auto" and scenario.fidelity != "detailed":
        out.append(("simulation.flow_engine", simulation["flow_engine"], "only with simulation.fidelity detailed (the "
                    "fast path runs no flows)"))
    if "placement" in cluster and (c.topology is None or c.topology.fabric.kind == "single_switch"):
        out.append(("cluster.placement", cluster["placement"], "only on a fabric (cluster.topology fat_tree, "
                    "rail_optimized or a fabric file): on one switch every placement is the same"))
    for key in ("gpu_cv", "iteration_cv"):
        if variability.get(key) is not None and not scenario.variability.stragglers:
            out.append((f"variability.{key}", variability[key], "only with stragglers on (variability.stragglers "
                        "false, --no-stragglers: every rank at its nominal speed, no spread)"))
    return out


def load_scenario(path: str | Path, catalog: Catalog | None = None) -> Scenario:
    return scenario_from_dict(resolve_paths(read_yaml(path), Path(path).parent), catalog)


def scenario_columns(scenario: Scenario) -> dict[str, Any]:
    """The config columns of a result row, shared by simulated and measured rows."""
    c, s, w = scenario.cluster, scenario.strategy, scenario.workload
    return {
        "scenario": scenario.name,
        "model": w.name,
        "batch_size": w.batch_size,
        "gpu": c.gpu.name,
        "nodes": c.nodes,
        "gpus_per_node": c.gpus_per_node,
        "intra_link": c.intra_link.name,
        "inter_link": c.inter_link.name,
        "nics_per_node": c.nics_per_node,
        "oversubscription": c.oversubscription,
        "strategy": s.kind,
        "framework": s.framework or "",
        "backend": s.backend or "",
        "collective": s.collective,
        "ps_servers": s.ps_servers if s.collective == "ps" else 0,
        "bucket_mib": s.bucket_bytes / (1024 * 1024),
        "overlap": s.overlap,
        "precision": s.precision,
        "codec": s.codec or s.precision,
        "codec_path": s.resolved_codec_path() or "",
        "dp": s.dp_degree(c.world_size),
        "tp": s.tp,
        "pp": s.pp,
        "micro_batches": s.micro_batches,
        "schedule": s.schedule if s.pp > 1 else "",
        "ps_mode": s.ps_mode if s.collective == "ps" else "",
        "cp": s.cp,
        "ep": s.ep,
        "vpp": s.vpp,
        "sequence_parallel": s.sequence_parallel,
        "zero_stage": s.zero_stage,
        "recompute": s.recompute,
        "attention": s.attention,
    }
