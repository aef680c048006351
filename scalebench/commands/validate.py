"""scalebench validate: measure a declared sweep on the real harness, predict it with the
calibrated simulator, compare.

Exit status: 0 PASS (the judged points are within the config's thresholds), 1 FAIL (a model
error: the judged points miss the thresholds, or a point is predicted slower than any of its
launches by more than the threshold, which no noise explains), 3 INCONCLUSIVE (the machine was
too busy or the launches too spread to judge the model: the reason is printed; run it again when
the machine is quiet), 2 bad input (an incomplete record with --replay among it). docs/validation.md."""

from __future__ import annotations

import argparse
from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parents[2] / "experiments"
FULL_CONFIG = CONFIG_DIR / "validation.yaml"
QUICK_CONFIG = CONFIG_DIR / "validation_quick.yaml"


SUITES = ("harness", "devset", "simgrid", "extrapolate")
FORMATS = ("table", "json", "csv")


def _progress(message: str) -> None:
    """A suite's progress line, on stderr through logging (hidden with -q)."""
    from scalebench import log

    log.get("validate").info(message)


def _emit(doc: dict, rows: list[dict], fmt: str) -> None:
    """--format json: ``doc`` as one strict JSON object; csv: ``rows`` (one per point)."""
    import sys

    from sim.fileio import format_rows, json_text

    sys.stdout.write(json_text(doc) + "\n" if fmt == "json" else format_rows(rows, "csv") if rows else "")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite", choices=SUITES, default="harness",
                        help="harness: measure and predict on this machine (default); simgrid: the flow network "
                             "against SimGrid on the same fat trees; devset: predict the public "
                             "real-cluster measurements in validation/devset/ (seconds, no torch); extrapolate: "
                             "calibrate on each devset series' runs up to two nodes, predict the rest, beside Ernest "
                             "and the zero-shot model (exit 1 where Ernest does better)")
    parser.add_argument("--all", action="store_true",
                        help="with --suite simgrid: the all-at-once all-to-all on the 256-host fabrics too (minutes)")
    parser.add_argument("--data", help="with --suite devset or extrapolate: a directory of the development set's CSV files "
                                       "(default: the copy shipped in validation/devset/)")
    parser.add_argument("--strict", action="store_true",
                        help="with --suite devset or extrapolate: also fail on the groups listed as known gaps")
    parser.add_argument("--tolerate", action="append", metavar="GROUP",
                        help="with --suite devset: tolerate this known gap by name (repeatable; CI names each one); "
                             "with any --tolerate, a group worse than its floor and not named fails the run "
                             "(default: every known gap of validation.devset_report.KNOWN_GAPS is tolerated)")
    parser.add_argument("--explain", action="store_true",
                        help="with --suite devset: every row that is a training iteration, term by term beside its "
                             "measurement (scalebench explain's breakdown), and the residuals by GPU count, link kind "
                             "and framework")
    parser.add_argument("--quick", action="store_true",
                        help=f"the CI subset ({QUICK_CONFIG.name}: loopback, a few points, minutes)")
    parser.add_argument("--config", help=f"validation config (default: {FULL_CONFIG.name}, or the quick one)")
    parser.add_argument("--out", help="output directory (default: the config's out)")
    parser.add_argument("--recalibrate", action="store_true", help="run the calibration again even if it exists")
    parser.add_argument("--remeasure", action="store_true",
                        help="measure every point again (default: reuse <out>/measured.json, predict anew)")
    parser.add_argument("--replay", action="store_true",
                        help="measure nothing: predict the complete record in <out> anew (exit 2 if incomplete)")
    parser.add_argument("--format", choices=FORMATS, default="table",
                        help="table (default, for people), json (the verdict, the summary and every point, one "
                             "object) or csv (one row per point: measured, predicted, error) on stdout; progress "
                             "goes to stderr (harness, devset and extrapolate suites)")


def run(args: argparse.Namespace) -> int:
    import sys
    from dataclasses import replace

    from sim.errors import ConfigError

    harness_only = {"--quick": args.quick, "--config": args.config, "--out": args.out,
                    "--recalibrate": args.recalibrate, "--remeasure": args.remeasure, "--replay": args.replay}
    if args.explain and args.suite != "devset":
        raise ConfigError("--explain", True, "--suite devset (scalebench explain explains one scenario)")
    if args.suite in ("devset", "extrapolate"):
        if args.all:
            raise ConfigError("--all", True, "--suite simgrid")
        for flag, value in harness_only.items():
            if value:  # the devset suites measure nothing and write nothing: the flag would be ignored
                raise ConfigError(flag, value, f"--suite harness (the {args.suite} suite compares published "
                                  "measurements and writes no files)")
        if args.suite == "extrapolate":
            return _extrapolate(args)
        return _devset(args)
    if args.suite == "simgrid" and args.format != "table":
        raise ConfigError("--format", args.format, "table with --suite simgrid (json and csv: the harness, devset "
                          "and extrapolate suites)")
    if args.suite == "simgrid":
        for flag, value in {**harness_only, "--data": args.data, "--strict": args.strict,
                            "--tolerate": args.tolerate}.items():
            if value:
                raise ConfigError(flag, value, f"--suite {'harness' if flag in harness_only else 'devset'} (the simgrid "
                                  "suite runs its own fat trees and writes no files)")
        return _simgrid(args)
    if args.all:
        raise ConfigError("--all", True, "--suite simgrid")
    for flag, value in (("--data", args.data), ("--strict", args.strict), ("--tolerate", args.tolerate)):
        if value:
            raise ConfigError(flag, value, "--suite devset (the harness suite measures this machine)")
    from scalebench.commands.common import require_torch

    require_torch()  # the harness suite measures and calibrates with torch

    from validation.config import load_validation_config
    from validation.run import run_validation

    path = Path(args.config) if args.config else (QUICK_CONFIG if args.quick else FULL_CONFIG)
    cfg = load_validation_config(path)
    if args.out:  # everything it writes goes there, the calibration too
        out = Path(args.out)
        cfg = replace(cfg, out=out, calibration={**cfg.calibration, "dir": str(out / "calibration")})
    from sim.fileio import check_writable

    check_writable("--out" if args.out else f"{path}: out", cfg.out, directory=True)  # before measuring
    done = run_validation(cfg, recalibrate=args.recalibrate, remeasure=args.remeasure, replay=args.replay,
                          progress=_progress)
    files = f"results in {done.report_dir}/ (validation.csv, summary.md, validation.png, worst_breakdown.png, network.csv)"
    if args.format != "table":
        _progress(files)
        _emit({"suite": "harness", "verdict": done.verdict, "exit_status": done.exit_status, "reasons": done.reasons,
               "config": str(path), "report_dir": str(done.report_dir), "summary": done.summary, "points": done.points,
               "network": done.network, "network_summary": done.network_summary}, done.points, args.format)
        return done.exit_status
    sys.stdout.write(done.text)
    sys.stdout.write(f"\n{files}\n")
    return done.exit_status


def _simgrid(args: argparse.Namespace) -> int:
    """The flow network against SimGrid on the same fat trees (validation/simgrid_check.py)."""
    import sys

    from validation.simgrid_check import ALL_AT_ONCE_HOSTS, run_suite, simgrid_python

    python = simgrid_python()
    if python is None:
        print("scalebench: validate --suite simgrid: no python3 that imports simgrid (apt-get install python3-simgrid, "
              "or set SCALEBENCH_SIMGRID_PYTHON)", file=sys.stderr)
        return 2
    status, text = run_suite(python, all_at_once_hosts=1 << 30 if args.all else ALL_AT_ONCE_HOSTS, progress=_progress)
    sys.stdout.write(text)
    return status


def _devset(args: argparse.Namespace) -> int:
    import sys

    from sim.errors import ConfigError
    from validation.devset import KNOWN_GAPS, devset_report, failing_groups, run_devset

    tolerate = None
    if args.tolerate is not None:
        if args.strict:
            raise ConfigError("--tolerate", args.tolerate[0], "nothing with --strict (it fails every known gap)")
        for name in args.tolerate:
            if name not in KNOWN_GAPS:
                raise ConfigError("--tolerate", name, "a known gap: " + "; ".join(sorted(KNOWN_GAPS)))
        tolerate = set(args.tolerate)
    predictions, summaries = run_devset(Path(args.data) if args.data else None)
    failing = failing_groups(summaries, args.strict, tolerate)
    if args.format != "table":
        from dataclasses import asdict, fields

        from validation.devset_report import tolerated
        from validation.devset_rows import Prediction

        allowed = tolerated(args.strict, tolerate)
        # the row's scenario and result are objects, not values: --explain's terms stand for them
        plain = [f.name for f in fields(Prediction) if f.name not in ("scenario", "result")]
        rows = [{**{k: getattr(p, k) for k in plain}, "error": p.error(), "naive_error": p.error(p.naive)}
                for p in predictions]
        groups = [{**asdict(g), "status": g.status, "tolerated": g.worse_than_floor and g.group in allowed}
                  for g in summaries]
        doc = {"suite": "devset", "verdict": "FAIL" if failing else "PASS", "exit_status": 1 if failing else 0,
               "failing": failing, "groups": groups, "predictions": rows}
        if args.explain:
            from validation.devset_explain import explained_rows

            doc["explained"] = explained_rows(predictions)
        _emit(doc, rows, args.format)
        return 1 if failing else 0
    sys.stdout.write("The model against public measurements of real GPU clusters (validation/devset/README.md);\n"
                     "errors on the rows the naive floor covers (tc rows with a rate; busbw from 1 MB); efficiency\n"
                     "groups in percentage points, signed median > 0: the model is optimistic:\n\n")
    sys.stdout.write(devset_report(summaries, args.strict, tolerate))
    if args.explain:
        from validation.devset_explain import explain_report

        sys.stdout.write("\n" + explain_report(predictions))
    return 1 if failing else 0


def _extrapolate(args: argparse.Namespace) -> int:
    import sys

    from validation.extrapolate import extrapolate_report, failing_series, run_extrapolate

    results, notes = run_extrapolate(Path(args.data) if args.data else None, progress=_progress)
    if args.format != "table":
        failing = failing_series(results, args.strict)
        rows = [{"series": r.series.name, "calibrated_on": " ".join(map(str, r.calibrated_on)), "gpus": p.gpus,
                 "measured": p.measured, "ours": p.ours, "ernest": p.ernest, "zero_shot": p.zero_shot}
                for r in results for p in r.points]
        series = [{"series": r.series.name, "calibrated_on": list(r.calibrated_on),
                   **{f"median_pp_{w}": r.median_pp(w) for w in ("ours", "ernest", "zero_shot")},
                   "beats_ernest": r.beats_ernest} for r in results]
        _emit({"suite": "extrapolate", "verdict": "FAIL" if failing else "PASS", "exit_status": 1 if failing else 0,
               "failing": failing, "series": series, "notes": list(notes), "points": rows}, rows, args.format)
        return 1 if failing else 0
    sys.stdout.write("Calibrated on each series' runs up to two nodes, the rest predicted: our model, Ernest (NNLS on\n"
                     "the same runs, m = GPUs) and the zero-shot model (validation/extrapolate.py):\n\n")
    sys.stdout.write(extrapolate_report(results, notes, args.strict))
    return 1 if failing_series(results, args.strict) else 0
