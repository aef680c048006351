"""scalebench plot: draw an experiment's plots (PNG and SVG) into results/<name>/plots/, or timelines
written by ``simulate --trace`` and ``real --trace`` one above the other (``--timeline``)."""

from __future__ import annotations

import argparse

OUT_DEFAULT = "timelines.png"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="?", help="a results directory written by `scalebench run` (results/<name>)")
    parser.add_argument("--timeline-point", metavar="POINT_ID",
                        help="the point whose iteration timeline to draw (default: the least efficient at the largest size)")
    parser.add_argument("--timeline", nargs="+", metavar="TRACE.json",
                        help="instead of an experiment: timelines from simulate --trace / real --trace (e.g. SIM.json "
                             "MEASURED.json), drawn one above the other on one time axis")
    parser.add_argument("-o", "--out", metavar="FILE.png", default=OUT_DEFAULT,
                        help="with --timeline: the image to write (and its .svg beside it; default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    from sim.errors import ConfigError

    if args.timeline:
        if args.results or args.timeline_point:
            raise ConfigError("--timeline", " ".join(args.timeline), "timeline files alone (no results directory)")
        from pathlib import Path

        from experiments.plots_timeline import plot_timelines

        out = Path(args.out)
        if out.suffix.lower() not in ("", ".png", ".svg"):
            raise ConfigError("--out", args.out, "a .png or .svg file name (both are written)")
        from sim.fileio import check_writable

        for suffix in (".png", ".svg"):
            check_writable("--out", out.with_suffix(suffix))
        for path in plot_timelines(args.timeline, out.with_suffix("")):
            print(path)
        return 0
    if not args.results:
        raise ConfigError("RESULTS", None, "a results directory (results/<name>) or --timeline TRACE.json ...")
    if args.out != OUT_DEFAULT:
        raise ConfigError("--out", args.out, "only with --timeline (an experiment's plots go to results/<name>/plots/)")
    from experiments.plots import plot_results
    from experiments.store import ResultDir
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
