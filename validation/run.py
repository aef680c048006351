"""measure -> calibrate -> predict -> compare, for every point of a validation config.

Measured rows are kept in ``<out>/measured.json`` (rewritten atomically after each point), so a
run that stops resumes where it stopped and a model change is re-checked without measuring
again (``--remeasure`` measures anew). Predictions are always recomputed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from sim.fileio import atomic_write_json
from validation.config import Point, ValidationConfig
from validation.summary import (
    GROUP_COLUMNS,
    format_table,
    repeatability_text,
    round_spread,
    summarize,
    verdict,
)

NAN = float("nan")
MEASURED_FILE = "measured.json"
NETWORK_FILE = "network_measured.json"
STEPS_FILE = "steps_measured.json"
METRICS = ("compute_time_s", "exposed_comm_time_s", "comm_time_s", "forward_time_s", "backward_time_s",
           "optimizer_time_s")


def _load(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}


def link_gap(point: Point) -> str | None:
    if point.link == "loopback":
        return None
    from real.netem import availability

    ok, why = availability()
    return None if ok else f"shaped link skipped: {why}"


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median iteration time (the lower one of an even count), carrying every
    round's time: a launch that ran during a slow episode of the shared machine (1.5-2.5x, seen
    in CI) is outvoted, not averaged in."""
    ordered = sorted(rows, key=lambda r: r["iteration_time_s"])
    return {**ordered[(len(ordered) - 1) // 2], "round_iteration_times_s": [r["iteration_time_s"] for r in rows]}


def measure_all(cfg: ValidationConfig, *, remeasure: bool, progress=print) -> dict[str, dict[str, Any]]:
    """Measure every point ``cfg.rounds`` times, one round of all points after the other; a point
    that fails is not retried in later rounds."""
    from real.launch import RunFailed
    from real.measure import measure_point
    from sim.errors import ConfigError
    from validation.points import harness_gap, real_spec

    path = cfg.out / MEASURED_FILE
    cache = {} if remeasure else _load(path)
    for point in cfg.points:
        gap = harness_gap(point) or link_gap(point)
        if gap:
            cache[point.id] = {"status": "skipped", "note": gap}
    todo = [p for p in cfg.points if cache.get(p.id, {}).get("status") not in ("skipped", "failed")]
    steps_path = cfg.out / STEPS_FILE
    step_rounds: list[Any] = [] if remeasure else _load(steps_path).get("rounds", [])
    for rnd in range(cfg.rounds):
        if cfg.step_profiles and len(step_rounds) <= rnd and any(_rounds_done(cache.get(p.id, {})) <= rnd for p in todo):
            step_rounds.append(_profile_steps_now(cfg, f" (before round {rnd + 1}/{cfg.rounds})", progress))
            atomic_write_json(steps_path, {"rounds": step_rounds}, strict=False)
        for i, point in enumerate(todo):
            entry = cache.get(point.id, {})
            if entry.get("status") == "failed":
                continue
            done = entry.get("rounds") or ([entry["row"]] if entry.get("status") == "measured" else [])
            if _rounds_done(entry) > rnd:
                continue
            where = f"round {rnd + 1}/{cfg.rounds} " if cfg.rounds > 1 else ""
            progress(f"{where}[{i + 1}/{len(todo)}] measuring {point.id}")
            try:
                row = measure_point(real_spec(point), iterations=cfg.iterations, warmup=cfg.warmup,
                                    timeout_s=cfg.timeout_s, link=None if point.link == "loopback" else point.link,
                                    min_time_s=cfg.min_time_s, max_iterations=cfg.max_iterations)
            except (RunFailed, ConfigError) as err:
                if not done:
                    cache[point.id] = {"status": "failed", "note": str(err).splitlines()[0]}
                    progress(f"  failed: {cache[point.id]['note']}")
                else:
                    progress(f"  round failed, kept the earlier rounds: {str(err).splitlines()[0]}")
            else:
                done = [*done, row]
                cache[point.id] = {"status": "measured", "row": median_row(done), "rounds": done}
            atomic_write_json(path, cache, strict=False)  # a cache read back here: NaN = not measured
    atomic_write_json(path, cache, strict=False)
    return cache


def _rounds_done(entry: dict[str, Any]) -> int:
    if entry.get("status") == "failed":
        return 1 << 30  # never measured again
    return len(entry.get("rounds") or ([entry["row"]] if entry.get("status") == "measured" else []))


def _profile_steps_now(cfg: ValidationConfig, label: str, progress) -> dict[str, dict[str, Any]]:
    """One launch of the calibration's whole-step profile per (model, k), with the calibration's
    settings: {model: {k: entry}} (JSON keys), empty where the launch failed."""
    from real.calibrate import DEFAULT_BATCH, profile_step_round
    from real.launch import RunFailed

    settings = cfg.calibration
    models = list(settings.get("models", ["mlp", "small_cnn", "small_transformer"]))
    try:
        got = profile_step_round(models, {m: DEFAULT_BATCH.get(m, 16) for m in models},
                                 tuple(settings.get("colocated", (1, 2, 4))),
                                 iterations=int(settings.get("iterations", 8)), warmup=2, timeout_s=60,
                                 min_time_s=1.0, max_iterations=200, progress=progress, label=label)
    except RunFailed as err:
        progress(f"  step profile failed, the calibration's steps stand: {str(err).splitlines()[0]}")
        return {}
    return {m: {str(k): e for k, e in by_k.items()} for m, by_k in got.items()}


def with_round_steps(cal, step_rounds: list[dict[str, dict[str, Any]]]):
    """``cal`` with each calibrated (model, k) step replaced by the median (``median_round``) of
    the launches taken before the measurement rounds; the calibration's own value is kept beside
    it (``calibration_total_s``). Without such launches, ``cal`` itself."""
    import copy
    from dataclasses import replace

    from real.calibrate import median_round

    if not any(step_rounds):
        return cal
    device = copy.deepcopy(cal.device)
    for model, by_batch in (device.get("workloads") or {}).items():
        for entry in by_batch.values():
            steps = entry.get("steps") or {}
            for k in list(steps):
                launches = [r[model][str(k)] for r in step_rounds if str(k) in r.get(model, {})]
                if launches:
                    steps[k] = {**median_round(launches, "total_s"), "calibration_total_s": steps[k]["total_s"]}
    return replace(cal, device=device)


def compare(cfg: ValidationConfig, measured: dict[str, dict[str, Any]], cal, catalog) -> list[dict[str, Any]]:
    from sim.errors import ConfigError
    from validation.points import predict
    from validation.summary import relative_error

    rows = []
    for point in cfg.points:
        entry = measured.get(point.id, {"status": "not measured", "note": ""})
        row: dict[str, Any] = {**point.columns(), "status": entry["status"], "note": entry.get("note", "")}
        real = entry.get("row") or {}
        row["measured_s"] = real.get("iteration_time_s", NAN)
        row["measured_iqr_s"] = real.get("iteration_time_iqr_s", NAN)
        launches = real.get("round_iteration_times_s") or []
        row["measured_rounds"] = len(launches) or (1 if real else 0)
        row["round_spread"] = round_spread(launches)
        try:
            sim = predict(point, cal, catalog)
            row["predicted_s"] = sim["iteration_time_s"]
            row["catalog_link"] = sim["intra_link"]
        except ConfigError as err:
            sim = {}
            row["predicted_s"] = NAN
            row["note"] = (row["note"] + "; " if row["note"] else "") + f"simulator: {err}"
        row["rel_error"] = relative_error(row["predicted_s"], row["measured_s"])
        for key in METRICS:
            row[f"measured_{key}"] = real.get(key, NAN)
            row[f"predicted_{key}"] = sim.get(key, NAN)
        rows.append(row)
    return rows


def network_all(cfg: ValidationConfig, cal, *, remeasure: bool, progress=print) -> list[dict[str, Any]]:
    """Held-out collective sizes: measured (cached) and predicted by the calibrated cost layer."""
    if not cfg.network:
        return []
    from validation.calib import network_rows

    path = cfg.out / NETWORK_FILE
    cached = None if remeasure else _load(path).get("rows")
    if cached is None:
        rows = network_rows(cal, cfg.network, timeout_s=cfg.timeout_s, progress=progress)
        atomic_write_json(path, {"rows": rows}, strict=False)
        return rows
    from validation.calib import calibrated_catalog, held_out_row

    catalog = calibrated_catalog(cal)
    return [held_out_row(cal, catalog, r) for r in cached]  # predictions follow the current model


def run_validation(cfg: ValidationConfig, *, recalibrate: bool = False, remeasure: bool = False,
                   progress=print) -> tuple[int, str]:
    """Run everything; return (exit status, the text summary). 0: within the thresholds."""
    from validation.calib import calibrated_catalog, ensure_calibration
    from validation.report import write_outputs

    cal_dir = Path(str(cfg.calibration.get("dir", cfg.out / "calibration")))
    cal = ensure_calibration(cal_dir, cfg.calibration, recalibrate=recalibrate, progress=progress)
    catalog = calibrated_catalog(cal)
    measured = measure_all(cfg, remeasure=remeasure, progress=progress)
    step_rounds = _load(cfg.out / STEPS_FILE).get("rounds", []) if cfg.step_profiles else []
    rows = compare(cfg, measured, with_round_steps(cal, step_rounds), catalog)
    network = network_all(cfg, cal, remeasure=remeasure, progress=progress)
    stats = summarize(rows, GROUP_COLUMNS)
    overall = stats[0]
    result = verdict(overall, mape_percent=cfg.mape_percent, worst_percent=cfg.worst_percent, min_points=cfg.min_points)
    net_stats = summarize(network, ("collective", "link", "ranks"))
    skipped = [r for r in rows if r["status"] != "measured"]
    text = (f"# Validation: {cfg.name}\n\nConfig: {cfg.path}; calibration: {cal.path} "
            f"(compute from per-layer profiles, network from collective microbenchmarks; no point's own "
            f"measurement is used to predict it)"
            + (f"; the whole compute-only steps from the median of {len(step_rounds)} launches, one before each "
               f"measurement round ({STEPS_FILE})" if any(step_rounds) else "")
            + ".\n\n## Iteration time, simulated vs measured\n\n"
            + format_table(stats)
            + f"\nThresholds: MAPE <= {cfg.mape_percent:g}%"
            + (f", worst <= {cfg.worst_percent:g}%" if cfg.worst_percent else "")
            + f", at least {cfg.min_points} points. Verdict: "
            + ("PASS" if result.passed else "FAIL (" + "; ".join(result.reasons) + ")") + "\n")
    spread_text = repeatability_text(rows)
    if spread_text:
        text += "\n" + spread_text
    if skipped:
        text += "\nNot compared:\n" + "".join(f"- {r['point']}: {r['status']} ({r['note']})\n" for r in skipped)
    net_text = ""
    if network:
        net_text = ("\n## Network model alone (held-out microbenchmark sizes)\n\n" + format_table(net_stats))
    write_outputs(cfg.out, rows, [s.as_row() for s in stats], text, network, net_text, cfg.name)
    if network:
        from real.results import write_rows

        write_rows(cfg.out / "network_summary.csv", [s.as_row() for s in net_stats])
    status = 0 if result.passed else 1
    if math.isnan(overall.mape_percent):
        status = 1
    return status, text + net_text
