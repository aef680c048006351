"""The search: every candidate of the space, the rules that remove some, the rest simulated and
ranked by the objective, the Pareto fronts, and one sentence on why the winner wins.

Objectives (all per sample, so candidates with different global batches compare; with a fixed
``global_batch`` they order exactly as per-iteration figures would):

- ``time``: seconds per sample = iteration time / (dp x per-replica batch), minimised: the wall time
  of a training run of a fixed number of samples;
- ``samples_per_s``: its reciprocal, maximised (the same order, shown as throughput);
- ``gpu_hours``: GPUs x seconds per sample, minimised: what the run costs in GPU time.

Ties (equal objective) go to fewer GPUs, then to less memory per GPU, then to the earlier
candidate of the space.
"""

from __future__ import annotations

import time
from bisect import insort
from collections.abc import Callable
from dataclasses import dataclass, field

from sim.errors import ConfigError
from sim.planner.evaluate import (
    DISTRIBUTED_OPTIMIZER_STAGE,
    Evaluator,
    Outcome,
    Rejection,
    is_pipelined,
)
from sim.planner.request import PlanRequest
from sim.planner.space import REASONS, Layout, Rejected, Sync, family, layout_syncs, layouts

RULE_ORDER = ("tp", "pp_modules", "max_pp", "placement", "global_batch", "memory", "heavier", "library", "bound")
"""The rules in the order they apply: the first one a candidate breaks is its reason."""
TIE_REL = 1e-12


@dataclass(slots=True)
class Candidate:
    index: int
    layout: Layout
    sync: Sync
    outcome: Outcome | None = None
    reason: str = ""
    """Empty when simulated; else a key of space.REASONS."""
    detail: str = ""
    memory_bytes: float = 0.0

    @property
    def samples(self) -> int:
        return self.layout.global_batch

    @property
    def time_per_sample_s(self) -> float:
        assert self.outcome is not None
        return self.outcome.iteration_time_s / self.samples

    @property
    def gpu_s_per_sample(self) -> float:
        return self.layout.gpus * self.time_per_sample_s

    def objective_value(self, objective: str) -> float:
        """What is minimised (samples_per_s: seconds per sample, the reciprocal)."""
        return self.gpu_s_per_sample if objective == "gpu_hours" else self.time_per_sample_s

    def label(self) -> str:
        return f"{self.layout.label()}; {self.sync.label()}"

    def spec(self, request: PlanRequest) -> dict:
        """The candidate as a scenario mapping (``scalebench simulate``'s keys)."""
        return candidate_spec(request, self.layout, self.sync)


def candidate_spec(request: PlanRequest, layout: Layout, sync: Sync) -> dict:
    """A scenario mapping that ``sim.config.scenario_from_dict`` turns into the candidate's scenario."""
    w, c, base = request.workload, request.cluster, request.strategy
    workload: dict = {**(request.workload_spec or {"model": w.name, "optimizer": w.optimizer}), "batch_size": layout.batch}
    strategy: dict = {
        "kind": "hybrid" if layout.tp * layout.pp > 1 else "data_parallel", "tp": layout.tp, "pp": layout.pp,
        "micro_batches": layout.micro_batches, "schedule": layout.schedule, "backend": sync.backend,
        "collective": sync.collective, "bucket_mib": sync.bucket_mib, "precision": base.precision,
        "stage_balance": base.stage_balance, "overlap": base.overlap, "ps_servers": base.ps_servers,
        "ps_layout": base.ps_layout,
    }
    for key, value, plain in (("cp", layout.cp, 1), ("vpp", layout.vpp, 1), ("ep", layout.ep, 1),
                              ("sequence_parallel", layout.sequence_parallel, False),
                              ("zero_stage", layout.zero_stage, 0),
                              ("overlap_param_gather", layout.zero_stage == DISTRIBUTED_OPTIMIZER_STAGE, False),
                              ("overlap_grad_reduce",
                               layout.zero_stage == DISTRIBUTED_OPTIMIZER_STAGE and is_pipelined(layout), False),
                              ("recompute", layout.recompute, "none"),
                              ("attention", base.attention, "auto"), ("moe_capacity_factor", base.moe_capacity_factor, None)):
        if value != plain:
            strategy[key] = value
    if base.protocol is not None:
        strategy["protocol"] = base.protocol
    library_keys = {"nccl": ("nccl_socket_nthreads", "nccl_nsocks_perthread", "nccl_version"),
                    "mpi": ("mpi_library", "mpi_gpu_buffers")}
    for key in library_keys.get(sync.backend, ()):  # the library's release and settings, where the plan was given them
        if getattr(base, key) is not None:
            strategy[key] = getattr(base, key)
    if sync.codec is not None:
        strategy["codec"], strategy["codec_path"] = sync.codec, sync.codec_path
    for key in ("data_loader", "data_workers"):  # the input pipeline, where the plan was given one
        if getattr(base, key) is not None:
            strategy[key] = getattr(base, key)
    spec = {
        "name": f"plan-{w.name}-{layout.gpus}",
        "workload": workload,
        "cluster": {"gpus": layout.gpus, "gpus_per_node": c.gpus_per_node, "gpu": c.gpu.name,
                    "intra_link": c.intra_link.name, "inter_link": c.inter_link.name,
                    "nics_per_node": c.nics_per_node, "oversubscription": c.oversubscription,
                    # a host other than the GPU's usual one (sim.catalog.usual_host), as the request named it
                    **({"host": c.host.name} if c.host is not None and c.host.name != c.gpu.host else {})},
        "strategy": strategy,
    }
    if request.catalog_spec:
        spec["catalog"] = request.catalog_spec
    variability = variability_spec(request.variability)
    if variability:
        spec["variability"] = variability
    return spec


def variability_spec(v) -> dict:
    """The ``variability:`` section that makes ``v`` again (empty: the default)."""
    from sim.faults import Variability

    default = Variability()
    return {k: getattr(v, k) for k in ("stragglers", "gpu_cv", "iteration_cv") if getattr(v, k) != getattr(default, k)}


@dataclass
class PlanResult:
    request: PlanRequest
    candidates: list[Candidate]
    """Every candidate that reached the simulator's doorstep: simulated or removed by memory or the library."""
    rejected_layouts: list[Rejected]
    ranked: list[Candidate]
    """Simulated candidates, best first."""
    removed: dict[str, int] = field(default_factory=dict)
    """Reason -> candidates it removed (layout rules count every candidate the layout stood for)."""
    wall_s: float = 0.0
    simulations: int = 0

    @property
    def enumerated(self) -> int:
        return len(self.candidates) + sum(r.candidates for r in self.rejected_layouts)

    @property
    def simulated(self) -> int:
        return len(self.ranked)

    @property
    def winner(self) -> Candidate:
        return self.ranked[0]

    def per_iteration(self) -> bool:
        """Whether every simulated candidate processes the same samples per iteration (fixed global batch)."""
        return len({c.samples for c in self.ranked}) <= 1

    def distinct(self, limit: int | None = None) -> list[tuple[Candidate, list[Candidate]]]:
        """The ranking with exact ties of one layout folded into its first candidate (the others
        differ only in choices that change nothing here, e.g. NCCL's auto running the ring anyway)."""
        out: list[tuple[Candidate, list[Candidate]]] = []
        objective = self.request.objective
        for c in self.ranked:
            if out:
                head, same = out[-1]
                a, b = head.objective_value(objective), c.objective_value(objective)
                if head.layout == c.layout and abs(a - b) <= TIE_REL * max(abs(a), abs(b)):
                    same.append(c)
                    continue
            if limit is not None and len(out) == limit:
                break
            out.append((c, []))
        return out


PROGRESS_STEPS = 200
"""How often a search reports its progress: about this many times over its candidates ..."""
PROGRESS_EVERY = 1000
"""... and at least every this many candidates (a few a second at the measured rate)."""


def plan_search(request: PlanRequest, evaluator: Evaluator | None = None, prune: bool = True,
                progress: Callable[[int, int], None] | None = None) -> PlanResult:
    """Enumerate, prune, simulate and rank; ``NoPlan`` when nothing is left. ``progress(done,
    total)`` hears how many of the candidates are done, simulated or bound-pruned: at the start,
    about PROGRESS_STEPS times (at least every PROGRESS_EVERY) and at the end (``scalebench plan``
    says up front how many for a large search).

    Two prunings keep a large-model space (ZeRO stages, recomputation, sequence, context and
    expert parallelism, interleaving) to seconds, neither changing the ranking's head:

    - memory settings (``variants``): for each layout and library, each ZeRO stage with the
      lightest recomputation that fits (none, selective, full: recomputing more only adds time);
      ZeRO-1 is left for ZeRO-2, which costs the same time here with less memory;
    - a lower bound (``prune``): a candidate's iteration is at least its pipeline's flush and its
      optimizer step, whatever its synchronisation; layouts are simulated from the lowest bound
      up, and a candidate whose bound is already slower than both the best ``BOUND_KEEP`` x top
      found, the best at its GPU count and the best of its structure (space.family) is counted
      ('bound'), not simulated. The top of the ranking, each GPU count's best (the Pareto fronts),
      each structure's best (the explanation) and the winner are those of the whole space; ``prune=False`` simulates every candidate (tests/test_plan_bruteforce.py)."""
    start = time.perf_counter()
    evaluator = evaluator or Evaluator(request)
    candidates: list[Candidate] = []
    rejected: list[Rejected] = []
    space = list(layouts(request))
    kept = [item for item in space if isinstance(item, Layout)]
    rejected.extend(item for item in space if isinstance(item, Rejected))
    _check_flush_work(request, kept)
    work: list[tuple[Layout, str, list[Sync]]] = []
    size = 0
    sync_lists: dict[tuple, list[Sync]] = {}

    def own_syncs(v: Layout, backend: str) -> list[Sync]:
        key = (v.gpus, v.tp, v.pp, v.dp, v.cp, v.ep, v.zero_stage, backend)
        if key not in sync_lists:
            sync_lists[key] = [x for x in layout_syncs(request, v) if x.backend == backend]
        return sync_lists[key]

    for layout in kept:
        for backend in _layout_backends(request, layout):
            for variant, verdict in variants(evaluator, layout, backend):
                own = own_syncs(variant, backend)
                if verdict is not None:
                    reason, detail, need = verdict
                    rejected.append(Rejected(variant.gpus, variant.tp, variant.pp, reason, detail, len(own), need, variant))
                    continue
                work.append((variant, backend, own))
                size += len(own)
    if size > request.max_candidates:
        raise ConfigError("--max-candidates", f"{size:,} candidates to simulate",
                          f"at most {request.max_candidates:,} (narrow the space: --max-gpus, --backends, --collectives, "
                          "--codecs, --bucket-mib, --max-micro-batches, --max-cp, --max-vpp; or raise --max-candidates)")
    objective = request.objective

    def per_objective(layout: Layout, seconds: float) -> float:
        per_sample = seconds / layout.global_batch
        return layout.gpus * per_sample if objective == "gpu_hours" else per_sample

    bounds = [per_objective(v, evaluator.lower_bound_s(v, b)) if prune else 0.0 for v, b, _ in work]
    order = sorted(range(len(work)), key=lambda i: bounds[i]) if prune else range(len(work))
    keep = BOUND_KEEP * request.top
    best: list[float] = []  # the best ``keep`` objective values found so far, ascending
    best_at: dict[int, float] = {}
    best_of: dict[str, float] = {}  # per structure (space.family): the explanation compares their bests
    every = max(1, min(PROGRESS_EVERY, size // PROGRESS_STEPS))
    if progress is not None:
        progress(0, size)
    for i in order:
        variant, _backend, own = work[i]
        for sync in own:
            c = Candidate(len(candidates), variant, sync)
            candidates.append(c)
            if progress is not None and len(candidates) % every == 0:
                progress(len(candidates), size)
            structure = family(variant)
            if (prune and len(best) >= keep and bounds[i] > best[-1] and bounds[i] > best_at.get(variant.gpus, float("inf"))
                    and bounds[i] > best_of.get(structure, float("inf"))):
                c.reason = "bound"
                c.detail = f"{variant.label()}: at least {bounds[i]:.6g} {objective} per sample, the {keep}th best {best[-1]:.6g}"
                continue
            try:
                c.outcome = evaluator.evaluate(variant, sync)
                c.memory_bytes = c.outcome.memory_bytes
            except Rejection as err:
                c.reason, c.detail, c.memory_bytes = err.reason, err.detail, err.memory_bytes
                continue
            value = c.objective_value(objective)
            best_at[variant.gpus] = min(best_at.get(variant.gpus, float("inf")), value)
            best_of[structure] = min(best_of.get(structure, float("inf")), value)
            if len(best) < keep or value < best[-1]:
                insort(best, value)
                del best[keep:]
    if progress is not None:
        progress(len(candidates), size)
    candidates.sort(key=lambda c: c.index)
    ranked = sorted((c for c in candidates if c.outcome is not None),
                    key=lambda c: (c.objective_value(objective), c.layout.gpus, c.memory_bytes, c.index))
    removed = {reason: 0 for reason in RULE_ORDER}
    for r in rejected:
        removed[r.reason] += r.candidates
    for c in candidates:
        if c.reason:
            removed[c.reason] += 1
    result = PlanResult(request, candidates, rejected, ranked, {k: v for k, v in removed.items() if v},
                        time.perf_counter() - start, evaluator.simulations)
    if not ranked:
        raise no_plan(result)
    return result


BOUND_KEEP = 5
"""The search keeps exact at least this many times --top candidates at the head of the ranking
(the table's top, the ties it folds, the runner-up of the sentence)."""


def _layout_backends(request: PlanRequest, layout: Layout) -> tuple[str, ...]:
    """The libraries a layout's candidates use (as ``layout_syncs`` lists them)."""
    return tuple(dict.fromkeys(x.backend for x in layout_syncs(request, layout)))


PIPELINE_FREE_ZERO_STAGE = 2
"""Not searched with pipeline stages: DeepSpeed's pipeline engine asserts ZeRO stage < 2
(deepspeed/runtime/pipe/engine.py, 'ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism'),
Megatron-LM shards only the optimizer (its distributed optimizer, ZeRO-1); ZeRO-3 with stages stays
(torch FSDP composes with torch.distributed.pipelining, as torchtitan runs them)."""


def variants(evaluator: Evaluator, layout: Layout, backend: str) -> list[tuple[Layout, tuple[str, str, float] | None]]:
    """The layout's memory settings, each with why it is not simulated (None: it is): per ZeRO stage
    of the request (the first only without data or context parallelism, where sharding is a no-op;
    no ZeRO-2 with pipeline stages, PIPELINE_FREE_ZERO_STAGE) the recomputations in
    order (transformers; the first only otherwise), the first that fits kept, the heavier ones
    'heavier', those that do not fit 'memory' (with what they need)."""
    from dataclasses import replace

    request = evaluator.request
    arch = request.workload.architecture
    stages = request.zero_stages if layout.dp * layout.cp > 1 else request.zero_stages[:1]
    if layout.pp > 1:  # DeepSpeed's pipeline engine refuses ZeRO-2/3 and Megatron-LM shards at most the optimizer
        stages = tuple(x for x in stages if x != PIPELINE_FREE_ZERO_STAGE) or stages[:1]
    recomputes = request.recompute if arch is not None else request.recompute[:1]
    base = Sync.of(backend, "auto", None, None, request.bucket_mib[0])
    out: list[tuple[Layout, tuple[str, str, float] | None]] = []
    fits_unsharded: set[str] = set()  # recomputations that fit without ZeRO: they fit with ZeRO-1/2 too
    for stage in stages:
        fitted = None
        for recompute in recomputes:
            variant = replace(layout, zero_stage=stage, recompute=recompute)
            if fitted is not None:
                out.append((variant, ("heavier", f"{variant.label()}: recompute {fitted} fits", 0.0)))
                continue
            # ZeRO-1/2 only shard what stage 0 holds (no buffer of their own): what fits unsharded fits
            if not (stage in (1, 2) and recompute in fits_unsharded):
                need = evaluator.memory(variant, base, evaluator.bounds(variant, backend))
                if need > request.memory_limit_bytes:
                    out.append((variant, ("memory", f"{variant.label()}: {need / 2**30:.1f} GiB per GPU", need)))
                    continue
            if stage == 0:
                fits_unsharded.add(recompute)
            fitted = recompute
            out.append((variant, None))
    return out


MAX_FLUSH_OPERATIONS = 50_000_000
"""Stage operations the pipelines of one search may replay (2 x stages x micro-batches each, about
2.4 us apiece as measured: two minutes); a larger space is refused before anything runs."""


def _check_flush_work(request: PlanRequest, kept: list[Layout]) -> None:
    """The pipelines' replay grows with stages x micro-batches, not with the candidates: a global
    batch of millions makes millions of micro-batches. Distinct flushes: one per layout, and per
    library with TP (its allreduces change the stage times)."""
    work = sum(2 * x.pp * x.micro_batches * (len(request.backends) if x.tp > 1 else 1)
               for x in kept if x.pp > 1 or x.tp > 1 or x.micro_batches > 1)
    if work > MAX_FLUSH_OPERATIONS:
        deepest = max(x.micro_batches for x in kept)
        raise ConfigError("--max-micro-batches", request.max_micro_batches or "unlimited",
                          f"a limit that keeps the pipelines under {MAX_FLUSH_OPERATIONS:,} stage operations to simulate "
                          f"(this space has {work:,}, up to {deepest:,} micro-batches per pipeline)")


class NoPlan(ConfigError):
    """No candidate is left: the message says which rule removed the last ones."""

    def __init__(self, field_name: str, message: str):
        super().__init__(field_name, None, message)
        self.message = message
        self.args = (f"{field_name}: {message}",)

    def __reduce__(self):
        return (type(self), (self.field, self.message))


def no_plan(result: PlanResult) -> NoPlan:
    request = result.request
    left = result.enumerated
    culprit = RULE_ORDER[-1]
    for rule in RULE_ORDER:
        left -= result.removed.get(rule, 0)
        if left <= 0:
            culprit = rule
            break
    model, gpus = request.workload.name, "/".join(str(g) for g in request.gpu_counts)
    where = f"{model} on {gpus} GPU{'' if request.gpu_counts == (1,) else 's'}"
    if culprit == "memory":
        fits = [(c.memory_bytes, c.layout) for c in result.candidates if c.reason == "memory"]
        fits += [(r.memory_bytes, r.layout) for r in result.rejected_layouts if r.reason == "memory" and r.layout]
        need, best = min(fits, key=lambda item: item[0])
        limit = request.memory_limit_bytes / 2**30
        own = request.memory_limit_bytes < request.cluster.gpu.memory_bytes
        extras = f", {best.extras()}" if best.extras() else ""
        return NoPlan("--max-memory-gib" if own else "memory per rank",
                      f"every layout of {where} needs more than {limit:g} GiB per GPU; the smallest needs "
                      f"{need / 2**30:.1f} GiB at tp {best.tp}, pp {best.pp}{f', cp {best.cp}' if best.cp > 1 else ''} "
                      f"(dp {best.dp}, {best.micro_batches} micro-batch"
                      f"{'es' if best.micro_batches > 1 else ''}"
                      f"{', ' + best.schedule if best.pp > 1 else ''}{extras}; allow more GPUs with --max-gpus, "
                      f"a smaller batch, or more tensor parallelism with --max-tp)")
    last = [r for r in result.rejected_layouts if r.reason == culprit]
    example = last[-1].detail if last else next(c.detail for c in result.candidates if c.reason == culprit)
    flags = {"tp": "--max-tp", "max_pp": "--max-pp", "global_batch": "--global-batch", "pp_modules": "--model",
             "placement": "--gpus", "library": "--backends/--collectives", "heavier": "plan", "bound": "plan"}
    return NoPlan(flags.get(culprit, "plan"), f"no candidate of {where} is left: the last ones were removed "
                  f"because {REASONS[culprit]} (e.g. {example})")
