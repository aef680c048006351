"""Validation statistics: relative error per point, MAPE and worst case per group. Pure.

  relative error e_i = (predicted_i - measured_i) / measured_i   (signed; > 0: the model is slow)
  MAPE = 100 / N x sum |e_i|  (percent);  worst = 100 x max |e_i|  (percent)
  round spread s_i = (max_r t_ir - min_r t_ir) / median_r t_ir over a point's launches r
  (percent in the report): how far the measurement itself moves between launches
Only points with both a measured and a predicted time count; skipped and failed points are
listed separately and never enter the statistics.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

GROUP_COLUMNS = ("strategy", "link", "codec", "ranks", "model")
"""The columns the summary breaks the error down by (besides the overall line)."""


def relative_error(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured; NaN when either is missing or measured <= 0."""
    if predicted is None or measured is None:
        return math.nan
    if math.isnan(predicted) or math.isnan(measured) or measured <= 0:
        return math.nan
    return (predicted - measured) / measured


@dataclass(frozen=True, kw_only=True)
class GroupStats:
    column: str
    """'all' for the overall line, else the grouping column."""
    value: str
    points: int
    mape_percent: float
    worst_percent: float
    worst_point: str
    bias_percent: float
    """Mean signed error: > 0 the simulator predicts too slow, < 0 too fast."""

    def as_row(self) -> dict[str, Any]:
        return {"group": self.column, "value": self.value, "points": self.points,
                "mape_percent": round(self.mape_percent, 2), "worst_percent": round(self.worst_percent, 2),
                "bias_percent": round(self.bias_percent, 2), "worst_point": self.worst_point}


def valid_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows whose relative error is a number."""
    return [r for r in rows if isinstance(r.get("rel_error"), (int, float)) and not math.isnan(r["rel_error"])]


def group_stats(rows: Sequence[dict[str, Any]], column: str = "all", value: str = "all") -> GroupStats:
    ok = valid_rows(rows)
    if not ok:
        return GroupStats(column=column, value=value, points=0, mape_percent=math.nan, worst_percent=math.nan,
                          worst_point="", bias_percent=math.nan)
    errors = [abs(r["rel_error"]) for r in ok]
    worst = max(range(len(ok)), key=lambda i: errors[i])
    return GroupStats(column=column, value=value, points=len(ok), mape_percent=100 * sum(errors) / len(ok),
                      worst_percent=100 * errors[worst], worst_point=str(ok[worst].get("point", "")),
                      bias_percent=100 * sum(r["rel_error"] for r in ok) / len(ok))


def summarize(rows: Sequence[dict[str, Any]], columns: Sequence[str] = GROUP_COLUMNS) -> list[GroupStats]:
    """The overall line, then one line per value of each grouping column (in first-seen order)."""
    out = [group_stats(rows)]
    for column in columns:
        values: list[str] = []
        for r in valid_rows(rows):
            v = str(r.get(column, ""))
            if v not in values:
                values.append(v)
        out.extend(group_stats([r for r in rows if str(r.get(column, "")) == v], column, v) for v in values)
    return out


def worst_points(rows: Sequence[dict[str, Any]], k: int = 5) -> list[dict[str, Any]]:
    """The k rows with the largest |relative error|, largest first."""
    return sorted(valid_rows(rows), key=lambda r: -abs(r["rel_error"]))[:k]


@dataclass(frozen=True, kw_only=True)
class Verdict:
    passed: bool
    reasons: tuple[str, ...]


def verdict(overall: GroupStats, *, mape_percent: float, worst_percent: float | None, min_points: int) -> Verdict:
    """Pass when MAPE <= its threshold, the worst point <= its threshold (if set) and enough points count."""
    reasons = []
    if overall.points < min_points:
        reasons.append(f"only {overall.points} points with a measurement and a prediction (need {min_points})")
    elif overall.mape_percent > mape_percent:
        reasons.append(f"MAPE {overall.mape_percent:.1f}% > threshold {mape_percent:g}%")
    if worst_percent is not None and overall.points and overall.worst_percent > worst_percent:
        reasons.append(f"worst point {overall.worst_point} at {overall.worst_percent:.1f}% > {worst_percent:g}%")
    return Verdict(passed=not reasons, reasons=tuple(reasons))


def round_spread(times_s: Sequence[float]) -> float:
    """(max - min) / median of a point's launches (``measure.rounds``); NaN with fewer than two."""
    ok = [t for t in times_s if isinstance(t, (int, float)) and not math.isnan(t)]
    middle = statistics.median(ok) if len(ok) >= 2 else 0.0
    return (max(ok) - min(ok)) / middle if middle > 0 else math.nan


def repeatability_text(rows: Sequence[dict[str, Any]]) -> str:
    """One paragraph on the measurement's own repeatability (``round_spread`` of each compared
    point): its median, 90th percentile and largest, and the worst point's own; empty where no
    point has two launches."""
    spread = {str(r.get("point", "")): r["round_spread"] for r in valid_rows(rows)
              if isinstance(r.get("round_spread"), (int, float)) and not math.isnan(r["round_spread"])}
    if not spread:
        return ""
    values = sorted(spread.values())
    top = max(spread, key=lambda k: spread[k])
    p90 = values[min(len(values) - 1, math.ceil(0.9 * len(values)) - 1)]
    worst = worst_points(rows, 1)
    own = ""
    if worst and str(worst[0].get("point", "")) in spread:
        own = f"; the worst point's own launches spread {100 * spread[str(worst[0]['point'])]:.1f}%"
    return (f"Repeatability of the measurement: a point's launches spread (max - min) / median by "
            f"{100 * statistics.median(values):.1f}% (median over {len(values)} points), {100 * p90:.1f}% "
            f"(90th percentile), {100 * values[-1]:.1f}% at most ({top}){own}. The median launch is compared; "
            f"an error within a point's own spread is within what the machine repeats.\n")


def format_table(stats: Sequence[GroupStats]) -> str:
    """A Markdown table: group, value, points, MAPE, worst, bias."""
    lines = ["| group | value | points | MAPE (%) | worst (%) | bias (%) | worst point |",
             "|---|---|---:|---:|---:|---:|---|"]
    for s in stats:
        lines.append(f"| {s.column} | {s.value} | {s.points} | {s.mape_percent:.1f} | {s.worst_percent:.1f} | "
                     f"{s.bias_percent:+.1f} | {s.worst_point} |")
    return "\n".join(lines) + "\n"
