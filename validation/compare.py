"""One row per point: measured (as the noise judgement takes it) against predicted; and the
paragraph on the machine's load and the measurement's own repeatability."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from validation.config import ValidationConfig
from validation.summary import round_spread

NAN = float("nan")
METRICS = ("compute_time_s", "exposed_comm_time_s", "comm_time_s", "forward_time_s", "backward_time_s",
           "optimizer_time_s")


def compare(cfg: ValidationConfig, measured: dict[str, dict[str, Any]], cal, catalog,
            judge: Callable[[ValidationConfig, dict[str, Any]], Any]) -> list[dict[str, Any]]:
    """Rows with the point's columns, the measured time (the judged window's median, or the
    median of all launches when not judged: validation/noise.py), the prediction, the relative
    error, its noise-proof lower bound, the load, and both breakdowns."""
    from sim.errors import ConfigError
    from validation.noise import error_lower_bound
    from validation.points import predict
    from validation.summary import relative_error

    rows = []
    for point in cfg.points:
        entry = measured.get(point.id, {"status": "not measured", "note": ""})
        row: dict[str, Any] = {**point.columns(), "status": entry["status"], "note": entry.get("note", "")}
        launches = entry.get("rounds") or ([entry["row"]] if entry.get("row") else [])
        j = judge(cfg, entry) if entry.get("status") == "measured" and launches else None
        value = j.value_s if j is not None else NAN
        real = min(launches, key=lambda r: abs(r.get("iteration_time_s", NAN) - value)) if launches and j else {}
        row["measured_s"] = value
        row["measured_iqr_s"] = real.get("iteration_time_iqr_s", NAN)
        row["measured_rounds"] = len(launches)
        row["round_spread"] = round_spread([r.get("iteration_time_s", NAN) for r in launches])
        row["judged"] = bool(j and j.judged)
        row["noise"] = j.reason if j else ""
        row["disturbed_launches"] = j.disturbed if j else 0
        others = [r.get("others_cpu_percent") for r in launches if _num(r.get("others_cpu_percent"))]
        row["max_others_cpu_percent"] = max(others) if others else NAN
        row["max_loadavg_1m"] = max((r["loadavg_1m"] for r in launches if _num(r.get("loadavg_1m"))), default=NAN)
        row["fastest_s"] = j.fastest_s if j else NAN
        try:
            sim = predict(point, cal, catalog)
            row["predicted_s"] = sim["iteration_time_s"]
            row["catalog_link"] = sim["intra_link"]
        except ConfigError as err:
            sim = {}
            row["predicted_s"] = NAN
            row["note"] = (row["note"] + "; " if row["note"] else "") + f"simulator: {err}"
        row["rel_error"] = relative_error(row["predicted_s"], row["measured_s"])
        row["error_lower_bound"] = error_lower_bound(row["predicted_s"], row["fastest_s"])
        for key in METRICS:
            row[f"measured_{key}"] = real.get(key, NAN)
            row[f"predicted_{key}"] = sim.get(key, NAN)
        rows.append(row)
    return rows


def load_text(rows: Sequence[dict[str, Any]], cal_launches: Sequence[dict[str, Any]], cfg: ValidationConfig,
              decision) -> str:
    """What the rest of the machine did while this record was measured, and what was judged."""
    measured = [r for r in rows if r.get("status") == "measured"]
    others = [r["max_others_cpu_percent"] for r in measured if _num(r.get("max_others_cpu_percent"))]
    loads = [r["max_loadavg_1m"] for r in measured if _num(r.get("max_loadavg_1m"))]
    cal_others = [100 * x["others_cpu_fraction"] for x in cal_launches if _num(x.get("others_cpu_fraction"))]
    lines = ["## The machine while it was measured\n"]
    if others:
        lines.append(f"Other processes' share of the CPU during the points' launches: median {statistics.median(others):.0f}%, "
                     f"largest {max(others):.0f}% (a launch above {cfg.busy_percent:g}% is disturbed and launched "
                     f"again once; a point needs {cfg.rounds} undisturbed launches agreeing within "
                     f"{cfg.max_spread_percent:g}%, re-measured up to {cfg.launch_budget} launches)"
                     + (f"; load average (1 min) up to {max(loads):.1f}" if loads else "") + ".")
    else:
        lines.append("The load was not recorded for these measurements (a record older than the load sampling): "
                     "the points are judged by their repeatability alone.")
    if cal_others:
        lines.append(f"Calibration: {len(cal_others)} launches, other processes' share median "
                     f"{statistics.median(cal_others):.0f}%, largest {max(cal_others):.0f}%.")
    lines.append(f"Judged: {decision.judged} of {decision.compared} compared points; not judged:"
                 + ("".join(f"\n- {r['point']}: {r['noise']}" for r in measured if not r.get("judged") and r.get("noise"))
                    or " none") + "\n")
    return "\n".join(lines) + "\n"


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)
