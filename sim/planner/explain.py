"""Why the winner wins: the breakdown of each candidate's iteration, the Pareto fronts, and one
sentence built from the difference between the winner's breakdown and the runner-up's.

An iteration splits into parts that add up to it (``parts_s``): compute (forward, backward and
the optimizer step of the busiest stage, without its tensor-parallel allreduces), those
allreduces, the pipeline bubble, and the communication nothing hid. Codec time lives inside
communication (hidden or exposed), so it is shown beside the parts, not among them.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.planner.evaluate import Outcome
from sim.planner.search import TIE_REL, Candidate, PlanResult
from sim.planner.space import FAMILIES, family, family_of
from sim.units import human_seconds

PART_NAMES = ("compute", "recomputation", "tensor-parallel allreduces", "context/expert/ZeRO-3 communication",
              "pipeline bubble", "exposed communication", "compute slowed by overlap", "waiting for stragglers")


def parts_s(outcome: Outcome) -> dict[str, float]:
    """The iteration's additive parts (seconds); 'other' holds what rounding or the engine's
    accounting leaves (the busiest stage's optimizer step vs the last stage's end). Recomputation
    and the model-parallel communication other than TP's (ring attention's exposed sends, MoE
    all-to-alls, ZeRO-3's exposed gathers) are parts of their own only where they occur; so are what
    collectives beside compute took from it and the wait for the slowest GPU (sim.costs.contention,
    sim.costs.stragglers)."""
    parts = {
        "compute": (outcome.compute_time_s - outcome.tp_comm_time_s - outcome.model_comm_time_s
                    - outcome.recompute_time_s),
        "recomputation": outcome.recompute_time_s,
        "tensor-parallel allreduces": outcome.tp_comm_time_s,
        "context/expert/ZeRO-3 communication": outcome.model_comm_time_s,
        "pipeline bubble": outcome.bubble_time_s,
        "exposed communication": outcome.exposed_comm_time_s,
        "compute slowed by overlap": outcome.overlap_slowdown_time_s,
        "waiting for stragglers": outcome.straggler_wait_time_s,
    }
    for name in ("recomputation", "context/expert/ZeRO-3 communication"):
        if not parts[name]:
            del parts[name]
    rest = outcome.iteration_time_s - sum(parts.values())
    if abs(rest) > 1e-9 * outcome.iteration_time_s:
        parts["other"] = rest
    return parts


def scale(c: Candidate, objective: str, per_iteration: bool) -> float:
    """Seconds of an iteration -> the objective's unit: per iteration (a fixed global batch), per
    sample, or GPU-seconds per sample for gpu_hours."""
    if objective == "gpu_hours":
        return c.layout.gpus / c.samples
    return 1.0 if per_iteration else 1.0 / c.samples


def unit(objective: str, per_iteration: bool) -> str:
    if objective == "gpu_hours":
        return "GPU-time per sample"
    return "per iteration" if per_iteration else "per sample"


def differences(a: Candidate, b: Candidate) -> list[str]:
    """What ``b`` sets differently from ``a``, as 'field value' phrases."""
    out = []
    la, lb, sa, sb = a.layout, b.layout, a.sync, b.sync
    for name, x, y in (("GPUs", la.gpus, lb.gpus), ("dp", la.dp, lb.dp), ("pp", la.pp, lb.pp), ("tp", la.tp, lb.tp),
                       ("cp", la.cp, lb.cp), ("vpp", la.vpp, lb.vpp), ("ep", la.ep, lb.ep),
                       ("batch/replica", la.batch, lb.batch), ("micro-batches", la.micro_batches, lb.micro_batches),
                       ("ZeRO stage", la.zero_stage, lb.zero_stage), ("recompute", la.recompute, lb.recompute)):
        if x != y:
            out.append(f"{name} {y}")
    if la.sequence_parallel != lb.sequence_parallel:
        out.append("sequence parallelism " + ("on" if lb.sequence_parallel else "off"))
    if la.schedule != lb.schedule and (la.pp > 1 or lb.pp > 1):
        out.append(f"schedule {lb.schedule}")
    if sa.backend != sb.backend:
        out.append(f"library {sb.backend}")
    if sa.collective != sb.collective:
        out.append(f"collective {sb.collective}")
    if (sa.codec, sa.codec_path) != (sb.codec, sb.codec_path):
        out.append(f"codec {sb.codec} by {sb.codec_path}" if sb.codec else "no codec")
    if sa.bucket_mib != sb.bucket_mib:
        out.append(f"bucket {sb.bucket_mib:g} MiB")
    return out


def runner_up(result: PlanResult) -> tuple[Candidate | None, int]:
    """The best candidate whose objective differs from the winner's, and how many tie with the winner."""
    objective = result.request.objective
    best = result.winner.objective_value(objective)
    ties = 0
    for c in result.ranked[1:]:
        value = c.objective_value(objective)
        if abs(value - best) > TIE_REL * max(abs(value), abs(best)):
            return c, ties
        ties += 1
    return None, ties


def _amount(seconds: float, objective: str) -> str:
    return human_seconds(seconds) + (" of GPU time" if objective == "gpu_hours" else "")


def why(result: PlanResult) -> str:
    """One sentence: by how much the winner beats the runner-up, and which parts of their
    breakdowns make the difference (the largest in its favour, and the largest against it)."""
    objective = result.request.objective
    per_iteration = result.per_iteration()
    w = result.winner
    r, ties = runner_up(result)
    tie_note = (f" ({ties} other candidates tie with it)" if ties > 1 else " (1 other candidate ties with it)") if ties else ""
    if r is None:
        return f"Only one outcome is possible here{tie_note}: every candidate simulated takes the same time."
    assert r.outcome is not None and w.outcome is not None
    close = r.objective_value(objective) / w.objective_value(objective) - 1
    if close <= TIE_SHARE and family(r.layout) == family(w.layout):
        return (f"the runner-up ({', '.join(differences(w, r)) or 'the same settings'}) is within {100 * close:.2g} % of "
                f"the winner{tie_note}: settings that decide nothing here.")
    assert w.outcome is not None and r.outcome is not None
    sw, sr = scale(w, objective, per_iteration), scale(r, objective, per_iteration)
    pw, pr = parts_s(w.outcome), parts_s(r.outcome)
    deltas = {k: pr.get(k, 0.0) * sr - pw.get(k, 0.0) * sw for k in dict.fromkeys([*pw, *pr])}
    theirs = r.outcome.iteration_time_s * sr
    gain = theirs - w.outcome.iteration_time_s * sw
    largest = max(abs(d) for d in deltas.values())
    pros = sorted(((d, k) for k, d in deltas.items() if d > 0 and d >= 0.05 * largest), reverse=True)[:2]
    cons = sorted(((-d, k) for k, d in deltas.items() if d < 0 and -d >= 0.05 * largest), reverse=True)[:1]
    changed = ", ".join(differences(w, r)) or "the same settings"
    pct = 100 * gain / theirs
    head = (f"The winner beats the runner-up ({changed}) by {_amount(gain, objective)} {unit(objective, per_iteration)}"
            f" ({pct:.2g} %){tie_note}")
    if not pros:
        return head + "."
    less = "less" if objective == "gpu_hours" else "shorter"
    more = "more" if objective == "gpu_hours" else "longer"
    reasons = " and ".join(f"{k} {_amount(d, objective)} {less}" for d, k in pros)
    text = f"{head}: its {reasons}"
    if cons:
        d, k = cons[0]
        text += f", against {k} {_amount(d, objective)} {more}"
    return text + "."


PARETO_AXES = {
    "gpus": lambda c: c.layout.gpus,
    "gpu_hours": lambda c: c.gpu_s_per_sample,
    "memory": lambda c: c.memory_bytes,
}
"""What a front trades time per sample against: fewer GPUs, less GPU time, less memory per GPU."""


def pareto(result: PlanResult, axis: str) -> list[Candidate]:
    """Candidates no other beats on both time per sample and ``axis`` (PARETO_AXES), by ``axis``."""
    key = PARETO_AXES[axis]
    front: list[Candidate] = []
    for c in sorted(result.ranked, key=lambda c: (key(c), c.time_per_sample_s, c.index)):
        if not front or c.time_per_sample_s < front[-1].time_per_sample_s:
            if front and key(front[-1]) == key(c):
                continue
            front.append(c)
    return front


# -- the best plan of each structure, and what decides between them ---------------------------

TIE_SHARE = 0.005
"""Within half a percent of the winner: a tie the explanation names, not a reason."""


@dataclass(frozen=True)
class StructureRow:
    family: str
    best: Candidate | None
    """The best simulated candidate of the structure (None: none fits, or none is in the space)."""
    memory_bytes: float = 0.0
    """Without a candidate: the least memory any of its layouts needs (0: none was costed)."""
    rule: str = ""
    """Without a candidate and without a memory figure: the rule that keeps it out of the space."""
    gap: float = 0.0
    """Slower than the winner by this share of the winner's objective."""
    reasons: tuple[str, ...] = ()
    """What decides against it (or, for the winner, that it wins)."""


def mfu(c: Candidate, request) -> tuple[float, float]:
    """(MFU by PaLM's count, by Narayanan et al.'s count with recomputation) of a simulated candidate."""
    from sim.mfu import model_flops_per_sample, recompute_flops_per_sample, utilisation

    w = request.workload
    peak = request.cluster.gpu.flops_for(request.precision)
    rate = 1.0 / c.time_per_sample_s
    model = model_flops_per_sample(w)
    hardware = model + recompute_flops_per_sample(w, c.layout.recompute)
    return utilisation(model, rate, c.layout.gpus, peak), utilisation(hardware, rate, c.layout.gpus, peak)


def _phrase(part: str, amount: str, c: Candidate, g: int) -> str:
    la = c.layout
    if part == "pipeline bubble":
        if la.pp == 1:
            return f"pipeline bubble {amount} (none: pp 1)"
        chunks = f", {la.vpp} chunks each" if la.vpp > 1 else ""
        return f"pipeline bubble ({la.pp} stages{chunks}, {la.micro_batches} micro-batches) {amount}"
    if part == "tensor-parallel allreduces":
        if la.tp == 1:
            return f"tensor-parallel traffic {amount} (none: tp 1)"
        where = f"across nodes (tp {la.tp} > {g} GPUs per node)" if la.tp > g else f"inside a node (tp {la.tp})"
        return f"tensor-parallel traffic {where} {amount}"
    if part == "exposed communication":
        return f"data-parallel traffic not hidden (dp {la.dp}) {amount}"
    if part == "recomputation":
        return f"recomputation ({la.recompute}, to fit in memory) {amount}"
    if part == "context/expert/ZeRO-3 communication":
        what = "ZeRO-3 gathers" if la.zero_stage == 3 else "context/expert-parallel traffic"
        return f"{what} not hidden {amount}"
    if part == "compute":
        return f"compute {amount}"
    return f"{part} {amount}"


def structures(result: PlanResult) -> list[StructureRow]:
    """The best candidate of each structure (FAMILIES) beside the winner, and what decides: memory
    (no layout of it fits), a rule (none is in the space), or the parts of its iteration that are
    longer than the winner's (bubble, tensor-parallel traffic inside or across nodes, data-parallel
    traffic, recomputation, ZeRO-3's gathers), in the objective's unit."""
    request = result.request
    objective = request.objective
    per_iteration = result.per_iteration()
    g = request.cluster.gpus_per_node
    w = result.winner
    best: dict[str, Candidate] = {}
    for ranked in result.ranked:
        best.setdefault(family(ranked.layout), ranked)
    need: dict[str, float] = {}
    for removed in result.candidates:
        if removed.reason == "memory" and removed.memory_bytes:
            key = family(removed.layout)
            need[key] = min(need.get(key, float("inf")), removed.memory_bytes)
    for r in result.rejected_layouts:
        if r.reason == "memory" and r.layout is not None and r.memory_bytes:
            key = family(r.layout)
            need[key] = min(need.get(key, float("inf")), r.memory_bytes)
    rules: dict[str, str] = {}
    for r in result.rejected_layouts:
        if r.layout is None:
            rules.setdefault(family_of(r.tp, r.pp), r.reason)
    w_value = w.objective_value(objective)
    sw = scale(w, objective, per_iteration)
    pw = parts_s(w.outcome) if w.outcome is not None else {}
    rows = []
    for name in FAMILIES:
        c = best.get(name)
        if c is None:
            if name in need:
                rows.append(StructureRow(name, None, memory_bytes=need[name]))
            elif name in rules:
                rows.append(StructureRow(name, None, rule=rules[name]))
            continue
        if c is w:
            rows.append(StructureRow(name, c, reasons=("the winner",)))
            continue
        gap = c.objective_value(objective) / w_value - 1
        assert c.outcome is not None
        sc = scale(c, objective, per_iteration)
        pc = parts_s(c.outcome)
        deltas = {k: pc.get(k, 0.0) * sc - pw.get(k, 0.0) * sw for k in dict.fromkeys([*pc, *pw]) if k != "other"}
        if gap <= TIE_SHARE:
            rows.append(StructureRow(name, c, gap=gap, reasons=("ties with the winner",)))
            continue
        total = c.objective_value(objective) - w_value
        ups = sorted(((d, k) for k, d in deltas.items() if d > 0.1 * total), reverse=True)[:2]
        more = "more" if objective == "gpu_hours" else "longer"
        less = "less" if objective == "gpu_hours" else "shorter"
        reasons = tuple(_phrase(k, f"{_amount(d, objective)} {more}", c, g) for d, k in ups) or (
            "no single part: small differences add up",)
        # what it saves, where that is as large as a tenth of the whole gap (a close race says both sides)
        downs = sorted((d, k) for k, d in deltas.items() if d < -0.1 * total)[:1]
        reasons += tuple(f"against {_phrase(k, f'{_amount(-d, objective)} {less}', c, g)}" for d, k in downs)
        rows.append(StructureRow(name, c, gap=gap, reasons=reasons))
    return rows


def percent(share: float) -> str:
    """A share as a percentage: whole percents from 10 %, two significant digits below."""
    return f"{100 * share:.0f} %" if share >= 0.1 else f"{100 * share:.2g} %"


def structure_sentence(result: PlanResult) -> str:
    """What decides the winner's structure, one clause per other structure (structures())."""
    rows = structures(result)
    w = result.winner
    wf = family(w.layout)
    extras = w.layout.extras()
    head = f"{wf} wins ({w.layout.dp} x {w.layout.pp} x {w.layout.tp}{', ' + extras if extras else ''})"
    clauses = []
    for r in rows:
        if r.family == wf:
            continue
        if r.best is None:
            if r.memory_bytes:
                clauses.append(f"{r.family} does not fit (the smallest needs {r.memory_bytes / 2**30:.1f} GiB per GPU)")
            else:
                from sim.planner.space import REASONS

                clauses.append(f"{r.family} is not in the space ({REASONS.get(r.rule, r.rule)})")
            continue
        if r.gap <= TIE_SHARE:
            clauses.append(f"{r.family} ties with it ({100 * r.gap:.2g} %)")
            continue
        gains = [x for x in r.reasons if x.startswith("against ")]
        costs = [x for x in r.reasons if not x.startswith("against ")]
        clauses.append(f"{r.family} is {percent(r.gap)} slower: {' and '.join(costs)}"
                       + "".join(f", {x}" for x in gains))
    return head + (": " + "; ".join(clauses) + "." if clauses else ".")
