"""Files a validation run leaves under its ``out`` directory (each written atomically):

- validation.csv: one row per point: measured, predicted, relative error, and both breakdowns;
- summary.csv / summary.md: MAPE, worst and bias overall and per strategy, link, codec, ranks, model;
- validation.png: predicted vs measured iteration time (log-log), y = x and a +-10% band;
- worst_breakdown.png / worst_breakdown.csv: measured vs simulated time breakdown of the 5 worst points;
- network.csv / network.png: the network model alone at held-out microbenchmark sizes.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from real.results import write_rows
from sim.fileio import atomic_write_bytes
from validation.summary import worst_points

BREAKDOWN = (("forward_time_s", "forward"), ("backward_time_s", "backward"), ("optimizer_time_s", "optimizer"),
             ("exposed_comm_time_s", "exposed communication"))
BAND = 0.10


def _save(fig, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    atomic_write_bytes(path, buf.getvalue())


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_predicted_vs_measured(rows: Sequence[dict[str, Any]], path: Path, title: str, *, x_key: str = "measured_s",
                               y_key: str = "predicted_s", color_key: str = "strategy", marker_key: str = "link",
                               unit: str = "ms", scale: float = 1e3, what: str = "iteration time") -> None:
    plt = _plt()
    ok = [r for r in rows if not math.isnan(r.get("rel_error", math.nan))]
    fig, ax = plt.subplots(figsize=(7, 6))
    if ok:
        values = [r[x_key] * scale for r in ok] + [r[y_key] * scale for r in ok]
        lo, hi = min(values) / 1.5, max(values) * 1.5
        xs = [lo, hi]
        ax.fill_between(xs, [x * (1 - BAND) for x in xs], [x * (1 + BAND) for x in xs], color="0.85",
                        label=f"±{BAND:.0%} band")
        ax.plot(xs, xs, color="black", lw=1, label="y = x (perfect prediction)")
        colors = {v: f"C{i}" for i, v in enumerate(dict.fromkeys(str(r.get(color_key)) for r in ok))}
        markers = dict(zip(dict.fromkeys(str(r.get(marker_key)) for r in ok), "osD^v<>pP*", strict=False))
        for c, color in colors.items():
            for m, marker in markers.items():
                sel = [r for r in ok if str(r.get(color_key)) == c and str(r.get(marker_key)) == m]
                if sel:
                    ax.scatter([r[x_key] * scale for r in sel], [r[y_key] * scale for r in sel], c=color,
                               marker=marker, s=36, label=f"{c}, {m}", edgecolors="black", linewidths=0.4)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
    ax.set_xlabel(f"measured {what} ({unit})")
    ax.set_ylabel(f"simulated {what} ({unit})")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    _save(fig, path)
    plt.close(fig)


def breakdown_rows(rows: Sequence[dict[str, Any]], k: int = 5) -> list[dict[str, Any]]:
    out = []
    for r in worst_points(rows, k):
        for source in ("measured", "predicted"):
            entry = {"point": r["point"], "source": "real" if source == "measured" else "sim",
                     "iteration_time_s": r[f"{source}_s"], "rel_error": r["rel_error"]}
            for key, _ in BREAKDOWN:
                entry[key] = r.get(f"{source}_{key}", math.nan)
            out.append(entry)
    return out


def plot_breakdown(rows: Sequence[dict[str, Any]], path: Path, title: str) -> None:
    plt = _plt()
    entries = breakdown_rows(rows)
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(entries)), 5))
    labels = [f"{e['point']}\n{e['source']}" + (f" ({e['rel_error']:+.0%})" if e["source"] == "sim" else "")
              for e in entries]
    bottoms = [0.0] * len(entries)
    for i, (key, label) in enumerate(BREAKDOWN):
        heights = [max(0.0, e[key]) * 1e3 if not math.isnan(e[key]) else 0.0 for e in entries]
        ax.bar(range(len(entries)), heights, bottom=bottoms, color=f"C{i}", label=label)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    ax.scatter(range(len(entries)), [e["iteration_time_s"] * 1e3 for e in entries], marker="_", s=400, c="black",
               label="iteration time", zorder=3)
    ax.set_xticks(range(len(entries)))
    ax.set_xticklabels(labels, fontsize=6, rotation=30, ha="right")
    ax.set_ylabel("time per iteration (ms)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    _save(fig, path)
    plt.close(fig)


def write_outputs(out: Path, rows: list[dict[str, Any]], summary_rows: list[dict[str, Any]], summary_md: str,
                  network: list[dict[str, Any]], network_summary_md: str, name: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = [write_rows(out / "validation.csv", rows)] if rows else []
    if summary_rows:
        written.append(write_rows(out / "summary.csv", summary_rows))
    written.append(atomic_write_bytes(out / "summary.md", (summary_md + network_summary_md).encode()))
    plot_predicted_vs_measured(rows, out / "validation.png",
                               f"{name}: simulated vs measured iteration time (gloo, CPU, this machine)")
    written.append(out / "validation.png")
    if any(not math.isnan(r.get("rel_error", math.nan)) for r in rows):
        written.append(write_rows(out / "worst_breakdown.csv", breakdown_rows(rows)))
        plot_breakdown(rows, out / "worst_breakdown.png", f"{name}: the 5 worst points, measured (real) vs simulated (sim)")
        written.append(out / "worst_breakdown.png")
    if network:
        written.append(write_rows(out / "network.csv", network))
        plot_predicted_vs_measured(network, out / "network.png",
                                   f"{name}: network model alone, held-out sizes (gloo collectives)",
                                   color_key="collective", marker_key="link", unit="ms", what="collective time")
        written.append(out / "network.png")
    return written
