"""Result tables for people: series labels, the efficiency pivot, markdown."""

from __future__ import annotations

from typing import Any

import pandas as pd

GPU_COLUMN = "world_size"
RUN_COLUMN = "effective_samples_per_s"
"""A results table with this column holds multi-iteration runs (experiment ``iterations:``)."""


DESCRIBE_COLUMNS = (  # (column, how a subtitle writes it)
    ("model", "{}"), ("batch_size", "batch {}/GPU"), ("gpu", "{}"), ("gpus_per_node", "{} GPUs/node"),
    ("intra_link", "intra {}"), ("inter_link", "inter {}"), ("strategy", "{}"), ("collective", "{}"),
    ("precision", "{}"),
)


def describe_fixed(df: pd.DataFrame) -> str:
    """The config columns that are the same in every row, as a short line for subtitles."""
    parts = []
    one_per_node = "gpus_per_node" in df.columns and set(df["gpus_per_node"]) == {1}
    for column, fmt in DESCRIBE_COLUMNS:
        if column == "intra_link" and one_per_node:
            continue  # no intra-node link in use
        if column in df.columns and df[column].nunique(dropna=False) == 1:
            value = df[column].iloc[0]
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            parts.append(fmt.format(value))
    return ", ".join(parts)


def is_run_table(df: pd.DataFrame) -> bool:
    return RUN_COLUMN in df.columns


def with_none_labels(df: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    """Axis columns with empty cells (an axis value of null) read 'none', so they group and label
    (and their whole numbers, which the empty cells made floats, read as integers again)."""
    df = df.copy()
    for axis in axes:
        if axis in df.columns and df[axis].isna().any():
            df[axis] = [("none" if pd.isna(v) else int(v) if isinstance(v, float) and v.is_integer() else v)
                        for v in df[axis]]
    return df


def axis_title(axis: str) -> str:
    """``cluster.inter_link`` -> ``inter link``; ``case`` -> ``case``."""
    return axis.split(".")[-1].replace("_", " ")


def with_series(df: pd.DataFrame, meta: dict[str, Any]) -> pd.DataFrame:
    """Add a ``series`` column: the values of the swept non-GPU axes (the experiment name if none)."""
    df = df.copy()
    axes = [a for a in meta.get("series_axes", []) if a in df.columns]
    if axes:
        df["series"] = df[axes].astype(str).agg(", ".join, axis=1)
    else:
        df["series"] = meta.get("name", "scenario")
    return df


def mean_over_repetitions(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (source, series, GPU count): numbers averaged over repetitions."""
    keys = ["source", "series", GPU_COLUMN]
    numeric = [c for c in df.select_dtypes("number").columns if c not in (GPU_COLUMN, "repetition")]
    firsts = [c for c in df.columns if c not in numeric and c not in keys]
    agg = {**{c: "mean" for c in numeric}, **{c: "first" for c in firsts}}
    return df.groupby(keys, sort=False, as_index=False).agg(agg)


def efficiency_rows(df: pd.DataFrame, meta: dict[str, Any], source: str = "sim") -> list[dict[str, Any]]:
    """Scaling efficiency (%, one decimal) by GPU count (one row each) and series (one column
    each), as rows for a real table ('-' where a series has no point at that count)."""
    data = mean_over_repetitions(with_series(df, meta))
    data = data[data["source"] == source]
    if data.empty:
        return []
    pivot = data.pivot_table(index=GPU_COLUMN, columns="series", values="scaling_efficiency", sort=False).sort_index()
    return [{"GPUs": int(gpus), **{str(s): ("-" if pd.isna(v) else f"{100 * v:.1f}") for s, v in row.items()}}
            for gpus, row in pivot.iterrows()]


def efficiency_table(df: pd.DataFrame, meta: dict[str, Any], source: str = "sim", max_series: int = 12) -> str:
    """Scaling efficiency (%) by GPU count (rows) and series (columns), as plain text
    (for a multi-iteration experiment: its runs' throughput and staleness table)."""
    if is_run_table(df):
        return markdown_table(run_summary_rows(df, meta))
    data = mean_over_repetitions(with_series(df, meta))
    data = data[data["source"] == source]
    if data.empty:
        return f"(no {source} rows)"
    if data["series"].nunique() > max_series:
        return (f"({data['series'].nunique()} series: too many to print; see results.csv, the plots, "
                f"or `scalebench report`)")
    pivot = data.pivot_table(index=GPU_COLUMN, columns="series", values="scaling_efficiency", sort=False)
    pivot = pivot.sort_index()
    text = (100 * pivot).round(1).to_string(na_rep="-")
    return f"scaling efficiency (%, weak scaling, {source}) by GPUs:\n{text}"


def markdown_table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(no rows)\n"
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(str(row.get(c, "")).replace("|", "/") for c in columns) + " |")
    return "\n".join(lines) + "\n"


def summary_rows(df: pd.DataFrame, meta: dict[str, Any]) -> list[dict[str, Any]]:
    """Per series, source and GPU count: iteration time, speedup, efficiency, exposed share."""
    data = mean_over_repetitions(with_series(df, meta)).sort_values(["source", "series", GPU_COLUMN])
    rows = []
    for _, r in data.iterrows():
        rows.append({
            "source": r["source"],
            "series": r["series"],
            "GPUs": int(r[GPU_COLUMN]),
            "iteration (ms)": f"{1e3 * r['iteration_time_s']:.2f}",
            "throughput (samples/s)": f"{r['throughput_samples_per_s']:,.0f}",
            "speedup (x)": f"{r['speedup']:.1f}",
            "efficiency (%)": f"{100 * r['scaling_efficiency']:.1f}",
            "exposed comm. (% of iteration)": f"{100 * r.get('exposed_comm_time_s', float('nan')) / r['iteration_time_s']:.1f}",
        })
    return rows


def run_summary_rows(df: pd.DataFrame, meta: dict[str, Any]) -> list[dict[str, Any]]:
    axes = [a for a in meta.get("axes", []) if a in df.columns]
    df = with_none_labels(df, axes)
    numeric = [c for c in df.select_dtypes("number").columns if c not in axes and c != "repetition"]
    data = df[df["source"] == "sim"].groupby(axes, sort=False, dropna=False, as_index=False)[numeric].mean()
    rows = []
    for _, r in data.iterrows():
        rows.append({
            **{axis_title(a): r[a] for a in axes},
            "GPUs": int(r["world_size"]),
            "samples/s": f"{r['samples_per_s']:,.0f}",
            "effective samples/s": f"{r['effective_samples_per_s']:,.0f}",
            "staleness mean / p95": f"{r['staleness_mean']:.1f} / {r['staleness_p95']:.0f}",
            "wall (s)": f"{r['wall_time_s']:.1f}",
            "lost work (s)": f"{r['lost_work_s']:.1f}",
            "restarts": int(r["restarts"]),
        })
    return rows
