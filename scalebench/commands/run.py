"""scalebench run: run an experiment config (a sweep) into results/<name>/, then plot it.

With no CONFIG it runs the built-in default experiment, experiments/quickstart.yaml.
"""

from __future__ import annotations

import argparse

from experiments.runner import EXECUTORS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", help="experiment YAML (default: the built-in quickstart experiment)")
    parser.add_argument("--results", default="results", metavar="DIR", help="results root; output goes to DIR/<name>/")
    parser.add_argument("--jobs", "-j", type=int, default=None, help="parallel workers for simulated points (default: all cores)")
    parser.add_argument("--executor", choices=EXECUTORS, default="process",
                        help="process pool (default), or an existing Dask / Ray cluster if installed")
    parser.add_argument("--address", help="scheduler address for --executor dask|ray (default: start a local one)")
    parser.add_argument("--force", action="store_true", help="recompute points already in the results directory, and "
                        "take over at once the point locks this host cannot check (another host's, or not a lock)")
    parser.add_argument("--no-plot", dest="plot", action="store_false", help="do not draw the plots afterwards")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    parser.add_argument("--dry-run", action="store_true", help="validate and list the points, run nothing")
    parser.add_argument("--catalog", metavar="FILE",
                        help="a catalog or calibration file (scalebench calibrate --out DIR writes DIR/catalog.yaml): its "
                             "entries join the experiment's catalog: section (the experiment's own win) in every point")


def with_catalog_file(experiment, path: str):
    """The experiment with a catalog file's gpus, links and calibration under its ``catalog:``
    section, the experiment's own entries winning: every point's spec (and so its id) carries them."""
    from dataclasses import replace

    from experiments.config import expand
    from sim.catalog import load_catalog_file
    from sim.errors import ConfigError
    from sim.yamlio import read_yaml

    load_catalog_file(path)  # a bad file: one line naming its field, before anything runs
    data = read_yaml(path, what="catalog") or {}
    own = experiment.base.get("catalog") or {}
    if not isinstance(own, dict):
        raise ConfigError("catalog", own, "a mapping with keys gpus, links, calibration")
    merged = {key: {**(data.get(key) or {}), **(own.get(key) or {})} for key in ("gpus", "links") if data.get(key) or own.get(key)}
    if data.get("calibration") or own.get("calibration"):
        merged["calibration"] = own.get("calibration") or data["calibration"]
    updated = replace(experiment, base={**experiment.base, "catalog": merged})
    expand(updated)  # the merged catalog checked with the points
    return updated


MAX_JOBS = 1024
"""Worker processes for --jobs: far above any machine's cores, below what exhausts process tables."""


def _stragglers(experiment) -> str:
    """The experiment's straggler line (sim.faults.stragglers_line) for its base GPU, naming a swept setting."""
    from sim.catalog import builtin_catalog
    from sim.errors import ConfigError
    from sim.faults import stragglers_line, variability_from_dict

    swept = [a for a in experiment.axes if a.startswith("variability")]
    try:
        cluster = experiment.base.get("cluster") or {}
        gpu = builtin_catalog().extended(experiment.base.get("catalog")).gpu(str(cluster.get("gpu", "v100")), "cluster.gpu")
        line = stragglers_line(variability_from_dict(experiment.base.get("variability")), gpu,
                               off="variability: {stragglers: false} in the config: off")
    except ConfigError:  # a GPU or setting only the sweep names
        line = "stragglers: as each point's variability section says (sim.costs.stragglers)"
    return line + (f" (swept: {', '.join(swept)})" if swept else "")


def default_config_path():
    from importlib import resources

    return resources.files("experiments").joinpath("quickstart.yaml")


def dry_run_text(experiment, out_dir, *, force: bool) -> str:
    """--dry-run: every point the run would compute or reuse (its id, source, repetition and the
    axis values that chose it), then each skipped combination with its reason, then the counts
    the run itself would print; nothing is computed or written."""
    from experiments.runner import axes_text, dry_run

    planned, skipped = dry_run(experiment, out_dir, force=force)
    reps = experiment.repetitions > 1
    lines = [f"{'compute' if not p.done else 'reuse':<8} {p.point_id}  {p.point.source:<4} "
             + (f"rep {p.point.repetition}  " if reps else "") + (axes_text(p.point.axes) or "(no swept axis)")
             for p in planned]
    lines += [f"skip     {axes_text(s.axes)}: {s.reason}" for s in skipped]
    done = sum(p.done for p in planned)
    lines.append(f"{experiment.name}: {len(planned)} points ({done} already done, {len(planned) - done} to run, "
                 f"{len(skipped)} invalid combinations skipped) -> {out_dir}; dry run: nothing computed or written")
    return "\n".join(lines)


def _check_layout(out_dir) -> None:
    """What a run writes inside results/<name>/ must be what it expects there: its points/ and
    plots/ directories and its files (issue 29: a file named points gave '[Errno 17] File exists')."""
    from experiments.store import ResultDir
    from sim.errors import ConfigError

    store = ResultDir(out_dir)
    for path, directory in ((store.points_dir, True), (store.plots_dir, True), (store.csv_path, False),
                            (store.path / "meta.json", False), (store.path / "experiment.yaml", False)):
        if path.exists() and path.is_dir() != directory:
            raise ConfigError("--results", str(path), f"{'a directory' if directory else 'a file'} where `scalebench "
                              f"run` keeps its {path.name} ({path} is {'a directory' if path.is_dir() else 'a file'}: "
                              "move it away, or choose another --results)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from experiments.config import load_experiment
    from experiments.runner import run_experiment
    from experiments.tables import efficiency_table
    from sim.errors import require_positive
    from sim.fileio import check_writable

    if args.jobs is not None:
        require_positive("--jobs", args.jobs, integer=True, maximum=MAX_JOBS, why="worker processes")
    if args.address is not None and args.executor == "process":
        from sim.errors import ConfigError

        raise ConfigError("--address", args.address, "only with --executor dask or ray (the scheduler to connect to; "
                          "the process executor runs workers on this machine)")
    experiment = load_experiment(args.config or default_config_path())
    if args.catalog:
        experiment = with_catalog_file(experiment, args.catalog)
    out_dir = Path(args.results) / experiment.name
    check_writable("--results", out_dir, directory=True)
    _check_layout(out_dir)
    if args.dry_run:
        print(dry_run_text(experiment, out_dir, force=args.force))
        return 0
    from scalebench import log

    summary = run_experiment(experiment, out_dir, jobs=args.jobs, executor=args.executor, address=args.address,
                             force=args.force, progress=args.progress and log.shows_progress())
    others = f", {summary.by_others} computed by another run" if summary.by_others else ""
    print(f"{summary.rows} rows ({summary.computed} computed, {summary.reused} reused{others}) in {summary.wall_s:.1f} s "
          f"-> {summary.out_dir / 'results.csv'}")
    from experiments.store import ResultDir

    store = ResultDir(out_dir)
    if experiment.plan is not None:
        from experiments.plan_points import plan_table

        print(plan_table(store.read_csv(), store.meta()))
    else:
        print(efficiency_table(store.read_csv(), store.meta()))
    print(_stragglers(experiment))
    if args.plot and summary.rows:
        from experiments.plots import plot_results

        written = plot_results(out_dir)
        print(f"{len(written)} plots -> {store.plots_dir}")
    if summary.failed:
        import sys

        print(f"scalebench run: {len(summary.failed)} of {summary.planned} points failed (each with its reason above "
              f"and in {store.path / 'meta.json'}); the others are in results.csv, and the same command tries the "
              "failed ones again", file=sys.stderr)
        return 1
    return 0
