"""What a plan is asked for: a workload, a cluster's node design, the GPU counts, an objective and
the search space's bounds, read from a mapping and checked in one place.

``{workload: {...}, cluster: {...}, catalog: {...}, strategy: {precision: fp16}, plan: {...}}``:
the scenario sections as ``scalebench simulate`` reads them (the strategy section gives only the
fixed fields; the layout, the collective library and the codec are what the plan searches) and a
``plan`` section with the keys of ``PLAN_KEYS``. The CLI and the experiments' ``plan:`` section both
come through ``plan_request_from_dict``; ``names`` maps a plan key to what the user wrote (``--max-gpus``
on the command line, ``plan.max_gpus`` in a config), so an error names the flag or the field.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sim.catalog import Catalog, builtin_catalog
from sim.cluster import MAX_WORLD_SIZE, Cluster, cluster_from_dict
from sim.codecs import CODECS
from sim.costs.backends import BACKENDS, default_backend
from sim.errors import (
    ConfigError,
    reject_unknown_keys,
    require_bool,
    require_choice,
    require_positive,
)
from sim.faults import Variability, variability_from_dict
from sim.strategy import (
    COLLECTIVES,
    DTYPE_BYTES,
    RECOMPUTE,
    SCHEDULES,
    ZERO_STAGES,
    Strategy,
    strategy_from_dict,
)
from sim.units import GIB, require_size
from sim.workload import Workload, workload_from_dict

OBJECTIVES = ("time", "gpu_hours", "samples_per_s")
"""time: wall time to train a fixed number of samples (minimised); gpu_hours: GPUs x that time
(minimised); samples_per_s: throughput (maximised). time and samples_per_s order candidates
alike (one is the other's reciprocal); they differ in what the table shows."""
PLAN_KEYS = (
    "objective", "max_gpus", "global_batch", "top", "max_tp", "max_pp", "max_micro_batches", "backends",
    "collectives", "codecs", "bucket_mib", "schedules", "max_memory_gib", "max_candidates",
    "max_cp", "max_vpp", "max_ep", "zero_stages", "recompute", "allow_lossy",
)
LONG_CONTEXT_TOKENS = 16384
"""Context parallelism is searched by default from this sequence length on: NeMo's long-context
recipes, which NVIDIA trains with context parallelism, start at 16k (NeMo Framework user guide,
'Long Context Recipes': Llama 3, Mixtral, Nemotron at 16k and 64k); below it ``max_cp`` is 1
unless given."""
DEFAULT_MAX_VPP = 4
"""The search's bound on interleaving (model chunks per pipeline rank), not a framework limit
(assumed: a bound on the search; --max-vpp widens it)."""
DEFAULT_MAX_CANDIDATES = 1_000_000
"""A larger space is refused before anything is simulated (about 5 minutes at the measured rate)."""
FIXED_STRATEGY_KEYS = ("precision", "stage_balance", "protocol", "ps_servers", "ps_layout", "overlap",
                       "nccl_socket_nthreads", "nccl_nsocks_perthread", "nccl_version", "mpi_library", "mpi_gpu_buffers",
                       "attention", "moe_capacity_factor",
                       "data_loader", "data_workers")
"""Strategy fields a plan keeps as given; every other one it searches or leaves at its default."""
DEFAULT_BUCKET_MIB = (5.0, 25.0, 100.0)
"""Bucket sizes tried: DDP's default 25 MiB (torch/nn/parallel/distributed.py), a fifth and four times it."""
DEFAULT_CODECS = (None,)
"""Wire formats tried by default: the compute precision only. A codec narrower than the precision
rounds every gradient (it changes the training's numerics), so a plan never picks one unless asked:
``allow_lossy`` (--allow-lossy) adds LOSSY_CODECS, ``codecs`` (--codecs) names its own."""
LOSSY_CODECS = ("fp16", "fp8_e4m3")
"""What --allow-lossy adds: fp16 and fp8 (e4m3) on the wire; those no smaller than the precision are
left out, non-summable ones are tried on both of their paths."""
ALLREDUCE_ALGORITHMS = {
    "nccl": ("ring", "tree", "nvls"),
    "gloo": ("ring",),
    "mpi": ("ring", "recursive_doubling", "rabenseifner"),
}
"""The allreduce algorithms each library can be told to run (its own ``algorithms`` also lists
ones for other operations: MPICH's binomial broadcast, pairwise all-to-all)."""


@dataclass(frozen=True)
class PlanRequest:
    workload: Workload
    """batch_size: the per-replica batch when the plan keeps it (no global batch)."""
    cluster: Cluster
    """The node design: one full node (``with_world_size`` gives any count of GPUs)."""
    gpus: int
    """The count planned for (--gpus)."""
    gpu_counts: tuple[int, ...]
    strategy: Strategy
    """The fixed fields (precision, stage balance ...); layout, library and codec are searched."""
    objective: str = "time"
    global_batch: int | None = None
    """Samples per iteration over all replicas; None: weak scaling, the workload's batch per replica."""
    global_batch_source: str = ""
    """Where the global batch came from when the plan was not given one: the model's published tokens
    per step (``Workload.global_batch_tokens``); empty when given (or weak scaling)."""
    max_tp: int = 1
    max_pp: int | None = None
    max_cp: int = 1
    """Largest context-parallel degree searched (transformers; LONG_CONTEXT_TOKENS)."""
    max_vpp: int = DEFAULT_MAX_VPP
    """Most model chunks per pipeline rank (the interleaved schedule)."""
    max_ep: int = 1
    """Largest expert-parallel degree (mixture-of-experts workloads; default: the experts)."""
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    """ZeRO stages the search may use (sim.planner.search.variants keeps the lightest that fit)."""
    recompute: tuple[str, ...] = ("none", "selective", "full")
    """Recomputation settings the search may use, lightest first."""
    max_micro_batches: int | None = None
    backends: tuple[str, ...] = ("nccl",)
    """Default: the devices' own library alone (NCCL on GPUs: what GPU clusters run; gloo and MPI on
    CPUs); others only when named (--backends)."""
    allow_lossy: bool = False
    """Whether the default codecs include the lossy ones (LOSSY_CODECS)."""
    collectives: tuple[str, ...] | None = None
    """None: auto, each allreduce algorithm of the library, and hierarchical."""
    codecs: tuple[tuple[str | None, str | None], ...] = ((None, None),)
    """(codec, path) pairs; (None, None): gradients in the compute precision."""
    bucket_mib: tuple[float, ...] = (25.0,)
    schedules: tuple[str, ...] = SCHEDULES
    memory_limit_bytes: float = 0.0
    top: int = 5
    max_candidates: int = DEFAULT_MAX_CANDIDATES
    catalog_spec: dict[str, Any] | None = None
    """The config's own catalog section, kept for the candidates' specs."""
    catalog: Catalog | None = None
    """The catalog the config's section extends (a --catalog file's, or None: the built-in one)."""
    workload_spec: dict[str, Any] | None = None
    """The workload as a candidate's scenario spells it (``reproducible_workload``)."""
    variability: Variability = Variability()
    """How the ranks differ in speed: every candidate waits for its slowest (sim.costs.stragglers)."""

    @property
    def precision(self) -> str:
        return self.strategy.precision


def sensible_gpu_counts(gpus: int, max_gpus: int | None, gpus_per_node: int) -> tuple[int, ...]:
    """``gpus`` alone, or with ``max_gpus`` every count a node design allows up to it: the divisors
    of a node (one partly filled node), then whole nodes doubling (1, 2, 4 ... nodes) and
    ``max_gpus`` itself when it fills whole nodes; ``gpus`` is always one of them."""
    if max_gpus is None:
        return (gpus,)
    counts = {d for d in range(1, gpus_per_node + 1) if gpus_per_node % d == 0}
    nodes = 1
    while nodes * gpus_per_node <= max_gpus:
        counts.add(nodes * gpus_per_node)
        nodes *= 2
    if max_gpus % gpus_per_node == 0:
        counts.add(max_gpus)
    counts.add(gpus)
    return tuple(sorted(c for c in counts if c <= max_gpus))


def default_precision(cluster: Cluster) -> str:
    """Mixed precision where the GPU computes 16-bit faster than fp32 (fp16 first, as Megatron-LM
    trains), else fp32."""
    peaks = cluster.gpu.peak_flops
    for dtype in ("fp16", "bf16"):
        if peaks.get(dtype, 0.0) > peaks["fp32"]:
            return dtype
    return "fp32"


SCENARIO_NAMES = {"model": "workload.model", "gpus": "cluster.gpus", "batch_size": "workload.batch_size"}
"""Where a config holds what the plan's messages name (a flag on the command line)."""


def _name_of(names: dict[str, str] | Callable[[str], str] | None) -> Callable[[str], str]:
    if callable(names):
        return names
    table = names or {}
    return lambda key: table.get(key, SCENARIO_NAMES.get(key, f"plan.{key}"))


def plan_request_from_dict(spec: dict[str, Any], catalog: Catalog | None = None,
                           names: dict[str, str] | Callable[[str], str] | None = None) -> PlanRequest:
    """Build and check a request; every error names its field (or flag, through ``names``)."""
    name = _name_of(names)
    if not isinstance(spec, dict):
        raise ConfigError("config", type(spec).__name__, "a mapping with workload, cluster, strategy, catalog, plan")
    reject_unknown_keys("config", spec, ("name", "description", "workload", "cluster", "strategy", "catalog", "plan",
                                         "simulation", "variability"))
    base_catalog = catalog
    catalog = (catalog or builtin_catalog()).extended(spec.get("catalog"))
    if "workload" not in spec:
        raise ConfigError(name("model"), None, "a zoo model name or a workload section")
    simulation = spec.get("simulation") or {}
    if not isinstance(simulation, dict) or set(simulation) - {"seed"}:
        raise ConfigError("simulation", simulation, "at most {seed: N}: a plan simulates on the fast path with the "
                          "memory check on (--verify K re-runs the best in detailed mode)")
    workload = workload_from_dict(spec["workload"])
    cluster_spec = dict(spec.get("cluster") or {})
    if "gpus" not in cluster_spec and "nodes" not in cluster_spec:
        raise ConfigError(name("gpus"), None, "the number of GPUs to plan for (a positive integer)")
    planned = cluster_from_dict(cluster_spec, catalog)
    per_node = cluster_spec.get("gpus_per_node", planned.gpus_per_node)
    cluster = replace(planned, nodes=1, gpus_per_node=max(planned.gpus_per_node, per_node))
    options = spec.get("plan") or {}
    if not isinstance(options, dict):
        raise ConfigError("plan", options, "a mapping with keys " + ", ".join(PLAN_KEYS))
    reject_unknown_keys("plan", options, PLAN_KEYS)
    strategy = _fixed_strategy(spec.get("strategy"), cluster)
    if catalog.terms is not None:  # a calibration file's terms, as scenario_from_dict sets them
        from sim.calibrated import apply_terms_to_strategy

        strategy = apply_terms_to_strategy(strategy, catalog.terms)
    g = cluster.gpus_per_node

    def opt(key: str, default: Any = None) -> Any:
        return options.get(key, default)

    objective = require_choice(name("objective"), opt("objective", "time"), OBJECTIVES)
    max_gpus = opt("max_gpus")
    if max_gpus is not None:
        max_gpus = require_positive(name("max_gpus"), max_gpus, integer=True, maximum=MAX_WORLD_SIZE)
        if max_gpus < planned.world_size:
            raise ConfigError(name("max_gpus"), max_gpus, f"at least the {planned.world_size} GPUs planned for (--gpus)")
        if max_gpus > g and max_gpus % g:
            raise ConfigError(name("max_gpus"), max_gpus, f"a multiple of gpus_per_node={g}")
    global_batch = opt("global_batch")
    if global_batch is not None:
        global_batch = require_positive(name("global_batch"), global_batch, integer=True)
        if isinstance(spec["workload"], dict) and "batch_size" in spec["workload"]:
            raise ConfigError(name("batch_size"), spec["workload"]["batch_size"],
                              f"absent with {name('global_batch')} (the batch per replica is then the global batch / dp)")
    batch_given = isinstance(spec["workload"], dict) and "batch_size" in spec["workload"]
    global_batch_source = ""
    if global_batch is None and not batch_given and workload.global_batch_tokens and workload.architecture is not None:
        # a large model is trained with a fixed number of tokens per step, not a fixed batch per GPU (weak scaling
        # would favour the largest dp): its authors' own, in sequences of the workload's length
        global_batch = max(1, workload.global_batch_tokens // workload.architecture.seq_len)
        global_batch_source = (f"{workload.name}'s published {workload.global_batch_tokens:,} tokens per step: "
                               f"{workload.global_batch_source}; {name('global_batch')} sets another, "
                               f"{name('batch_size')} plans weak scaling")
    max_tp = require_positive(name("max_tp"), opt("max_tp", g), integer=True)
    max_pp = opt("max_pp")
    if max_pp is not None:
        max_pp = require_positive(name("max_pp"), max_pp, integer=True)
    arch = workload.architecture
    long_context = arch is not None and arch.seq_len >= LONG_CONTEXT_TOKENS
    max_cp = require_positive(name("max_cp"), opt("max_cp", g if long_context else 1), integer=True)
    max_vpp = require_positive(name("max_vpp"), opt("max_vpp", DEFAULT_MAX_VPP), integer=True)
    max_ep = require_positive(name("max_ep"), opt("max_ep", arch.experts if arch is not None and arch.moe else 1),
                              integer=True)
    max_micro = opt("max_micro_batches")
    if max_micro is not None:
        max_micro = require_positive(name("max_micro_batches"), max_micro, integer=True)
    limit = float(cluster.gpu.memory_bytes)
    if opt("max_memory_gib") is not None:
        gib = require_size(name("max_memory_gib"), opt("max_memory_gib"), "GiB")
        if gib * GIB > limit:
            raise ConfigError(name("max_memory_gib"), gib, f"at most the {limit / GIB:g} GiB of a {cluster.gpu.name}")
        limit = float(gib * GIB)
    backends = _backends(opt("backends"), cluster, name("backends"), strategy.protocol)
    allow_lossy = require_bool(name("allow_lossy"), opt("allow_lossy", False))
    return PlanRequest(
        workload=workload,
        cluster=cluster,
        gpus=planned.world_size,
        gpu_counts=sensible_gpu_counts(planned.world_size, max_gpus, g),
        strategy=strategy,
        objective=objective,
        global_batch=global_batch,
        global_batch_source=global_batch_source,
        max_tp=max_tp,
        max_pp=max_pp,
        max_cp=max_cp,
        max_vpp=max_vpp,
        max_ep=max_ep,
        max_micro_batches=max_micro,
        backends=backends,
        collectives=_collectives(opt("collectives"), name("collectives")),
        codecs=_codecs(opt("codecs"), strategy.precision, name("codecs"), allow_lossy),
        allow_lossy=allow_lossy,
        bucket_mib=_buckets(opt("bucket_mib"), name("bucket_mib")),
        schedules=_choices(opt("schedules"), SCHEDULES, name("schedules")) if opt("schedules") is not None else SCHEDULES,
        zero_stages=_zero_stages(opt("zero_stages"), name("zero_stages")),
        recompute=tuple(r for r in RECOMPUTE if r in _choices(opt("recompute"), RECOMPUTE, name("recompute")))
        if opt("recompute") is not None else RECOMPUTE,
        memory_limit_bytes=limit,
        top=require_positive(name("top"), opt("top", 5), integer=True),
        max_candidates=require_positive(name("max_candidates"), opt("max_candidates", DEFAULT_MAX_CANDIDATES),
                                        integer=True),
        catalog_spec=spec.get("catalog"),
        catalog=base_catalog,
        workload_spec=reproducible_workload(workload),
        variability=variability_from_dict(spec.get("variability")),
    )


def reproducible_workload(w: Workload) -> dict[str, Any]:
    """A workload section that builds ``w`` again without its batch: the zoo name where the zoo's
    table is the same (a sequence length, an architecture or a CSV of one's own make another),
    else the layer table inline."""
    from sim.workload import load_workload, zoo_names

    spec: dict[str, Any] = {"model": w.name, "optimizer": w.optimizer}
    if w.data != "synthetic":
        spec["data"] = w.data
    if w.name in zoo_names() and load_workload(w.name).layers == w.layers:
        return spec
    if w.architecture is not None:  # a transformer in closed form: its dimensions, so memory keeps its formula
        from sim.workload import DECODER, transformer_layers

        if transformer_layers(w.architecture) == w.layers:
            if w.name not in zoo_names():
                spec["model"] = DECODER
            return {**spec, "architecture": w.architecture.as_dict()}
    spec["layers"] = [{"layer": x.name, "kind": x.kind, "param_count": x.param_count, "fwd_flops": x.fwd_flops,
                       "bwd_flops": x.bwd_flops, "activation_elems": x.activation_elems,
                       **({"fwd_time_s": x.fwd_time_s, "bwd_time_s": x.bwd_time_s} if x.fwd_time_s is not None else {})}
                      for x in w.layers]
    return spec


def _fixed_strategy(spec: Any, cluster: Cluster) -> Strategy:
    if not isinstance(spec or {}, dict):
        raise ConfigError("strategy", spec, "a mapping of fixed fields: " + ", ".join(FIXED_STRATEGY_KEYS))
    spec = dict(spec or {})
    searched = sorted(set(spec) - set(FIXED_STRATEGY_KEYS))
    if searched:
        raise ConfigError(f"strategy.{searched[0]}", spec[searched[0]],
                          "a field the plan keeps fixed (" + ", ".join(FIXED_STRATEGY_KEYS) + "); the plan searches the rest")
    spec.setdefault("precision", default_precision(cluster))
    return strategy_from_dict(spec)


def _as_list(value: Any, field: str) -> list[Any]:
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return [value]
    if not isinstance(value, list) or not value:
        raise ConfigError(field, value, "a non-empty list")
    return value


def _choices(value: Any, allowed: tuple[str, ...], field: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(require_choice(field, v, allowed) for v in _as_list(value, field)))


def _backends(value: Any, cluster: Cluster, field: str, protocol: str | None) -> tuple[str, ...]:
    """What the devices can run: NCCL needs GPUs; gloo and MPI run on either; a fixed protocol
    (strategy.protocol) only the libraries that have it."""
    usable = tuple(b for b in BACKENDS if (cluster.gpu.kind == "gpu" or b != "nccl")
                   and (protocol is None or protocol in BACKENDS[b].protocols))
    if not usable:
        raise ConfigError("strategy.protocol", protocol, f"none on {cluster.gpu.name}: no library there has it")
    if value is None:
        first = default_backend(cluster.gpu)
        if cluster.gpu.kind == "gpu" and first in usable:
            return (first,)  # a GPU cluster runs NCCL; gloo or MPI only when asked (--backends)
        return (first, *(b for b in usable if b != first))
    chosen = _choices(value, tuple(BACKENDS), field)
    for b in chosen:
        if b not in usable:
            raise ConfigError(field, b, f"one of {', '.join(usable)} on {cluster.gpu.name}"
                              f"{' with protocol ' + protocol if protocol else ''} (NCCL needs GPUs)")
    return chosen


def _collectives(value: Any, field: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    return _choices(value, COLLECTIVES, field)


def _codecs(value: Any, precision: str, field: str, allow_lossy: bool = False) -> tuple[tuple[str | None, str | None], ...]:
    """``none``, a codec (every path it has), or ``codec:path``; default DEFAULT_CODECS, with
    ``allow_lossy`` also LOSSY_CODECS smaller than the precision."""
    from sim.codecs import CODEC_PATHS

    if value is None:
        wanted = DEFAULT_CODECS + (LOSSY_CODECS if allow_lossy else ())
        names = [c for c in wanted if c is None or CODECS[c].bytes_per_elem < DTYPE_BYTES[precision]]
        return tuple(p for c in names for p in _paths(c))
    out: list[tuple[str | None, str | None]] = []
    for item in _as_list(value, field):
        text = str(item)
        if text in ("none", precision):
            out.append((None, None))
            continue
        codec, _, path = text.partition(":")
        require_choice(field, codec, ("none", *CODECS))
        if path:
            require_choice(field, path, CODEC_PATHS)
            if path == "allreduce" and not CODECS[codec].summable:
                raise ConfigError(field, text, f"{codec}:allgather or {codec}:reduce_scatter ({codec} cannot be summed in place)")
            out.append((codec, path))
        else:
            out.extend(_paths(codec))
    return tuple(dict.fromkeys(out))


def _paths(codec: str | None) -> list[tuple[str | None, str | None]]:
    if codec is None:
        return [(None, None)]
    if CODECS[codec].summable:
        return [(codec, "allreduce")]
    return [(codec, "allgather"), (codec, "reduce_scatter")]


def _zero_stages(value: Any, field: str) -> tuple[int, ...]:
    if value is None:
        return ZERO_STAGES
    stages = set()
    for v in _as_list(value, field):
        try:
            stage = int(v)
        except (TypeError, ValueError):
            stage = -1
        if isinstance(v, bool) or stage not in ZERO_STAGES or str(v).strip() != str(stage):
            raise ConfigError(field, v, "ZeRO stages among 0, 1, 2, 3")
        stages.add(stage)
    return tuple(sorted(stages))


def _buckets(value: Any, field: str) -> tuple[float, ...]:
    if value is None:
        return DEFAULT_BUCKET_MIB
    out = []
    for v in _as_list(value, field):
        v = require_size(field, v, "MiB")
        if v == float("inf"):
            raise ConfigError(field, v, "finite sizes in MiB")
        out.append(float(v))
    return tuple(dict.fromkeys(out))


def with_options(request: PlanRequest, **changes: Any) -> PlanRequest:
    return replace(request, **changes)
