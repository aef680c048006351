"""The search space of a plan: layouts (GPUs, dp x pp x tp, batch, micro-batches, schedule) and,
for each, the gradient synchronisations (library, collective, codec, bucket size).

A layout that breaks a rule is not dropped silently: it is yielded with the rule it broke
(``Rejected``), so the plan can count every reason and say which one removed the last candidates.
The rules, in the order they are applied:

- tp: at most ``max_tp`` (default: one node, Megatron-LM's placement) and a divisor of the GPUs;
- pp: a divisor of GPUs / tp, at most the model's top-level modules (stages are cut between them)
  and at most ``max_pp``;
- placement: tp and tp x pp each divide, or are multiples of, the GPUs per node (sim.parallel);
- global batch: with one, dp must divide it (the per-replica batch is B / dp);
- micro-batches: divisors of the per-replica batch (powers of two and the batch itself), at most
  ``max_micro_batches``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sim.costs.backends import BACKENDS
from sim.costs.pipeline import layer_unit
from sim.parallel import dp_group
from sim.planner.request import ALLREDUCE_ALGORITHMS, PlanRequest
from sim.strategy import COLLECTIVES
from sim.units import mib_to_bytes

REASONS = {
    "tp": "tensor parallelism beyond the allowed degree (--max-tp: one node by default)",
    "pp_modules": "more pipeline stages than the model's top-level modules",
    "max_pp": "more pipeline stages than --max-pp",
    "placement": "tp or tp x pp does not tile the nodes",
    "global_batch": "dp does not divide the global batch",
    "memory": "does not fit in GPU memory",
    "library": "the collective library does not offer that algorithm here",
}
"""Why a candidate was dropped: key -> what the summary says."""


@dataclass(frozen=True, slots=True)
class Layout:
    gpus: int
    tp: int
    pp: int
    dp: int
    batch: int
    """Samples per replica per iteration."""
    micro_batches: int
    schedule: str

    @property
    def global_batch(self) -> int:
        return self.dp * self.batch

    def label(self) -> str:
        micro = f"{self.micro_batches} micro-batch{'es' if self.micro_batches > 1 else ''}"
        pipe = f", {micro} {self.schedule}" if self.pp > 1 and self.micro_batches > 1 else (
            f", {micro}" if self.micro_batches > 1 or self.pp > 1 else "")
        return f"{self.gpus} GPUs: dp {self.dp} x pp {self.pp} x tp {self.tp}, batch {self.batch}/replica{pipe}"


@dataclass(frozen=True, slots=True)
class Sync:
    """How gradients are synchronised over the data-parallel group (and which library runs TP)."""

    backend: str
    collective: str
    codec: str | None
    codec_path: str | None
    bucket_mib: float
    bucket_bytes: int = 0
    """Set from bucket_mib as strategy_from_dict sets it (``Sync.of``)."""

    @staticmethod
    def of(backend: str, collective: str, codec: str | None, codec_path: str | None, bucket_mib: float) -> Sync:
        return Sync(backend, collective, codec, codec_path, bucket_mib, max(1, mib_to_bytes(bucket_mib)))

    def label(self) -> str:
        codec = f", {self.codec} by {self.codec_path}" if self.codec else ""
        return f"{self.backend} {self.collective}{codec}, bucket {self.bucket_mib:g} MiB"


@dataclass(frozen=True, slots=True)
class Rejected:
    """A layout (and how many candidates it stood for) that a rule removed."""

    gpus: int
    tp: int
    pp: int
    reason: str
    detail: str
    candidates: int = 1


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def micro_batch_counts(batch: int, limit: int | None) -> list[int]:
    counts = {m for m in (2**k for k in range(batch.bit_length())) if batch % m == 0} | {batch}
    return sorted(m for m in counts if limit is None or m <= limit)


def top_level_modules(request: PlanRequest) -> int:
    return len(dict.fromkeys(layer_unit(layer.name) for layer in request.workload.layers))


def layouts(request: PlanRequest) -> Iterator[Layout | Rejected]:
    """Every layout of every GPU count, or the rule it breaks (with the candidates it stood for)."""
    units = top_level_modules(request)
    g = request.cluster.gpus_per_node
    for gpus in request.gpu_counts:
        nodes = 1 if gpus <= g else gpus // g
        for tp in _divisors(gpus):
            for pp in _divisors(gpus // tp):
                dp = gpus // (tp * pp)
                reason = _layout_rule(request, gpus, nodes, tp, pp, dp, units)
                if reason is not None:
                    yield Rejected(gpus, tp, pp, *reason, candidates=_layout_candidates(request, gpus, tp, pp, dp))
                    continue
                batch = request.global_batch // dp if request.global_batch else request.workload.batch_size
                for m in micro_batch_counts(batch, request.max_micro_batches):
                    for schedule in request.schedules if pp > 1 and m > 1 else _one_schedule(request):
                        yield Layout(gpus, tp, pp, dp, batch, m, schedule)


def _one_schedule(request: PlanRequest) -> tuple[str, ...]:
    """One micro-batch runs the same under both schedules; one stage has no pipeline to schedule
    (the engine still orders its micro-batches by the schedule, which rounds the last bit
    differently): both run the strategy's default, 1f1b."""
    return ("1f1b",) if "1f1b" in request.schedules else request.schedules[:1]


def _layout_rule(request: PlanRequest, gpus: int, nodes: int, tp: int, pp: int, dp: int,
                 units: int) -> tuple[str, str] | None:
    g = request.cluster.gpus_per_node
    if tp > request.max_tp:
        return "tp", f"tp {tp} > {request.max_tp}"
    if pp > units:
        return "pp_modules", f"pp {pp} > {units} top-level modules of {request.workload.name}"
    if request.max_pp is not None and pp > request.max_pp:
        return "max_pp", f"pp {pp} > {request.max_pp}"
    if nodes > 1 and any(g % size and size % g for size in (tp, tp * pp)):
        return "placement", f"tp {tp} x pp {pp} on nodes of {g}"
    if request.global_batch and request.global_batch % dp:
        return "global_batch", f"dp {dp} does not divide {request.global_batch}"
    return None


def _layout_candidates(request: PlanRequest, gpus: int, tp: int, pp: int, dp: int) -> int:
    """How many candidates a rejected layout stands for (micro-batches x schedules x syncs), with
    the batch it would have had (the workload's when the global batch does not divide)."""
    batch = request.workload.batch_size
    if request.global_batch:
        batch = max(1, request.global_batch // dp)
    micro = micro_batch_counts(batch, request.max_micro_batches)
    per_sync = sum(len(request.schedules) if pp > 1 and m > 1 else 1 for m in micro)
    return max(1, per_sync) * len(syncs(request, gpus, tp, pp, dp))


def syncs(request: PlanRequest, gpus: int, tp: int, pp: int, dp: int) -> list[Sync]:
    """The synchronisations worth telling apart for a layout: with one replica there are no
    gradients to reduce (only the library, which runs the TP allreduces, matters; and not even
    that without TP); hierarchical only where the DP group spans nodes with several GPUs each."""
    first_bucket = request.bucket_mib[0]
    if dp == 1:
        backends = request.backends if tp > 1 else request.backends[:1]
        return [Sync.of(b, "auto", None, None, first_bucket) for b in backends]
    group = dp_group(request.cluster.with_world_size(gpus), dp, tp, pp)
    hierarchical = group.nodes > 1 and group.gpus_per_node > 1
    out = []
    for backend in request.backends:
        for collective in _collectives(request, backend, hierarchical):
            for codec, path in request.codecs:
                for bucket in request.bucket_mib:
                    out.append(Sync.of(backend, collective, codec, path, bucket))
    return out


def _collectives(request: PlanRequest, backend: str, hierarchical: bool) -> list[str]:
    library = BACKENDS[backend].algorithms
    if request.collectives is not None:
        return [c for c in request.collectives if c in ("auto", "hierarchical", "ps") or c in library]
    names = ["auto", *(a for a in ALLREDUCE_ALGORITHMS.get(backend, library) if a in library and a in COLLECTIVES)]
    if hierarchical:
        names.append("hierarchical")
    return names
