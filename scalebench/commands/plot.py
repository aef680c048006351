"""scalebench plot: draw an experiment's plots (PNG and SVG) into results/<name>/plots/."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", help="a results directory written by `scalebench run` (results/<name>)")
    parser.add_argument("--timeline-point", metavar="POINT_ID",
                        help="the point whose iteration timeline to draw (default: the least efficient at the largest size)")


def run(args: argparse.Namespace) -> int:
    from experiments.plots import plot_results
    from experiments.store import ResultDir
    from sim.errors import ConfigError
    from sim.fileio import check_writable

    store = ResultDir(args.results)
    store.meta()
    if store.read_csv().empty:
        raise ConfigError(str(store.csv_path), "no rows", "at least one finished point (run the experiment first)")
    if args.timeline_point and args.timeline_point not in store.finished_ids():
        raise ConfigError("--timeline-point", args.timeline_point, f"a point id of {store.path}/points/")
    check_writable("results", store.plots_dir, directory=True)
    written = plot_results(args.results, timeline_point=args.timeline_point)
    for path in written:
        print(path)
    return 0
