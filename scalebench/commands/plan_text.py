"""What ``scalebench plan`` prints and writes: the search's summary, the top candidates with their
breakdown, the sentence on why the winner wins, the check through simulate(), the detailed
verification, and the files (experiments/plan_report.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from sim.faults import stragglers_line
from sim.planner.request import PlanRequest
from sim.planner.search import PlanResult
from sim.planner.space import REASONS
from sim.units import human_bytes, human_seconds

OBJECTIVE_TEXT = {
    "time": "time: seconds per sample (a run of a fixed number of samples), lower is better",
    "samples_per_s": "samples_per_s: throughput, higher is better (the same order as time)",
    "gpu_hours": "gpu_hours: GPUs x seconds per sample (what a run costs in GPU time), lower is better",
}


def default_out(request: PlanRequest) -> Path:
    return Path("results") / "plan" / f"{request.workload.name}-{request.gpus}x{request.cluster.gpu.name}"


def header(request: PlanRequest) -> list[str]:
    w, c = request.workload, request.cluster
    counts = ", ".join(str(g) for g in request.gpu_counts)
    if request.global_batch:
        batch = f"global batch {request.global_batch} (batch per replica = {request.global_batch} / dp)"
    else:
        batch = (f"batch {w.batch_size} per replica, whatever dp is (weak scaling: the workload's batch; "
                 "--global-batch fixes the total instead)")
    rails = ", rail-aligned: each GPU's traffic on its own NIC" if c.nics_per_node >= c.gpus_per_node > 1 else ""
    return [
        f"scalebench plan: {w.name} ({_count(w.param_count)} parameters, {w.optimizer}) on {c.gpu.name}, "
        f"{c.gpus_per_node} per node, intra {c.intra_link.name}, inter {c.inter_link.name} "
        f"({c.nics_per_node} NIC{'s' if c.nics_per_node > 1 else ''} per node{rails})",
        f"  GPUs {counts}; {request.precision}; {batch}; memory per GPU {human_bytes(request.memory_limit_bytes)}",
        *([f"  global batch from {request.global_batch_source}"] if request.global_batch_source else []),
        f"  objective {OBJECTIVE_TEXT[request.objective]}",
        f"  {stragglers_line(request.variability, request.cluster.gpu)}",
        f"  {trust_line(request)}",
    ]


def trust_line(request: PlanRequest) -> str:
    """What the search leaves out unless asked: other libraries than the devices' own, lossy codecs."""
    libraries = ", ".join(request.backends)
    only = request.cluster.gpu.kind == "gpu" and request.backends == ("nccl",)
    lossy = [c for c, _ in request.codecs if c is not None]
    codecs = (f"codecs {', '.join(dict.fromkeys(lossy))} (they round the gradients)" if lossy
              else f"gradients on the wire in {request.precision} (lossy codecs: --allow-lossy)")
    return (f"searched: {libraries}{' only (other libraries: --backends)' if only else ''}; {codecs}")


def _count(n: float) -> str:
    for scale, suffix in ((1e12, " T"), (1e9, " B"), (1e6, " M"), (1e3, " k")):
        if n >= scale:
            return f"{n / scale:.3g}{suffix}"
    return f"{n:.0f}"


def summary(result: PlanResult) -> list[str]:
    request = result.request
    rate = result.simulated / result.wall_s if result.wall_s > 0 else float("inf")
    lines = [f"searched {result.enumerated:,} candidates in {result.wall_s:.2f} s: {result.simulated:,} simulated "
             f"({rate:,.0f} per second on one core; {result.simulations:,} distinct pipeline flushes and data-parallel "
             "iterations run)"]
    for reason, count in result.removed.items():
        text = REASONS[reason]
        if reason == "tp":
            text += f"; here tp <= {request.max_tp}"
        lines.append(f"  removed {count:>9,}  {text}")
    return lines


HEAD = (f" {'#':>2} {'GPUs':>5} {'dp x pp x tp':>13} {'batch':>5} {'micro':>5} {'sched':>5} {'iteration':>10} "
        f"{'compute':>10} {'recompute':>10} {'TP comm':>9} {'CP/EP/Z3':>9} {'bubble':>9} {'exposed':>9} {'overlap':>9} "
        f"{'waiting':>9} {'codec':>9} {'memory':>9} {'samples/s':>10} {'MFU':>5} {'w/ rc':>5}  settings; synchronisation")


def _row(rank: int | str, c, note: str = "", request: PlanRequest | None = None) -> str:
    from sim.planner.explain import mfu, parts_s

    o, la = c.outcome, c.layout
    model, hardware = mfu(c, request) if request is not None else (float("nan"), float("nan"))
    assert o is not None
    compute = parts_s(o)["compute"]
    return (f" {rank:>2} {la.gpus:>5} {f'{la.dp} x {la.pp} x {la.tp}':>13} {la.batch:>5} {la.micro_batches:>5} "
            f"{la.schedule if la.pp > 1 and la.micro_batches > 1 else '-':>5} {human_seconds(o.iteration_time_s):>10} "
            f"{human_seconds(compute):>10} {human_seconds(o.recompute_time_s):>10} {human_seconds(o.tp_comm_time_s):>9} "
            f"{human_seconds(o.model_comm_time_s):>9} {human_seconds(o.bubble_time_s):>9} "
            f"{human_seconds(o.exposed_comm_time_s):>9} {human_seconds(o.overlap_slowdown_time_s):>9} "
            f"{human_seconds(o.straggler_wait_time_s):>9} {human_seconds(o.codec_time_s):>9} "
            f"{human_bytes(o.memory_bytes):>9} {1 / c.time_per_sample_s:>10,.1f} {100 * model:>4.0f}% {100 * hardware:>4.0f}%  "
            f"{la.extras() + ('; ' if la.extras() else '')}{c.sync.label()}{note}")


def top_table(result: PlanResult) -> list[str]:
    """The top candidates, then the best candidate of each of the next dp x pp x tp layouts."""
    top = result.request.top
    lines = [HEAD]
    for rank, (c, same) in enumerate(result.distinct(top), start=1):
        lines.append(_row(rank, c, f" (+{len(same)} equal)" if same else "", result.request))
    w = result.winner.layout
    seen = {(w.gpus, w.dp, w.pp, w.tp, w.cp)}
    others = []
    for rank, c in enumerate(result.ranked, start=1):
        key = (c.layout.gpus, c.layout.dp, c.layout.pp, c.layout.tp, c.layout.cp)
        if key not in seen:
            seen.add(key)
            others.append((rank, c))
        if len(others) == top:
            break
    if others:
        lines.append(f"  the best of the next {len(others)} layouts (rank among all candidates; slower than the winner by):")
        best = result.winner.objective_value(result.request.objective)
        for rank, c in others:
            gap = 100 * (c.objective_value(result.request.objective) / best - 1)
            lines.append(_row("", c, f"  [#{rank:,}, +{gap:.0f} %]" if gap >= 10 else f"  [#{rank:,}, +{gap:.2g} %]",
                              result.request))
    return lines


def structure_lines(result: PlanResult) -> list[str]:
    """The best plan of each structure (sim.planner.explain.structures) and what decides against it."""
    from sim.planner.explain import mfu, percent, structures

    g = result.request.cluster.gpus_per_node
    lines = [f"the best of each structure ({g} GPUs per node):",
             f"  {'structure':<20} {'GPUs':>5} {'dp x pp x tp':>13} {'iteration':>10} {'MFU':>5}  {'vs winner':>9}  "
             "settings; what decides"]
    for row in structures(result):
        c = row.best
        if c is None:
            why_not = (f"does not fit: the smallest needs {human_bytes(row.memory_bytes)} per GPU" if row.memory_bytes
                       else f"not searched: {REASONS.get(row.rule, row.rule)}")
            lines.append(f"  {row.family:<20} {'-':>5} {'-':>13} {'-':>10} {'-':>5}  {'-':>9}  {why_not}")
            continue
        assert c.outcome is not None
        la = c.layout
        model, _ = mfu(c, result.request)
        gap = "winner" if row.reasons == ("the winner",) else f"+{percent(row.gap)}"
        settings = la.extras() or "-"
        lines.append(f"  {row.family:<20} {la.gpus:>5} {f'{la.dp} x {la.pp} x {la.tp}':>13} "
                     f"{human_seconds(c.outcome.iteration_time_s):>10} {100 * model:>4.0f}%  {gap:>9}  "
                     f"{settings}; {', '.join(row.reasons)}")
    return lines


def memory_lines(result: PlanResult) -> list[str]:
    """The winner's fullest rank, part by part (sim.memory.memory_per_rank), against the GPU."""
    from sim.config import scenario_from_dict
    from sim.memory import memory_per_rank

    spec = result.winner.spec(result.request)
    spec["simulation"] = {"check_memory": False}
    worst = max(memory_per_rank(scenario_from_dict(spec, result.request.catalog)), key=lambda b: b.total_bytes)
    parts = " + ".join(f"{name} {human_bytes(v)}" for name, v in worst.parts().items() if v)
    limit = result.request.memory_limit_bytes
    where = f" (stage {worst.stage})" if result.winner.layout.pp > 1 else ""
    return [f"memory of the winner's fullest rank{where}: {parts} = {human_bytes(worst.total_bytes)} of "
            f"{human_bytes(limit)} ({100 * worst.total_bytes / limit:.0f} %)"]
SAY_ABOVE_CANDIDATES = 20_000
"""A search this large (about 5 s at the measured 4,500 candidates a second) says up front what it
will simulate; on a terminal a progress bar follows it (issue 29: --max-gpus 1048576 searched
150,000 candidates for 50-61 s without a word)."""
RATE_PER_S = 4_500
"""Candidates simulated per second on one core for GPT-2 XL (README, scalebench bench)."""


def _search(request: PlanRequest) -> PlanResult:
    """plan_search with a progress bar over the candidates on stderr (scalebench/log.py)."""
    from scalebench import log
    from sim.planner import plan_search

    bar = log.progress_bar(None, "plan: simulating", "candidate")
    said = False

    def advance(done: int, total: int) -> None:
        nonlocal said
        if not said and done == 0 and total >= SAY_ABOVE_CANDIDATES:  # a large search says so up front
            said = True
            print(f"scalebench plan: {total:,} candidates to consider, at most about {total / RATE_PER_S:.0f} s on one "
                  "core (the lower bound skips most; --max-candidates bounds the search; Ctrl-C stops it)",
                  file=sys.stderr, flush=True)
        if bar.total != total:
            bar.total = total
            bar.refresh()
        bar.update(done - bar.n)

    try:
        return plan_search(request, progress=advance)
    finally:
        bar.close()


def render_plan(request: PlanRequest, verify_k: int, out_dir: Path | None, fmt: str = "table") -> int:
    """The plan: for people (``table``: the search, the top, why, the check), or as ``json`` (one
    object) or ``csv`` (the top candidates' rows, candidates.csv's columns) on stdout with the
    progress and the files named on stderr. The files are written either way."""
    from experiments.plan_report import draw_pareto, write_candidates_csv, write_winner
    from scalebench import log
    from sim.fileio import check_writable
    from sim.planner.explain import structure_sentence, why
    from sim.planner.verify import confirm, verify

    out = check_writable("--out", out_dir or default_out(request), directory=True)  # before the search
    logger = log.get("plan")
    say = print if fmt == "table" else logger.info
    say("\n".join(header(request)).removeprefix("" if fmt == "table" else "scalebench plan: "))
    sys.stdout.flush()
    result = _search(request)
    say("\n".join(summary(result)))
    if fmt == "table":
        print()
        print("\n".join(top_table(result)))
        print("  (compute: forward + backward + optimizer of the busiest stage, without its recomputation, TP collectives "
              "and CP/EP/ZeRO-3 communication (ring attention's sends, all-to-alls, ZeRO-3 gathers not hidden); overlap: "
              "what collectives beside it took from it; waiting: for the slowest GPU; codec time is inside "
              "communication; MFU: model FLOPs per second over the GPUs' peak (PaLM's 6N + 12LHQT per token), w/ rc: the "
              "recomputed forward counted too (Narayanan et al.'s achieved FLOP/s))")
    say("\n".join(memory_lines(result)))
    if fmt == "table":
        print()
        print("\n".join(structure_lines(result)))
        print(f"\nwhy: {structure_sentence(result)}")
        print(f"closest: {why(result)}")
    start = time.perf_counter()
    confirmed = confirm(result, request.top)
    say(f"checked: simulate() of the top {len(confirmed)} gives the planner's figures "
        f"({time.perf_counter() - start:.1f} s)")
    verification = verify(result, verify_k) if verify_k else None
    if verification is not None and fmt == "table":
        print()
        print("\n".join(verification_lines(verification)))
    csv_path, rows = write_candidates_csv(result, out / "candidates.csv")
    plots = draw_pareto(result, out / "pareto")
    winner = write_winner(result, out / "winner.yaml")
    files = f"{csv_path} ({rows:,} rows), {', '.join(str(p) for p in plots)}, {winner}"
    if fmt == "table":
        print(f"\nwrote {files}")
        print(f"reproduce the winner: scalebench simulate {winner}")
        return 0
    logger.info(f"wrote {files}")
    sys.stdout.write(machine_output(result, structure_sentence(result), why(result), verification, fmt,
                                    {"candidates_csv": str(csv_path), "pareto": [str(p) for p in plots],
                                     "winner_yaml": str(winner)}))
    return 0


def machine_output(result: PlanResult, reason: str, closest: str, verification, fmt: str, files: dict) -> str:
    """``--format json``: the request, the search's counts, the top candidates (candidates.csv's
    columns), the winner, why it wins (its structure; the closest rival), the detailed check and the files, as one strict JSON
    object; ``--format csv``: the top candidates' rows."""
    from experiments.plan_report import candidate_rows
    from sim.fileio import format_rows, json_text

    top = [r for r in candidate_rows(result) if r.get("rank") and int(r["rank"]) <= result.request.top]
    if fmt == "csv":
        return format_rows(top, "csv")
    request, w, c = result.request, result.request.workload, result.request.cluster
    doc = {
        "request": {"model": w.name, "parameters": w.param_count, "optimizer": w.optimizer, "gpu": c.gpu.name,
                    "gpus_per_node": c.gpus_per_node, "intra_link": c.intra_link.name, "inter_link": c.inter_link.name,
                    "nics_per_node": c.nics_per_node, "gpu_counts": list(request.gpu_counts),
                    "precision": request.precision, "global_batch": request.global_batch,
                    "batch_per_replica": None if request.global_batch else w.batch_size,
                    "memory_limit_bytes": request.memory_limit_bytes, "objective": request.objective},
        "search": {"enumerated": result.enumerated, "simulated": result.simulated, "wall_s": result.wall_s,
                   "simulations": result.simulations, "removed": dict(result.removed)},
        "top": top,
        "winner": top[0],
        "why": reason,
        "closest": closest,
        "verify": None if verification is None else {
            "holds": verification.holds, "summary": verification.summary,
            "rows": [{"rank": v.rank, "fast_s": v.fast_s, "detailed_s": v.detailed_s, "reason": v.reason,
                      "candidate": v.candidate.label()} for v in verification.rows]},
        "files": files,
        "reproduce": f"scalebench simulate {files['winner_yaml']}",
    }
    return json_text(doc) + "\n"


def verification_lines(v) -> list[str]:
    lines = [f"verify: the best {len(v.rows)} in detailed mode (every rank and flow)",
             f" {'#':>2} {'fast':>10} {'detailed':>10} {'diff':>7}  candidate"]
    for row in v.rows:
        if row.detailed_s is None:
            lines.append(f" {row.rank:>2} {human_seconds(row.fast_s):>10} {'-':>10} {'-':>7}  {row.candidate.label()}")
            lines.append(f"    {row.reason}")
        else:
            lines.append(f" {row.rank:>2} {human_seconds(row.fast_s):>10} {human_seconds(row.detailed_s):>10} "
                         f"{100 * (row.difference or 0.0):>+6.2f}%  {row.candidate.label()}")
    lines.append(f"verify: {v.summary}")
    return lines
