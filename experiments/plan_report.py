"""A plan's files: every candidate as a CSV row, the Pareto fronts as PNG and SVG, the winner as a
scenario YAML that ``scalebench simulate`` runs. Each file is written atomically.

    candidates.csv  one row per candidate: simulated (rank and breakdown), removed by memory or
                    by the library (the reason), and one row per layout a rule removed before
                    (``candidates``: how many candidates it stood for)
    pareto.png/svg  left: iteration time (time per 1,000 samples in weak scaling) vs GPUs;
                    right: hours vs GPU-hours per 1M samples; grey: the best candidate of every
                    layout, coloured: the front, star: the winner
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

from experiments.plot_style import save_figure  # noqa: E402
from sim.fileio import atomic_write_text  # noqa: E402
from sim.planner.explain import pareto  # noqa: E402
from sim.planner.search import Candidate, PlanResult  # noqa: E402

COLUMNS = (
    "rank", "status", "reason", "detail", "candidates", "gpus", "nodes", "dp", "pp", "tp", "batch_per_replica",
    "global_batch", "micro_batches", "schedule", "backend", "collective", "codec", "codec_path", "bucket_mib",
    "iteration_time_s", "time_per_sample_s", "samples_per_s", "gpu_hours_per_1m_samples", "compute_time_s",
    "tp_comm_time_s", "bubble_time_s", "exposed_comm_time_s", "codec_time_s", "pp_comm_time_s", "comm_time_s",
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
            "compute_time_s": o.compute_time_s, "tp_comm_time_s": o.tp_comm_time_s, "bubble_time_s": o.bubble_time_s,
            "exposed_comm_time_s": o.exposed_comm_time_s, "codec_time_s": o.codec_time_s,
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

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2))
    left.scatter([c.layout.gpus for c in cloud], [y_of(c) for c in cloud], s=8, color="#bbbbbb",
                 label="best of each layout")
    front = pareto(result, "gpus")
    left.plot([c.layout.gpus for c in front], [y_of(c) for c in front], "-o", color="#4c72b0", markersize=5,
              label="Pareto front (fewer GPUs or faster)")
    for c in front:
        left.annotate(short_label(c), (c.layout.gpus, y_of(c)), textcoords="offset points", xytext=(5, 4), fontsize=7)
    w = result.winner
    left.scatter([w.layout.gpus], [y_of(w)], marker="*", s=160, color="#dd5555", zorder=5, label="winner")
    counts = sorted({c.layout.gpus for c in cloud})
    left.set_xscale("log", base=2)
    left.set_xticks(counts)
    left.set_xticklabels([str(x) for x in counts])
    left.minorticks_off()
    left.set_yscale("log")
    left.set_xlabel("GPUs (log scale)")
    left.set_ylabel("iteration time (s)" if per_iteration else "time per 1,000 samples (s)")
    left.grid(True, alpha=0.3)
    left.legend(fontsize=8)

    def hours(c: Candidate) -> float:
        return c.time_per_sample_s * 1e6 / 3600

    right.scatter([c.gpu_s_per_sample * 1e6 / 3600 for c in cloud], [hours(c) for c in cloud], s=8, color="#bbbbbb")
    front = pareto(result, "gpu_hours")
    right.plot([c.gpu_s_per_sample * 1e6 / 3600 for c in front], [hours(c) for c in front], "-o", color="#55a868",
               markersize=5, label="Pareto front (cheaper or faster)")
    for c in front:
        right.annotate(f"{c.layout.gpus} GPUs {short_label(c)}", (c.gpu_s_per_sample * 1e6 / 3600, hours(c)),
                       textcoords="offset points", xytext=(5, 4), fontsize=7)
    right.scatter([w.gpu_s_per_sample * 1e6 / 3600], [hours(w)], marker="*", s=160, color="#dd5555", zorder=5)
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("GPU-hours per 1M samples (log scale)")
    right.set_ylabel("hours per 1M samples (log scale)")
    right.grid(True, alpha=0.3)
    right.legend(fontsize=8)
    req = result.request
    batch = f"global batch {req.global_batch}" if req.global_batch else f"batch {req.workload.batch_size}/replica"
    fig.suptitle(f"plan: {req.workload.name} on {req.cluster.gpu.name}, {req.cluster.gpus_per_node}/node, "
                 f"{req.cluster.intra_link.name} + {req.cluster.inter_link.name}, {req.precision}, {batch}; "
                 f"{result.simulated:,} candidates simulated", fontsize=10)
    return save_figure(fig, stem)



