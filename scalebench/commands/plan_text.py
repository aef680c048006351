"""What ``scalebench plan`` prints and writes: the search's summary, the top candidates with their
breakdown, the sentence on why the winner wins, the check through simulate(), the detailed
verification, and the files (experiments/plan_report.py)."""

from __future__ import annotations

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
    return [
        f"scalebench plan: {w.name} ({_count(w.param_count)} parameters, {w.optimizer}) on {c.gpu.name}, "
        f"{c.gpus_per_node} per node, intra {c.intra_link.name}, inter {c.inter_link.name} "
        f"({c.nics_per_node} NIC{'s' if c.nics_per_node > 1 else ''} per node)",
        f"  GPUs {counts}; {request.precision}; {batch}; memory per GPU {human_bytes(request.memory_limit_bytes)}",
        f"  objective {OBJECTIVE_TEXT[request.objective]}",
        f"  {stragglers_line(request.variability, request.cluster.gpu)}",
    ]


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
        f"{'waiting':>9} {'codec':>9} {'memory':>9} {'samples/s':>10}  settings; synchronisation")


def _row(rank: int | str, c, note: str = "") -> str:
    from sim.planner.explain import parts_s

    o, la = c.outcome, c.layout
    assert o is not None
    compute = parts_s(o)["compute"]
    return (f" {rank:>2} {la.gpus:>5} {f'{la.dp} x {la.pp} x {la.tp}':>13} {la.batch:>5} {la.micro_batches:>5} "
            f"{la.schedule if la.pp > 1 and la.micro_batches > 1 else '-':>5} {human_seconds(o.iteration_time_s):>10} "
            f"{human_seconds(compute):>10} {human_seconds(o.recompute_time_s):>10} {human_seconds(o.tp_comm_time_s):>9} "
            f"{human_seconds(o.model_comm_time_s):>9} {human_seconds(o.bubble_time_s):>9} "
            f"{human_seconds(o.exposed_comm_time_s):>9} {human_seconds(o.overlap_slowdown_time_s):>9} "
            f"{human_seconds(o.straggler_wait_time_s):>9} {human_seconds(o.codec_time_s):>9} "
            f"{human_bytes(o.memory_bytes):>9} {1 / c.time_per_sample_s:>10,.1f}  "
            f"{la.extras() + ('; ' if la.extras() else '')}{c.sync.label()}{note}")


def top_table(result: PlanResult) -> list[str]:
    """The top candidates, then the best candidate of each of the next dp x pp x tp layouts."""
    top = result.request.top
    lines = [HEAD]
    for rank, (c, same) in enumerate(result.distinct(top), start=1):
        lines.append(_row(rank, c, f" (+{len(same)} equal)" if same else ""))
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
            lines.append(_row("", c, f"  [#{rank:,}, +{gap:.0f} %]" if gap >= 10 else f"  [#{rank:,}, +{gap:.2g} %]"))
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


class _SearchProgress:
    """plan_search's ``progress``: one line on stderr for a large search, and a bar on a terminal."""

    def __init__(self) -> None:
        self.bar = None

    def __call__(self, done: int, total: int) -> None:
        import sys

        if self.bar is None and done == 0 and total >= SAY_ABOVE_CANDIDATES:
            print(f"scalebench plan: {total:,} candidates to consider, at most about {total / RATE_PER_S:.0f} s on one "
                  "core (the lower bound skips most; --max-candidates bounds the search; Ctrl-C stops it)",
                  file=sys.stderr, flush=True)
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="candidate", disable=None, file=sys.stderr, dynamic_ncols=True,
                            leave=False)
        if self.bar is not None:
            self.bar.update(done - self.bar.n)

    def __enter__(self) -> _SearchProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()


def render_plan(request: PlanRequest, verify_k: int, out_dir: Path | None) -> int:
    from experiments.plan_report import draw_pareto, write_candidates_csv, write_winner
    from sim.fileio import check_writable
    from sim.planner import plan_search
    from sim.planner.explain import why
    from sim.planner.verify import confirm, verify

    out = check_writable("--out", out_dir or default_out(request), directory=True)  # before the search
    print("\n".join(header(request)), flush=True)
    with _SearchProgress() as progress:
        result = plan_search(request, progress=progress)
    print("\n".join(summary(result)))
    print()
    print("\n".join(top_table(result)))
    print("  (compute: forward + backward + optimizer of the busiest stage, without its recomputation, TP collectives "
          "and CP/EP/ZeRO-3 communication (ring attention's sends, all-to-alls, ZeRO-3 gathers not hidden); overlap: what "
          "collectives beside it took from it; waiting: for the slowest GPU; codec time is inside communication)")
    print("\n".join(memory_lines(result)))
    print(f"\nwhy: {why(result)}")
    start = time.perf_counter()
    confirmed = confirm(result, request.top)
    print(f"checked: simulate() of the top {len(confirmed)} gives the planner's figures "
          f"({time.perf_counter() - start:.1f} s)")
    if verify_k:
        print()
        print("\n".join(verification_lines(verify(result, verify_k))))
    csv_path, rows = write_candidates_csv(result, out / "candidates.csv")
    plots = draw_pareto(result, out / "pareto")
    winner = write_winner(result, out / "winner.yaml")
    print(f"\nwrote {csv_path} ({rows:,} rows), {', '.join(str(p) for p in plots)}, {winner}")
    print(f"reproduce the winner: scalebench simulate {winner}")
    return 0


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
