"""Plots and tables of multi-iteration experiments (``iterations:`` set: rows from sim.run.simulate_run).

    throughput.*  samples/s (solid) and effective samples/s after the staleness penalty (dashed)
                  along the first numeric swept axis (e.g. jitter CV), one line per case, one
                  panel per combination of the other swept axes (e.g. slow node, failure)
    staleness.*   mean and 95th-percentile staleness of applied updates along the same axis
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from experiments.plot_style import MARKERS, panel_legend, save_figure, series_colors  # noqa: E402
from experiments.tables import axis_title, describe_fixed, with_none_labels  # noqa: E402


def _axes_roles(df: pd.DataFrame, axes: list[str]) -> tuple[str | None, list[str], list[str]]:
    """(x axis: the first swept numeric axis other than the GPU count, line axes, panel axes).

    Lines are the case axis (or the first remaining axis); panels every other swept axis."""
    axes = [a for a in axes if a in df.columns]
    numeric = [a for a in axes if a != "case" and pd.api.types.is_numeric_dtype(df[a]) and df[a].nunique() > 1]
    x = numeric[0] if numeric else None
    rest = [a for a in axes if a != x]
    lines = ["case"] if "case" in rest else rest[:1]
    panels = [a for a in rest if a not in lines]
    return x, lines, panels


def _label(axis: str, value: Any) -> str:
    return f"{axis_title(axis)} = {value}"


def _panels(df: pd.DataFrame, panels: list[str]) -> list[tuple[str, pd.DataFrame]]:
    if not panels:
        return [("", df)]
    values = [list(dict.fromkeys(df[p].tolist())) for p in panels]
    out = []
    for combo in itertools.product(*values):
        sel = df
        for axis, v in zip(panels, combo, strict=True):
            sel = sel[sel[axis] == v]
        if not sel.empty:
            out.append((", ".join(_label(a, v) for a, v in zip(panels, combo, strict=True)), sel))
    return out


def _lines(df: pd.DataFrame, lines: list[str]) -> list[tuple[str, pd.DataFrame]]:
    if not lines:
        return [("", df)]
    keys = df[lines].astype(str).agg(", ".join, axis=1)
    return [(k, df[keys == k]) for k in dict.fromkeys(keys)]


def _grid(n: int):
    cols = min(2, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.4 * cols, 4.4 * rows), squeeze=False, sharex=True, sharey=True)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, axes


def plot_run_metric(df: pd.DataFrame, axes_order: list[str], name: str, stem: Path, *,
                    metrics: tuple[tuple[str, str, str], ...], ylabel: str, title: str,
                    log_y: bool = False, only: str | None = None) -> list[Path]:
    """One line per case and metric (``(column, label suffix, linestyle)``), panels per other axis."""
    x, lines, panels = _axes_roles(df, axes_order)
    data = df if only is None else df[df["mode"] == only]
    groups = _panels(data, panels)
    fig, axes = _grid(len(groups))
    line_names = [k for k, _ in _lines(df, lines)]  # the same colour per line in every plot
    colors = dict(zip(line_names, series_colors(len(line_names)), strict=False))
    for ax, (panel_title, part) in zip(axes.flat, groups, strict=False):
        for i, (line, sel) in enumerate(_lines(part, lines)):
            sel = sel.sort_values(x) if x else sel
            xs = sel[x] if x else range(len(sel))
            for k, (column, suffix, style) in enumerate(metrics):
                # the second metric hollow and larger: where it equals the first (a synchronous run is
                # never stale), both markers stay visible
                ax.plot(xs, sel[column], color=colors[line], linestyle=style, marker=MARKERS[i % len(MARKERS)],
                        markersize=4 + 3 * k, markerfacecolor=colors[line] if k == 0 else "none",
                        label=f"{line}{suffix}", zorder=3 - k)
        ax.set_title(panel_title, fontsize=9)
        ax.grid(True, alpha=0.3)
        if log_y:
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))  # 200, 500, 1,000: numbers, not 10^k
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
            ax.yaxis.set_minor_formatter(NullFormatter())
    for ax in axes[-1, :]:
        ax.set_xlabel(f"{axis_title(x)} ({x})" if x else "point")
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel)
    handles, labels = panel_legend(axes)
    fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=8, bbox_to_anchor=(0.5, -0.01))
    rows = math.ceil(len(labels) / 3)
    fig.suptitle(f"{title}\n{name}: {describe_fixed(df)}, {int(df['iterations'].iloc[0])} iterations per point",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.03 + 0.035 * rows, 1, 1))
    return save_figure(fig, stem)


def plot_run_results(df: pd.DataFrame, meta: dict[str, Any], out: Path) -> list[Path]:
    axes = list(meta.get("axes", []))
    df = with_none_labels(df, axes)
    name = meta["name"]
    written = plot_run_metric(
        df, axes, name, out / "throughput",
        metrics=(("samples_per_s", ": samples/s", "-"),
                 ("effective_samples_per_s", ": effective (x staleness penalty)", "--")),
        ylabel="training samples per second (log scale)", log_y=True,
        title="Throughput over a run: raw samples/s (solid) and after the staleness penalty (dashed; "
              "hollow; the same for synchronous updates, which are never stale)")
    if (df["mode"] == "async").any():
        written += plot_run_metric(
            df, axes, name, out / "staleness",
            metrics=(("staleness_mean", ": mean", "-"), ("staleness_p95", ": 95th percentile", ":")),
            ylabel="staleness of applied updates (updates)", only="async",
            title="Staleness of asynchronous updates (updates applied by others since the worker read the model)")
    return written
