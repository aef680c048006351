"""A plan's files: every candidate as a CSV row, the Pareto fronts as PNG and SVG, the winner as a
scenario YAML that ``scalebench simulate`` runs. Each file is written atomically.

    candidates.csv  one row per candidate: simulated (rank and breakdown), removed by memory or
                    by the library (the reason), and one row per layout a rule removed before
                    (``candidates``: how many candidates it stood for)
    pareto.png/svg  with several GPU counts: left, iteration time (time per 1,000 samples in weak
                    scaling) vs GPUs; right, hours vs GPU-hours per 1M samples. At one GPU count
                    those fronts are one point each (a vertical strip; GPU-hours proportional to
                    hours), so the plot is time against memory per GPU instead: which layouts are
                    faster, which leave memory to spare. Grey: the best candidate of every layout,
                    coloured: the front, star: the winner
    winner.yaml     the winner's scenario
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import yaml  # noqa: E402

from experiments.plot_style import legend_below, log2_axis, save_figure  # noqa: E402
from sim.fileio import atomic_write_text  # noqa: E402
from sim.planner.explain import pareto  # noqa: E402
from sim.planner.search import Candidate, PlanResult  # noqa: E402

COLUMNS = (
    "rank", "status", "reason", "detail", "candidates", "gpus", "nodes", "dp", "pp", "tp", "cp", "ep", "vpp",
    "sequence_parallel", "zero_stage", "recompute", "batch_per_replica",
    "global_batch", "micro_batches", "schedule", "backend", "collective", "codec", "codec_path", "bucket_mib",
    "iteration_time_s", "time_per_sample_s", "samples_per_s", "gpu_hours_per_1m_samples", "compute_time_s",
    "recompute_time_s", "tp_comm_time_s", "model_comm_time_s", "bubble_time_s", "exposed_comm_time_s",
    "overlap_slowdown_time_s", "straggler_wait_time_s", "codec_time_s", "pp_comm_time_s", "comm_time_s",
    "memory_gib", "pareto_gpus", "pareto_gpu_hours",
)


def candidate_rows(result: PlanResult) -> list[dict[str, Any]]:
    ranks = {id(c): i for i, c in enumerate(result.ranked, start=1)}
    fronts = {axis: {id(c) for c in pareto(result, axis)} for axis in ("gpus", "gpu_hours")}
    g = result.request.cluster.gpus_per_node
    rows = []
    for c in sorted(result.candidates, key=lambda c: ranks.get(id(c), len(ranks) + 1 + c.index)):
        rows.append(_row(c, ranks.get(id(c)), g, fronts))
    for r in result.rejected_layouts:
        rows.append({"status": "removed", "reason": r.reason, "detail": r.detail, "candidates": r.candidates,
                     "gpus": r.gpus, "nodes": max(1, r.gpus // g), "pp": r.pp, "tp": r.tp})
    return rows


def _row(c: Candidate, rank: int | None, g: int, fronts: dict[str, set[int]]) -> dict[str, Any]:
    la, sy = c.layout, c.sync
    row: dict[str, Any] = {
        "rank": rank or "", "status": "simulated" if c.outcome else "removed", "reason": c.reason, "detail": c.detail,
        "candidates": 1, "gpus": la.gpus, "nodes": max(1, la.gpus // g), "dp": la.dp, "pp": la.pp, "tp": la.tp,
        # the large-model settings that tell layouts of one dp x pp x tp apart (the table's settings column)
        "cp": la.cp, "ep": la.ep, "vpp": la.vpp, "sequence_parallel": la.sequence_parallel,
        "zero_stage": la.zero_stage, "recompute": la.recompute,
        "batch_per_replica": la.batch, "global_batch": la.global_batch, "micro_batches": la.micro_batches,
        "schedule": la.schedule if la.pp > 1 else "", "backend": sy.backend, "collective": sy.collective,
        "codec": sy.codec or "", "codec_path": sy.codec_path or "", "bucket_mib": sy.bucket_mib,
        "memory_gib": c.memory_bytes / 2**30 if c.memory_bytes else "",
    }
    o = c.outcome
    if o is not None:
        row.update({
            "iteration_time_s": o.iteration_time_s, "time_per_sample_s": c.time_per_sample_s,
            "samples_per_s": 1.0 / c.time_per_sample_s, "gpu_hours_per_1m_samples": c.gpu_s_per_sample * 1e6 / 3600,
            "compute_time_s": o.compute_time_s, "recompute_time_s": o.recompute_time_s,
            "tp_comm_time_s": o.tp_comm_time_s, "model_comm_time_s": o.model_comm_time_s,
            "bubble_time_s": o.bubble_time_s, "exposed_comm_time_s": o.exposed_comm_time_s,
            # the table's overlap and waiting columns: compute slowed by the collectives beside it, and
            # the wait for the slowest GPU (sim/costs/contention.py, sim/faults.py)
            "overlap_slowdown_time_s": o.overlap_slowdown_time_s, "straggler_wait_time_s": o.straggler_wait_time_s,
            "codec_time_s": o.codec_time_s,
            "pp_comm_time_s": o.pp_comm_time_s, "comm_time_s": o.comm_time_s,
            "pareto_gpus": id(c) in fronts["gpus"], "pareto_gpu_hours": id(c) in fronts["gpu_hours"],
        })
    return row


def write_candidates_csv(result: PlanResult, path: Path) -> tuple[Path, int]:
    rows = candidate_rows(result)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(COLUMNS), lineterminator="\n", restval="")
    writer.writeheader()
    writer.writerows(rows)
    return atomic_write_text(path, buf.getvalue()), len(rows)


def write_winner(result: PlanResult, path: Path) -> Path:
    spec = result.winner.spec(result.request)
    text = "# the plan's winner: scalebench simulate " + str(path) + "\n" + yaml.safe_dump(spec, sort_keys=False)
    return atomic_write_text(path, text)


def short_label(c: Candidate) -> str:
    la = c.layout
    return f"dp{la.dp}·pp{la.pp}·tp{la.tp}" + (f" m{la.micro_batches}" if la.micro_batches > 1 else "")


def _annotate_front(ax, points: list[tuple[float, float, str]], fontsize: float = 7) -> None:
    """Label a front's points where a label fits: in drawing order, a point is labelled only when
    its label would start at least one line below, or a label's width to the side of, every label
    already placed (a front of dozens of points at one GPU count printed its labels on top of each
    other). Call after the axes' scales and limits are set."""
    fig = ax.figure
    fig.canvas.draw()
    line_px = 1.4 * fontsize * fig.dpi / 72
    placed: list[tuple[float, float, float]] = []
    for x, y, text in points:
        px, py = ax.transData.transform((x, y))
        width = 0.6 * fontsize * fig.dpi / 72 * len(text)
        if all(abs(py - qy) >= line_px or px >= qx + qw or px + width <= qx for qx, qy, qw in placed):
            ax.annotate(text, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=fontsize)
            placed.append((px, py, width))


def _plain_log_axis(axis) -> None:
    """A log axis labelled 1, 2, 5, 10, 20 ... as plain numbers, no minor labels (matplotlib's
    minor labels 2x10^1 3x10^1 ... ran into each other)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def draw_pareto(result: PlanResult, stem: Path) -> list[Path]:
    per_iteration = result.per_iteration()
    # the cloud: the best candidate of each layout (the syncs of one layout stack on one x)
    best: dict[Any, Candidate] = {}
    for c in result.ranked:
        best.setdefault(c.layout, c)
    cloud = list(best.values())

    def y_of(c: Candidate) -> float:
        assert c.outcome is not None
        return c.outcome.iteration_time_s if per_iteration else 1e3 * c.time_per_sample_s

    y_label = "iteration time (s)" if per_iteration else "time per 1,000 samples (s)"
    counts = sorted({c.layout.gpus for c in cloud})
    req = result.request
    batch = f"global batch {req.global_batch}" if req.global_batch else f"batch {req.workload.batch_size}/replica"
    title = (f"plan: {req.workload.name} on {req.cluster.gpu.name}, {req.cluster.gpus_per_node}/node, "
             f"{req.cluster.intra_link.name} + {req.cluster.inter_link.name}, {req.precision}, {batch}; "
             f"{result.simulated:,} candidates simulated")
    if len(counts) == 1:
        return _draw_memory_front(result, cloud, y_of, y_label, stem, f"{title}\n{counts[0]} GPUs: time against "
                                  "memory per GPU (one GPU count: no GPU or GPU-hour front to draw)")
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2))
    left.scatter([c.layout.gpus for c in cloud], [y_of(c) for c in cloud], s=8, color="#bbbbbb",
                 label="best of each layout")
    front = pareto(result, "gpus")
    left.plot([c.layout.gpus for c in front], [y_of(c) for c in front], "-o", color="#4c72b0", markersize=5,
              label="Pareto front (fewer GPUs or faster)")
    w = result.winner
    left.scatter([w.layout.gpus], [y_of(w)], marker="*", s=160, color="#dd5555", zorder=5, label="winner")
    # powers of two, at most about a dozen labels: every count tried (8, 16, 24, ... with --max-gpus) overlapped
    log2_axis(left, "x", counts[0] / 2**0.25, counts[-1] * 2**0.25)
    left.set_xlim(counts[0] / 2**0.25, counts[-1] * 2**0.25)
    left.set_yscale("log")
    _plain_log_axis(left.yaxis)
    left.set_xlabel("GPUs (log scale; every count tried is a column of points)")
    left.set_ylabel(y_label)
    left.grid(True, alpha=0.3)
    legend_below(left, ncol=3, y=-0.14)

    def hours(c: Candidate) -> float:
        return c.time_per_sample_s * 1e6 / 3600

    right.scatter([c.gpu_s_per_sample * 1e6 / 3600 for c in cloud], [hours(c) for c in cloud], s=8, color="#bbbbbb",
                  label="best of each layout")
    front = pareto(result, "gpu_hours")
    right.plot([c.gpu_s_per_sample * 1e6 / 3600 for c in front], [hours(c) for c in front], "-o", color="#55a868",
               markersize=5, label="Pareto front (cheaper or faster)")
    gpu_front = pareto(result, "gpus")
    right.scatter([w.gpu_s_per_sample * 1e6 / 3600], [hours(w)], marker="*", s=160, color="#dd5555", zorder=5,
                  label="winner")
    right.set_xscale("log")
    right.set_yscale("log")
    _plain_log_axis(right.xaxis)
    _plain_log_axis(right.yaxis)
    right.set_xlabel("GPU-hours per 1M samples (log scale)")
    right.set_ylabel("hours per 1M samples (log scale)")
    right.grid(True, alpha=0.3)
    legend_below(right, ncol=3, y=-0.14)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    _annotate_front(left, [(c.layout.gpus, y_of(c), short_label(c)) for c in gpu_front])
    _annotate_front(right, [(c.gpu_s_per_sample * 1e6 / 3600, hours(c), f"{c.layout.gpus} GPUs {short_label(c)}")
                            for c in front])
    return save_figure(fig, stem)


def _draw_memory_front(result: PlanResult, cloud: list[Candidate], y_of, y_label: str, stem: Path,
                       title: str) -> list[Path]:
    """One GPU count: time per sample (or iteration) against memory per GPU, the front of
    candidates no other beats on both, the memory each GPU has, the winner."""
    gib = 2**30
    fig, ax = plt.subplots(figsize=(8.5, 5.4))
    ax.scatter([c.memory_bytes / gib for c in cloud], [y_of(c) for c in cloud], s=10, color="#bbbbbb",
               label="best of each layout")
    front = pareto(result, "memory")
    ax.plot([c.memory_bytes / gib for c in front], [y_of(c) for c in front], "-o", color="#8172b3", markersize=5,
            label="Pareto front (less memory or faster)")
    w = result.winner
    ax.scatter([w.memory_bytes / gib], [y_of(w)], marker="*", s=160, color="#dd5555", zorder=5, label="winner")
    ax.axvline(result.request.memory_limit_bytes / gib, color="black", linestyle=":", linewidth=1,
               label=f"memory per GPU ({result.request.memory_limit_bytes / gib:.0f} GiB)")
    ax.set_yscale("log")
    _plain_log_axis(ax.yaxis)
    ax.set_xlim(left=0)
    ax.set_xlabel("memory per GPU (GiB): parameters, gradients, optimizer state, stored activations")
    ax.set_ylabel(y_label + ", log scale")
    ax.grid(True, alpha=0.3)
    legend_below(ax, ncol=2, y=-0.14)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    _annotate_front(ax, [(c.memory_bytes / gib, y_of(c), short_label(c)) for c in [w, *front]])
    return save_figure(fig, stem)
