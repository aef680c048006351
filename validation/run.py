"""measure -> calibrate -> predict -> compare, for every point of a validation config.

Measured rows are kept in ``<out>/measured.json`` (rewritten atomically after each point), so a
run that stops resumes where it stopped and a model change is re-checked without measuring
again (``--remeasure`` measures anew; validation/record.py: when a record is replayed, resumed or
started anew). Predictions are always recomputed. Each point's launches carry the machine's load;
validation/noise.py decides which points the noise leaves unjudged (re-measured, boundedly) and
whether the verdict is PASS, FAIL or INCONCLUSIVE.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.fileio import atomic_write_json
from validation.config import Point, ValidationConfig
from validation.summary import GROUP_COLUMNS, format_table, repeatability_text, summarize

NAN = float("nan")
MEASURED_FILE = "measured.json"
NETWORK_FILE = "network_measured.json"
STEPS_FILE = "steps_measured.json"


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


def measure_all(cfg: ValidationConfig, *, remeasure: bool, progress=print, extra: bool = True) -> dict[str, dict[str, Any]]:
    """Measure every point ``cfg.rounds`` times, one round of all points after the other (a
    point that fails is not retried in later rounds); then launch the points the machine's noise
    left unjudged (validation/noise.py) again, one more launch per pass, up to
    ``cfg.launch_budget`` launches each. A launch disturbed by other processes is itself
    launched again once (real/load.py). Without ``extra`` (the calibration was disturbed, so the
    verdict cannot be had) neither: the points are measured once per round, for the record."""
    from real.load import LAUNCH_LOG, retry_when_busy
    from validation import record
    from validation.points import harness_gap

    path = cfg.out / MEASURED_FILE
    cache = {} if remeasure else _load(path)
    if remeasure or not record.read(cfg.out):
        cfg.out.mkdir(parents=True, exist_ok=True)
        record.write(cfg.out)
    for point in cfg.points:
        gap = harness_gap(point) or link_gap(point)
        if gap:
            cache[point.id] = {"status": "skipped", "note": gap}
    todo = [p for p in cfg.points if cache.get(p.id, {}).get("status") not in ("skipped", "failed")]
    steps_path = cfg.out / STEPS_FILE
    steps = {} if remeasure else _load(steps_path)
    step_rounds: list[Any] = steps.get("rounds", [])
    step_loads: list[Any] = steps.get("loads", [[] for _ in step_rounds])
    with retry_when_busy(cfg.busy_percent / 100, progress) if extra else nullcontext():
        for rnd in range(cfg.rounds):
            if cfg.step_profiles and len(step_rounds) <= rnd and any(_rounds_done(cache.get(p.id, {})) <= rnd
                                                                     for p in todo):
                first = len(LAUNCH_LOG)
                step_rounds.append(_profile_steps_now(cfg, f" (before round {rnd + 1}/{cfg.rounds})", progress))
                step_loads.append(LAUNCH_LOG[first:])
                atomic_write_json(steps_path, {"rounds": step_rounds, "loads": step_loads}, strict=False)
            for i, point in enumerate(todo):
                if _rounds_done(cache.get(point.id, {})) > rnd:
                    continue
                where = f"round {rnd + 1}/{cfg.rounds} " if cfg.rounds > 1 else ""
                progress(f"{where}[{i + 1}/{len(todo)}] measuring {point.id}")
                _measure_once(cfg, point, cache, progress)
                atomic_write_json(path, cache, strict=False)
        for launch in range(cfg.rounds + 1, cfg.launch_budget + 1 if extra else 0):
            noisy = [(p, why) for p in todo if (why := unjudged(cfg, cache.get(p.id, {})))
                     and _rounds_done(cache[p.id]) < launch]
            for i, (point, why) in enumerate(noisy):
                progress(f"re-measuring [{i + 1}/{len(noisy)}] {point.id}, launch {launch} of at most "
                         f"{cfg.launch_budget} ({why})")
                _measure_once(cfg, point, cache, progress)
                atomic_write_json(path, cache, strict=False)
    atomic_write_json(path, cache, strict=False)
    return cache


def _measure_once(cfg: ValidationConfig, point: Point, cache: dict[str, dict[str, Any]], progress) -> None:
    """One more launch of ``point`` into ``cache``: its rounds, and the median row of them."""
    from real.launch import RunFailed
    from real.measure import measure_point
    from sim.errors import ConfigError
    from validation.points import real_spec

    entry = cache.get(point.id, {})
    done = entry.get("rounds") or ([entry["row"]] if entry.get("status") == "measured" else [])
    try:
        row = measure_point(real_spec(point), iterations=cfg.iterations, warmup=cfg.warmup,
                            timeout_s=cfg.timeout_s, link=None if point.link == "loopback" else point.link,
                            min_time_s=cfg.min_time_s, max_iterations=cfg.max_iterations)
    except (RunFailed, ConfigError) as err:
        if not done:
            cache[point.id] = {"status": "failed", "note": str(err).splitlines()[0]}
            progress(f"  failed: {cache[point.id]['note']}")
        else:
            progress(f"  launch failed, kept the earlier ones: {str(err).splitlines()[0]}")
        return
    done = [*done, row]
    cache[point.id] = {"status": "measured", "row": median_row(done), "rounds": done}


def launches_of(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """A measured point's launches (rows), oldest first."""
    return entry.get("rounds") or ([entry["row"]] if entry.get("row") else [])


def judgement(cfg: ValidationConfig, entry: dict[str, Any]):
    from validation.noise import Launch, judge_point

    return judge_point([Launch.from_row(r) for r in launches_of(entry)], rounds=cfg.rounds,
                       busy_percent=cfg.busy_percent, spread_percent=cfg.max_spread_percent)


def unjudged(cfg: ValidationConfig, entry: dict[str, Any]) -> str:
    """Why a measured point cannot be judged yet ("" when it can, or is not measured)."""
    if entry.get("status") != "measured":
        return ""
    return judgement(cfg, entry).reason


def record_missing(cfg: ValidationConfig) -> list[str]:
    """What a replay of ``cfg.out`` lacks: calibration files, points short of ``cfg.rounds``
    launches, step profiles, held-out network sizes (empty: the record is complete)."""
    from validation.calib import calibration_missing

    cal_dir = Path(str(cfg.calibration.get("dir", cfg.out / "calibration")))
    missing = [f"{cal_dir}/{name}" for name in calibration_missing(cal_dir, cfg.calibration)]
    cache = _load(cfg.out / MEASURED_FILE)
    short = [p.id for p in cfg.points if cache.get(p.id, {}).get("status") not in ("skipped", "failed")
             and _rounds_done(cache.get(p.id, {})) < cfg.rounds]
    if short:
        missing.append(f"{len(short)} of {len(cfg.points)} points with fewer than {cfg.rounds} launches "
                       f"(e.g. {short[0]})")
    if cfg.step_profiles and len(_load(cfg.out / STEPS_FILE).get("rounds", [])) < cfg.rounds:
        missing.append(f"the step profiles of {cfg.rounds} rounds ({STEPS_FILE})")
    if cfg.network and not (cfg.out / NETWORK_FILE).exists():
        missing.append(f"the held-out network sizes ({NETWORK_FILE})")
    return missing


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
    from real.calibrated_links import calibrated_catalog
    from validation.calib import held_out_row

    catalog = calibrated_catalog(cal)
    return [held_out_row(cal, catalog, r) for r in cached]  # predictions follow the current model


REPLAY_DIR = "replay"
"""Where a replay writes its report, under the record's directory: the record it predicts (a
committed one, results/validation/) stays as measured, and the directory is never committed."""


@dataclass(frozen=True)
class ValidationRun:
    """What ``run_validation`` found: the exit status and its verdict, the text summary, the
    directory the report went to, and the rows behind them (for ``--format json|csv``)."""

    exit_status: int
    text: str
    report_dir: Path
    verdict: str
    reasons: tuple[str, ...]
    points: list[dict[str, Any]]
    summary: list[dict[str, Any]]
    network: list[dict[str, Any]]
    network_summary: list[dict[str, Any]]


def run_validation(cfg: ValidationConfig, *, recalibrate: bool = False, remeasure: bool = False,
                   replay: bool = False, progress=print) -> ValidationRun:
    """Run everything; return the exit status, the text summary, the directory of the report:
    0 PASS, 1 FAIL, 3 INCONCLUSIVE (validation/noise.py). What is measured follows the record in
    ``cfg.out`` (validation/record.py): a complete record is replayed, an incomplete one of this
    machine resumed, any other started anew; ``replay`` measures nothing and refuses an
    incomplete record (ConfigError). A run that measured writes its report beside its record in
    ``cfg.out``; a replay (measuring nothing) writes it to ``cfg.out/replay/`` and leaves the
    record's files as they were. Paths in the report are relative (sim.fileio.portable_path)."""
    from real.calibrated_links import calibrated_catalog
    from sim.fileio import portable_path
    from validation import record
    from validation.calib import ensure_calibration
    from validation.compare import compare, load_text
    from validation.noise import calibration_noise, decide
    from validation.report import write_outputs

    cal_dir = Path(str(cfg.calibration.get("dir", cfg.out / "calibration")))
    missing = [] if recalibrate or remeasure else record_missing(cfg)
    mine = record.read(cfg.out)
    note = ""
    if replay and (recalibrate or remeasure or missing):
        from sim.errors import ConfigError

        raise ConfigError("--replay", str(cfg.out), "a complete record to predict anew, measuring nothing (it "
                          "lacks " + ("; ".join(missing) if missing else "nothing, but --recalibrate/--remeasure "
                                      "measure") + "): run validate without --replay to measure")
    if not (recalibrate or remeasure) and not missing:
        note = f"Replayed: the record in {portable_path(cfg.out)} (measured on {record.describe(mine)}) was predicted anew; " \
               "nothing was measured (--recalibrate --remeasure measure this machine).\n\n"
        progress(f"the record in {cfg.out} is complete: predicting it anew, measuring nothing")
    elif not (recalibrate or remeasure) and not (record.same_machine(mine) and record.same_machine(record.read(cal_dir))):
        if (cfg.out / MEASURED_FILE).exists() or (cal_dir / "device.yaml").exists():
            progress(f"the record in {cfg.out} is incomplete ({'; '.join(missing)}) and comes from "
                     f"{record.describe(mine)}, not this machine: calibrating and measuring this machine anew")
        recalibrate = remeasure = True
    measuring = not note
    report_dir = cfg.out if measuring else cfg.out / REPLAY_DIR
    cal = ensure_calibration(cal_dir, cfg.calibration, recalibrate=recalibrate, progress=progress,
                             busy_percent=cfg.busy_percent if measuring else None)
    catalog = calibrated_catalog(cal)
    early = calibration_noise(record.read(cal_dir).get("launches", []), cfg.busy_percent) if measuring else ""
    if early:
        progress(f"the calibration was disturbed ({early}): the verdict will be INCONCLUSIVE whatever the points "
                 "measure; measuring them once per round for the record, without relaunching or re-measuring")
    measured = (measure_all(cfg, remeasure=remeasure, progress=progress, extra=not early) if measuring
                else _load(cfg.out / MEASURED_FILE))
    steps = _load(cfg.out / STEPS_FILE) if cfg.step_profiles else {}
    step_rounds = steps.get("rounds", [])
    rows = compare(cfg, measured, with_round_steps(cal, step_rounds), catalog, judgement)
    network = network_all(cfg, cal, remeasure=remeasure, progress=progress)
    stats = summarize(rows, GROUP_COLUMNS)
    cal_launches = record.read(cal_dir).get("launches", []) + [x for loads in steps.get("loads", []) for x in loads]
    cal_noise = calibration_noise(cal_launches, cfg.busy_percent)
    decision = decide(rows, mape_percent=cfg.mape_percent, worst_percent=cfg.worst_percent,
                      min_points=cfg.min_points, calibration_noise=cal_noise)
    net_stats = summarize(network, ("collective", "link", "ranks"))
    skipped = [r for r in rows if r["status"] != "measured"]
    text = (f"# Validation: {cfg.name}\n\n{note}Config: {portable_path(cfg.path)}; calibration: {portable_path(cal.path)} "
            f"(compute from per-layer profiles, network from collective microbenchmarks; no point's own "
            f"measurement is used to predict it)"
            + (f"; the whole compute-only steps from the median of {len(step_rounds)} launches, one before each "
               f"measurement round ({STEPS_FILE})" if any(step_rounds) else "")
            + ".\n\n## Iteration time, simulated vs measured\n\n"
            + format_table(stats)
            + f"\nThresholds: MAPE <= {cfg.mape_percent:g}%"
            + (f", worst <= {cfg.worst_percent:g}%" if cfg.worst_percent else "")
            + f", at least {cfg.min_points} judged points. Verdict: {decision.status}"
            + (" (" + "; ".join(decision.reasons) + ")" if decision.reasons else "") + "\n")
    text += "\n" + load_text(rows, cal_launches, cfg, decision)
    spread_text = repeatability_text(rows)
    if spread_text:
        text += "\n" + spread_text
    if skipped:
        text += "\nNot compared:\n" + "".join(f"- {r['point']}: {r['status']} ({r['note']})\n" for r in skipped)
    net_text = ""
    if network:
        net_text = ("\n## Network model alone (held-out microbenchmark sizes)\n\n" + format_table(net_stats))
    write_outputs(report_dir, rows, [s.as_row() for s in stats], text, network, net_text, cfg.name)
    if network:
        from real.results import write_rows

        write_rows(report_dir / "network_summary.csv", [s.as_row() for s in net_stats])
    return ValidationRun(decision.exit_status, text + net_text, report_dir, decision.status, tuple(decision.reasons),
                         rows, [s.as_row() for s in stats], network, [s.as_row() for s in net_stats])
