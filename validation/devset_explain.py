"""``scalebench validate --suite devset --explain``: the predicted iteration of every devset row that
is a training iteration, term by term (sim/explain.py), beside its measurement, and the residuals
grouped by GPU count, link kind and framework: where the model is short, and by how much.

Generic over the rows: any ``validation.devset_rows.Prediction`` that carries its scenario, result and
measured iteration time is explained; a file added to the development set only has to fill them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from sim.explain import CATEGORIES, explain
from validation.devset_rows import Prediction

GROUPINGS: dict[str, Callable[[Any], str]] = {
    "GPUs": lambda s: str(s.cluster.world_size),
    "link kind": lambda s: s.cluster.inter_link.kind if s.cluster.nodes > 1 else s.cluster.intra_link.kind,
    "framework": lambda s: s.strategy.framework or "plain",
}
"""How the residuals are grouped: each a function of the row's scenario."""

SHORT = {"compute": "compute", "compute slowed by overlap": "overlap", "exposed communication": "exposed",
         "coordination": "coord.", "waiting for stragglers": "stragglers", "pipeline bubble": "bubble",
         "waiting for input": "input"}


def explained_rows(preds: list[Prediction]) -> list[dict[str, Any]]:
    """One row per explainable prediction: measured, predicted, each category's seconds, residual."""
    rows = []
    for p in preds:
        if p.scenario is None or p.result is None or p.measured_iteration_s is None:
            continue
        e = explain(p.result, p.measured_iteration_s)
        rows.append({"group": p.group, "case": p.case, "measured_s": e.measured_s, "predicted_s": e.predicted_s,
                     **{c: e.totals()[c] for c in CATEGORIES}, "residual_s": e.residual_s,
                     "residual_percent": e.residual_percent,
                     **{name: key(p.scenario) for name, key in GROUPINGS.items()}})
    return rows


def explain_report(preds: list[Prediction]) -> str:
    rows = explained_rows(preds)
    if not rows:
        return "no development-set row carries a scenario to explain\n"
    head = ["group", "case", "measured", "predicted", *(SHORT[c] for c in CATEGORIES), "residual", "residual %"]
    lines = ["Where each predicted iteration goes (ms), beside the measured one; residual = measured - predicted:", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["group"], r["case"], *(f"{1e3 * r[k]:.1f}" for k in ("measured_s", "predicted_s", *CATEGORIES)),
                 f"{1e3 * r['residual_s']:+.1f}", f"{r['residual_percent']:+.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    for name in GROUPINGS:
        lines += ["", f"Residuals by {name} (median over rows; + = measured slower than predicted):", "",
                  f"| {name} | rows | residual ms | residual % of measured | worst % |", "|---|---|---|---|---|"]
        for value in sorted({r[name] for r in rows}, key=_sort_key):
            members = [r for r in rows if r[name] == value]
            pct = [r["residual_percent"] for r in members]
            lines.append(f"| {value} | {len(members)} | {1e3 * statistics.median(r['residual_s'] for r in members):+.1f} | "
                         f"{statistics.median(pct):+.1f} | {max(pct, key=abs):+.1f} |")
    return "\n".join(lines) + "\n"


def _sort_key(value: str):
    return (0, int(value), "") if value.isdigit() else (1, 0, value)
