"""Why the winner wins: the breakdown of each candidate's iteration, the Pareto fronts, and one
sentence built from the difference between the winner's breakdown and the runner-up's.

An iteration splits into parts that add up to it (``parts_s``): compute (forward, backward and
the optimizer step of the busiest stage, without its tensor-parallel allreduces), those
allreduces, the pipeline bubble, and the communication nothing hid. Codec time lives inside
communication (hidden or exposed), so it is shown beside the parts, not among them.
"""

from __future__ import annotations

from sim.planner.evaluate import Outcome
from sim.planner.search import TIE_REL, Candidate, PlanResult
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


def pareto(result: PlanResult, axis: str) -> list[Candidate]:
    """Candidates no other beats on both time per sample and ``axis`` (gpus or gpu_hours), by ``axis``."""
    key = (lambda c: c.layout.gpus) if axis == "gpus" else (lambda c: c.gpu_s_per_sample)
    front: list[Candidate] = []
    for c in sorted(result.ranked, key=lambda c: (key(c), c.time_per_sample_s, c.index)):
        if not front or c.time_per_sample_s < front[-1].time_per_sample_s:
            if front and key(front[-1]) == key(c):
                continue
            front.append(c)
    return front
