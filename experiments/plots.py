"""The plots of an experiment, from results/<name>/ (PNG and SVG, matplotlib's Agg backend).

    speedup.*        speedup vs GPUs, ideal and 75 % lines, efficiency at the largest size
    efficiency.*     scaling efficiency vs GPUs, with the 75 % ("4 machines doing the work of 3") line
    efficiency_by_<axis>.*  the same, one panel per value of the swept axis with fewest values
                     (with two or more swept axes besides the GPU count)
    breakdown.*      per-iteration time stacked: compute, exposed communication (and any other parts)
    compare_<axis>.* scaling efficiency along each swept non-GPU axis, at the largest common GPU count
    timeline.*       one iteration of one point: the compute and communication streams

Multi-iteration experiments (``iterations:``) get experiments/plots_runs.py's plots instead.

Measured rows (source=real) are drawn beside the simulated ones with hollow markers.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.plot_style import (  # noqa: E402
    MARKERS,
    label_ends,
    legend_below,
    log2_axis,
    marker_sizes,
    panel_legend,
    save_figure,
    series_colors,
)
from experiments.store import ResultDir  # noqa: E402
from experiments.tables import (  # noqa: E402
    GPU_COLUMN,
    axis_title,
    describe_fixed,
    mean_over_repetitions,
    with_series,
)

TARGET_EFFICIENCY = 0.75
"""The practitioner's target from the seeds: 4 machines doing the work of 3."""
BREAKDOWN_PARTS = (
    ("compute_time_s", "compute (forward + backward + optimizer)", "#4c72b0"),
    ("exposed_comm_time_s", "exposed communication", "#dd5555"),
    ("bubble_time_s", "pipeline bubble", "#999999"),
    ("codec_time_s", "compression codec", "#8172b3"),
)


MAX_SERIES = 12
"""Plots draw at most this many series (the first ones, in sweep order) and say so in the title."""


def _limit_series(data: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    series = list(dict.fromkeys(data["series"]))
    if len(series) <= MAX_SERIES:
        return data, ""
    kept = set(series[:MAX_SERIES])
    return data[data["series"].isin(kept)], f" [first {MAX_SERIES} of {len(series)} series]"





def _gpu_axis(ax, values) -> None:
    """GPU counts on a log-2 axis, ticked and labelled at the counts themselves (1, 2, 4 ...)."""
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    ax.set_xscale("log", base=2)
    ticks = sorted({int(v) for v in values})
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_locator(NullLocator())
    if len(ticks) > 1:  # room for the markers at both ends
        ax.set_xlim(ticks[0] / 2**0.25, ticks[-1] * 2**0.25)
    ax.set_xlabel("GPUs (world size, log scale)")


def _title(ax, title: str, df: pd.DataFrame, name: str) -> None:
    ax.set_title(f"{title}\n{name}: {describe_fixed(df)}", fontsize=10)


def _series_lines(data: pd.DataFrame):
    """(color, label, line style, rows sorted by GPUs) per series and source: simulated points
    solid, measured ones dashed and hollow in the same color; every point at its own GPU count,
    each series with its own marker shape and a smaller marker than the one before
    (plot_style.marker_sizes), so series that coincide show as nested markers."""
    series = list(dict.fromkeys(data["series"]))
    sizes = marker_sizes(len(series))
    for i, (color, s) in enumerate(zip(series_colors(len(series)), series, strict=False)):
        marker = MARKERS[i % len(MARKERS)]
        for source, style in (("sim", dict(marker=marker, linestyle="-", markersize=sizes[i], markeredgecolor="white",
                                           markeredgewidth=0.6, zorder=2 + i / 100)),
                              ("real", dict(marker=marker, linestyle="--", markerfacecolor="none",
                                            markersize=sizes[i] + 1, zorder=2.5 + i / 100))):
            part = data[(data["series"] == s) & (data["source"] == source)].sort_values(GPU_COLUMN)
            if not part.empty:
                yield color, (s if source == "sim" else f"{s} (measured)"), style, part


NESTED_NOTE = "series that coincide show as nested markers, each at its GPU count"


def _axis_note(ax, several: bool) -> None:
    """Say how coinciding series look, under the GPU axis; the legend goes below that."""
    if several:
        ax.set_xlabel(ax.get_xlabel() + "\n" + NESTED_NOTE, fontsize=9)
    legend_below(ax, y=-0.2 if several else -0.14)


def plot_speedup(data: pd.DataFrame, name: str, stem: Path) -> list[Path]:
    data, note = _limit_series(data)
    fig, ax = plt.subplots(figsize=(7.5, 5.5))
    gpus = sorted(data[GPU_COLUMN].unique())
    ax.plot(gpus, gpus, color="black", linestyle="--", linewidth=1, label="ideal (speedup = GPUs)")
    ax.plot(gpus, [TARGET_EFFICIENCY * g for g in gpus], color="grey", linestyle=":", linewidth=1,
            label="75 % efficiency (4 machines do the work of 3)")
    ends = []
    for color, label, style, part in _series_lines(data):
        ax.plot(part[GPU_COLUMN], part["speedup"], color=color, label=label, **style)
        last = part.iloc[-1]
        ends.append((last[GPU_COLUMN], last["speedup"], f"{100 * last['scaling_efficiency']:.0f} %", color))
    _gpu_axis(ax, gpus)
    values = [*data["speedup"], *(TARGET_EFFICIENCY * g for g in gpus), *gpus]
    log2_axis(ax, "y", min(v for v in values if v > 0) / 1.3, max(values) * 1.3)
    ax.set_ylabel("speedup over 1 GPU (x, log scale)")
    _title(ax, "Speedup vs GPUs (weak scaling; right: efficiency at the largest size)" + note, data, name)
    ax.grid(True, which="major", alpha=0.3)
    _axis_note(ax, data["series"].nunique() > 1)
    label_ends(ax, ends)
    return save_figure(fig, stem)


def plot_efficiency(data: pd.DataFrame, name: str, stem: Path) -> list[Path]:
    data, note = _limit_series(data)
    fig, ax = plt.subplots(figsize=(7.5, 5.5))
    gpus = sorted(data[GPU_COLUMN].unique())
    ax.axhline(100, color="black", linestyle="--", linewidth=1, label="ideal (100 %)")
    ax.axhline(100 * TARGET_EFFICIENCY, color="grey", linestyle=":", linewidth=1.2,
               label="75 %: 4 machines doing the work of 3")
    ends = []
    for color, label, style, part in _series_lines(data):
        ax.plot(part[GPU_COLUMN], 100 * part["scaling_efficiency"], color=color, label=label, **style)
        last = part.iloc[-1]
        ends.append((last[GPU_COLUMN], 100 * last["scaling_efficiency"], f"{100 * last['scaling_efficiency']:.0f} %", color))
    _gpu_axis(ax, gpus)
    ax.set_ylim(0, 105)
    ax.set_ylabel("scaling efficiency T1 / TN (%)")
    _title(ax, "Scaling efficiency vs GPUs (weak scaling, same batch per GPU)" + note, data, name)
    ax.grid(True, alpha=0.3)
    _axis_note(ax, data["series"].nunique() > 1)
    label_ends(ax, ends)
    return save_figure(fig, stem)


def plot_efficiency_panels(data: pd.DataFrame, panel_axis: str, name: str, stem: Path) -> list[Path]:
    """Scaling efficiency vs GPUs, one panel per value of ``panel_axis`` (e.g. the network), one
    line per combination of the other swept axes, the same colour in every panel."""
    sim = data[data["source"] == "sim"]
    panels = list(dict.fromkeys(sim[panel_axis].astype(str)))
    sim = sim.assign(line=[s.replace(f", {p}", "").replace(f"{p}, ", "") if s != p else s
                           for s, p in zip(sim["series"], sim[panel_axis].astype(str), strict=True)])
    lines = list(dict.fromkeys(sim["line"]))[:MAX_SERIES]
    colors = dict(zip(lines, series_colors(len(lines)), strict=False))
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows), squeeze=False, sharey=True)
    gpus = sorted(sim[GPU_COLUMN].unique())
    sizes = dict(zip(lines, marker_sizes(len(lines), largest=8.0, smallest=3.5), strict=True))
    for ax, panel in zip(axes.flat, panels, strict=False):
        part = sim[sim[panel_axis].astype(str) == panel]
        ax.axhline(100, color="black", linestyle="--", linewidth=1, label="ideal (100 %)")
        ax.axhline(100 * TARGET_EFFICIENCY, color="grey", linestyle=":", linewidth=1.2, label="75 % target")
        for i, line in enumerate(lines):
            sel = part[part["line"] == line].sort_values(GPU_COLUMN)
            if not sel.empty:
                ax.plot(sel[GPU_COLUMN], 100 * sel["scaling_efficiency"], color=colors[line],
                        marker=MARKERS[i % len(MARKERS)], markersize=sizes[line], markeredgecolor="white",
                        markeredgewidth=0.5, label=line, zorder=2 + i / 100)
        _gpu_axis(ax, gpus)
        ax.set_ylim(0, 105)
        ax.set_title(f"{axis_title(panel_axis)} = {panel}", fontsize=9)
        ax.grid(True, alpha=0.3)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("scaling efficiency T1 / TN (%)")
    handles, labels = panel_legend(axes)
    fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=8, bbox_to_anchor=(0.5, -0.01))
    fig.suptitle(f"Scaling efficiency vs GPUs by {axis_title(panel_axis)} (weak scaling, simulated"
                 f"{'; ' + NESTED_NOTE if len(lines) > 1 else ''})\n{name}: {describe_fixed(sim)}", fontsize=10)
    fig.tight_layout(rect=(0, 0.03 + 0.035 * math.ceil(len(labels) / 3), 1, 1))
    return save_figure(fig, stem)


def plot_breakdown(data: pd.DataFrame, name: str, stem: Path) -> list[Path]:
    sim, note = _limit_series(data[data["source"] == "sim"])
    series = list(dict.fromkeys(sim["series"]))
    cols = min(3, len(series))
    rows = math.ceil(len(series) / cols)
    tops = sim.groupby("series")["iteration_time_s"].max()
    shared = bool(len(tops)) and tops.max() <= 10 * tops.min()  # a shared scale only if no panel would be flat
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False, sharey=shared)
    parts = [(c, label, color) for c, label, color in BREAKDOWN_PARTS  # only what some bar shows: no empty legend entries
             if c in sim.columns and (sim[c].fillna(0) > 0).any()]
    for ax, s in zip(axes.flat, series, strict=False):
        part = sim[sim["series"] == s].sort_values(GPU_COLUMN)
        x = range(len(part))
        bottom = [0.0] * len(part)
        for column, label, color in parts:
            values = (1e3 * part[column].fillna(0)).tolist()
            ax.bar(x, values, bottom=bottom, color=color, label=label, width=0.7)
            bottom = [b + v for b, v in zip(bottom, values, strict=False)]
        other = [1e3 * it - b for it, b in zip(part["iteration_time_s"], bottom, strict=False)]
        if any(o > 0.01 * b for o, b in zip(other, bottom, strict=False)):
            ax.bar(x, [max(0.0, o) for o in other], bottom=bottom, color="#cccccc", label="other", width=0.7)
        ax.set_xticks(list(x))
        ax.set_xticklabels([str(int(g)) for g in part[GPU_COLUMN]], fontsize=8)
        ax.set_xlabel("GPUs")
        ax.set_title(s, fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
    for ax in axes.flat[len(series):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("time per iteration (ms)")
    handles, labels = panel_legend(axes)
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, bbox_to_anchor=(0.5, -0.02))
    scale = "" if shared else " (each panel its own time scale)"
    fig.suptitle(f"Where one iteration's time goes (simulated){scale}{note}\n{name}: {describe_fixed(sim)}", fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return save_figure(fig, stem)


def plot_compare(data: pd.DataFrame, axis: str, series_axes: list[str], name: str, stem: Path) -> list[Path]:
    """Efficiency along ``axis`` (x groups), one bar per combination of the other series axes."""
    sim = data[data["source"] == "sim"]
    counts = sim.groupby("series")[GPU_COLUMN].apply(set)
    common = set.intersection(*counts.tolist()) if len(counts) else set()
    gpus = max(common) if common else sim[GPU_COLUMN].max()
    at = sim[sim[GPU_COLUMN] == gpus]
    others = [a for a in series_axes if a != axis and a in at.columns]
    groups = list(dict.fromkeys(at[axis].astype(str)))
    bars = list(dict.fromkeys(at[others].astype(str).agg(", ".join, axis=1))) if others else [""]
    note = f" [first {MAX_SERIES} of {len(bars)} bar series]" if len(bars) > MAX_SERIES else ""
    bars = bars[:MAX_SERIES]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(groups) * max(1, len(bars)) ** 0.5 + 3), 4.8))
    width = 0.8 / len(bars)
    for j, (color, b) in enumerate(zip(series_colors(len(bars)), bars, strict=False)):
        ys = []
        for g in groups:
            sel = at[at[axis].astype(str) == g]
            if others:
                sel = sel[sel[others].astype(str).agg(", ".join, axis=1) == b]
            ys.append(100 * sel["scaling_efficiency"].mean() if not sel.empty else float("nan"))
        xs = [i + (j - (len(bars) - 1) / 2) * width for i in range(len(groups))]
        rects = ax.bar(xs, ys, width=width * 0.95, color=color, label=b or None)
        ax.bar_label(rects, labels=[f"{y:.0f}" if y == y else "" for y in ys], fontsize=7, padding=1)
    ax.axhline(100 * TARGET_EFFICIENCY, color="grey", linestyle=":", linewidth=1.2, label="75 % target")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=8, rotation=15 if max(map(len, groups)) > 12 else 0)
    ax.set_xlabel(axis_title(axis) if axis_title(axis) == axis else f"{axis_title(axis)}  ({axis})")
    ax.set_ylabel(f"scaling efficiency at {int(gpus)} GPUs (%)")
    ax.set_ylim(0, 110)
    title_others = f"; bars: {', '.join(axis_title(o) for o in others)}" if others else ""
    ax.set_title(f"Scaling efficiency by {axis_title(axis)} at {int(gpus)} GPUs (simulated{title_others}){note}\n"
                 f"{name}: {describe_fixed(at)}", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, stem)


def pick_timeline_point(data: pd.DataFrame) -> str:
    """The simulated point at the largest GPU count with the lowest efficiency (the most to see)."""
    sim = data[data["source"] == "sim"]
    top = sim[sim[GPU_COLUMN] == sim[GPU_COLUMN].max()]
    return str(top.sort_values("scaling_efficiency").iloc[0]["point_id"])


def plot_timeline(store: ResultDir, pid: str, name: str, stem: Path, calibration: dict | None) -> list[Path]:
    from experiments.points import simulate_spec

    point = store.read_point(pid)
    scenario, result = simulate_spec(point["spec"], calibration)
    row = point["row"]
    lanes = list(dict.fromkeys(s.lane for s in result.spans))
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.8 * len(lanes)))
    ps = scenario.strategy.collective == "ps"
    colors = {"fwd": "#4c72b0", "bwd": "#55a868", "optimizer": "#c49c2a", "bucket": "#8172b3" if ps else "#dd5555"}
    labels = {"fwd": "forward layer", "bwd": "backward layer", "optimizer": "optimizer step",
              "bucket": "parameter-server push/pull (per bucket)" if ps else "gradient bucket allreduce"}
    seen = set()
    thin_s = 0.004 * result.iteration_time_s  # narrower than this: no white edge, or the edges hide the bar
    for y, lane in enumerate(lanes):
        for span in (s for s in result.spans if s.lane == lane):
            kind = span.name.split()[0]
            label = labels.get(kind, kind)
            ax.barh(y, 1e3 * span.duration_s, left=1e3 * span.start_s, height=0.6, color=colors.get(kind, "#888888"),
                    edgecolor="white" if span.duration_s > thin_s else "none", linewidth=0.3,
                    label=None if label in seen else label)
            seen.add(label)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"{lane} stream" for lane in lanes])
    ax.invert_yaxis()
    ax.set_xlabel("time since the iteration started (ms)")
    ax.axvline(1e3 * result.compute_time_s, color="black", linestyle=":", linewidth=1, label="compute alone would end here")
    ax.set_title(f"One iteration, {result.world_size} GPUs: {1e3 * result.iteration_time_s:.1f} ms, "
                 f"{1e3 * result.exposed_comm_time_s:.1f} ms exposed communication, efficiency "
                 f"{100 * row['scaling_efficiency']:.0f} %\n{name}: {scenario.workload.name}, "
                 f"{row.get('inter_link', '')} between nodes, {row.get('collective', '')} (point {pid})", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=5, frameon=False)
    ax.grid(True, axis="x", alpha=0.3)
    return save_figure(fig, stem)


def plot_results(result_dir: str | Path, timeline_point: str | None = None) -> list[Path]:
    """Draw every plot of an experiment into ``result_dir/plots/``; returns the files written."""

    store = ResultDir(result_dir)
    meta = store.meta()
    df = store.read_csv()
    if df.empty:
        return []
    from experiments.plots_runs import plot_run_results
    from experiments.tables import is_run_table

    if is_run_table(df):
        return plot_run_results(df, meta, store.plots_dir)
    data = mean_over_repetitions(with_series(df, meta))
    name = meta["name"]
    out = store.plots_dir
    written = []
    if data[GPU_COLUMN].nunique() > 1:
        written += plot_speedup(data, name, out / "speedup")
        written += plot_efficiency(data, name, out / "efficiency")
    if (data["source"] == "sim").any():
        written += plot_breakdown(data, name, out / "breakdown")
        series_axes = [a for a in meta.get("series_axes", []) if a in data.columns]
        if len(series_axes) >= 2 and data[GPU_COLUMN].nunique() > 1:
            panel_axis = min(series_axes, key=lambda a: data[a].nunique())
            written += plot_efficiency_panels(data, panel_axis, name,
                                              out / f"efficiency_by_{panel_axis.replace('.', '_')}")
        for axis in series_axes:
            if data[axis].nunique() > 1:
                written += plot_compare(data, axis, series_axes, name, out / f"compare_{axis.replace('.', '_')}")
        raw = store.experiment_raw()
        pid = timeline_point or pick_timeline_point(df)
        written += plot_timeline(store, pid, name, out / "timeline", raw.get("calibration"))
    return written
