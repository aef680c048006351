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

The large-model dimensions (transformer workloads; sim.strategy.LLM_FIELDS): context parallelism
cp (divisors with 2 cp dividing the sequence, at most ``max_cp``), interleaving vpp (1F1B with
micro-batches a multiple of pp and the blocks divisible by pp x vpp, at most ``max_vpp``), expert
parallelism ep (mixture-of-experts workloads: divisors of dp and of the experts, at most
``max_ep``), sequence parallelism on and off where tp > 1 (on only for MoE, as Megatron-LM
requires). ZeRO's stage and recomputation are memory techniques: the search (sim.planner.search)
expands each layout into the lightest of them that fit (``variants``).
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
    "heavier": "a heavier memory setting (more recomputation) than one that fits",
    "bound": "cannot beat the best found: its compute and bubble alone are slower (a lower bound)",
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
    cp: int = 1
    vpp: int = 1
    ep: int = 1
    sequence_parallel: bool = False
    zero_stage: int = 0
    recompute: str = "none"

    @property
    def global_batch(self) -> int:
        return self.dp * self.batch

    def extras(self) -> str:
        """The large-model settings away from their defaults, as short words (the table's last column)."""
        words = []
        if self.cp > 1:
            words.append(f"cp {self.cp}")
        if self.vpp > 1:
            words.append(f"vpp {self.vpp}")
        if self.ep > 1:
            words.append(f"ep {self.ep}")
        if self.sequence_parallel:
            words.append("sp")
        if self.zero_stage:
            words.append("zero 1 (dist. optimizer)" if self.zero_stage == 1 else f"zero {self.zero_stage}")
        if self.recompute != "none":
            words.append(f"recompute {self.recompute}")
        return ", ".join(words)

    def label(self) -> str:
        micro = f"{self.micro_batches} micro-batch{'es' if self.micro_batches > 1 else ''}"
        pipe = f", {micro} {self.schedule}" if self.pp > 1 and self.micro_batches > 1 else (
            f", {micro}" if self.micro_batches > 1 or self.pp > 1 else "")
        extras = f"; {self.extras()}" if self.extras() else ""
        return f"{self.gpus} GPUs: dp {self.dp} x pp {self.pp} x tp {self.tp}, batch {self.batch}/replica{pipe}{extras}"


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
    memory_bytes: float = 0.0
    """For a memory-removed layout variant: what its fullest rank needs."""
    layout: Layout | None = None
    """The layout variant it was (memory, heavier); None for a layout rule."""


FAMILIES = ("dp", "dp + ZeRO", "tp x dp", "tp x dp + ZeRO", "pp x dp", "pp x dp + ZeRO", "pp x tp x dp",
            "pp x tp x dp + ZeRO")
"""Structures of a layout, in the order the explanation lists them: which model parallelism it uses
(tensor inside a layer, pipeline across layers) and whether ZeRO shards the replicas' state
(context and expert parallelism ride along with the structure they extend)."""
def family(layout) -> str:
    """The structure of a layout (FAMILIES); a single replica has no ZeRO to speak of."""
    name = "pp x tp x dp" if layout.pp > 1 and layout.tp > 1 else "pp x dp" if layout.pp > 1 else (
        "tp x dp" if layout.tp > 1 else "dp")
    return name + (" + ZeRO" if layout.zero_stage and layout.dp * layout.cp > 1 else "")


def family_of(tp: int, pp: int) -> str:
    return "pp x tp x dp" if pp > 1 and tp > 1 else "pp x dp" if pp > 1 else "tp x dp" if tp > 1 else "dp"


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
    arch = request.workload.architecture
    for gpus in request.gpu_counts:
        nodes = 1 if gpus <= g else gpus // g
        for tp in _divisors(gpus):
            for cp in cp_degrees(request, gpus // tp):
                for pp in _divisors(gpus // (tp * cp)):
                    dp = gpus // (tp * cp * pp)
                    reason = _layout_rule(request, gpus, nodes, tp, pp, dp, units, cp)
                    if reason is not None:
                        yield Rejected(gpus, tp, pp, *reason, candidates=_layout_candidates(request, gpus, tp, pp, dp))
                        continue
                    batch = request.global_batch // dp if request.global_batch else request.workload.batch_size
                    for m in micro_batch_counts(batch, request.max_micro_batches):
                        for schedule in request.schedules if pp > 1 and m > 1 else _one_schedule(request):
                            for vpp in vpp_degrees(request, pp, m, schedule, units):
                                for ep in ep_degrees(request, dp):
                                    sps = (True,) if arch is not None and arch.moe else (False, True)
                                    for sp in sps if tp > 1 and arch is not None else (False,):
                                        yield Layout(gpus, tp, pp, dp, batch, m, schedule, cp=cp, vpp=vpp, ep=ep,
                                                     sequence_parallel=sp)


def cp_degrees(request: PlanRequest, most: int) -> list[int]:
    """Context-parallel degrees: 1, and for a transformer the divisors of ``most`` up to max_cp
    with 2 x cp dividing the sequence (Megatron-LM's 2 x cp chunks)."""
    arch = request.workload.architecture
    if arch is None or request.strategy.attention == "eager":  # ring attention runs flash kernels
        return [1]
    return [c for c in _divisors(most) if c <= request.max_cp and (c == 1 or arch.seq_len % (2 * c) == 0)]


def vpp_degrees(request: PlanRequest, pp: int, m: int, schedule: str, units: int) -> list[int]:
    """Model chunks per pipeline rank: 1, and with 1F1B, pp > 1 and m a multiple of pp, every vpp
    up to max_vpp that cuts a transformer's blocks evenly (pp x vpp dividing them; a table's
    top-level modules at least pp x vpp)."""
    if pp == 1 or schedule != "1f1b" or m % pp:
        return [1]
    arch = request.workload.architecture
    out = [1]
    most = (arch.layers if arch is not None else units) // pp  # past it pp x vpp neither divides nor fits
    for v in range(2, min(request.max_vpp, most) + 1):  # --max-vpp 10^9 looped 10^9 times per layout
        fits = arch.layers % (pp * v) == 0 if arch is not None else pp * v <= units
        if fits:
            out.append(v)
    return out


def ep_degrees(request: PlanRequest, dp: int) -> list[int]:
    """Expert-parallel degrees of a mixture of experts: the common divisors of dp and the experts, up to max_ep."""
    arch = request.workload.architecture
    if arch is None or not arch.moe:
        return [1]
    return [e for e in _divisors(dp) if arch.experts % e == 0 and e <= request.max_ep]


def _one_schedule(request: PlanRequest) -> tuple[str, ...]:
    """One micro-batch runs the same under both schedules; one stage has no pipeline to schedule
    (the engine still orders its micro-batches by the schedule, which rounds the last bit
    differently): both run the strategy's default, 1f1b."""
    return ("1f1b",) if "1f1b" in request.schedules else request.schedules[:1]


def _layout_rule(request: PlanRequest, gpus: int, nodes: int, tp: int, pp: int, dp: int,
                 units: int, cp: int = 1) -> tuple[str, str] | None:
    g = request.cluster.gpus_per_node
    if tp > request.max_tp:
        return "tp", f"tp {tp} > {request.max_tp}"
    if pp > units:
        return "pp_modules", f"pp {pp} > {units} top-level modules of {request.workload.name}"
    if request.max_pp is not None and pp > request.max_pp:
        return "max_pp", f"pp {pp} > {request.max_pp}"
    if nodes > 1 and any(g % size and size % g for size in (tp, tp * cp, tp * cp * pp)):
        return "placement", f"tp {tp} x {f'cp {cp} x ' if cp > 1 else ''}pp {pp} on nodes of {g}"
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


def layout_syncs(request: PlanRequest, layout: Layout) -> list[Sync]:
    """``syncs`` of a layout with its large-model settings: ZeRO reduce-scatters and allgathers
    with the library's own algorithm and no codec (stage 1-2: per bucket size; stage 3: per unit,
    no buckets); context parallelism's ranks join the gradients' group; with one replica and
    cp = 1 there is nothing to reduce (the library still runs TP, CP and EP collectives)."""
    la = layout
    if la.zero_stage == 0:
        return syncs(request, la.gpus, la.tp, la.pp, la.dp, la.cp, model_comm=la.cp > 1 or la.ep > 1)
    buckets = request.bucket_mib if la.zero_stage < 3 else request.bucket_mib[:1]
    return [Sync.of(b, "auto", None, None, mib) for b in request.backends for mib in buckets]


def syncs(request: PlanRequest, gpus: int, tp: int, pp: int, dp: int, cp: int = 1,
          model_comm: bool = False) -> list[Sync]:
    """The synchronisations worth telling apart for a layout: with one replica there are no
    gradients to reduce (only the library, which runs the TP allreduces, matters; and not even
    that without TP); hierarchical only where the DP group spans nodes with several GPUs each."""
    first_bucket = request.bucket_mib[0]
    if dp * cp == 1:
        backends = request.backends if tp > 1 or model_comm else request.backends[:1]
        return [Sync.of(b, "auto", None, None, first_bucket) for b in backends]
    from sim.parallel import grad_group

    group = grad_group(request.cluster.with_world_size(gpus), dp, tp, pp, cp) if cp > 1 else \
        dp_group(request.cluster.with_world_size(gpus), dp, tp, pp)
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
