"""scalebench report: one self-contained page of an experiment, or the seeds' claims table.

    scalebench report results/<name>                 -> results/<name>/report.html (plots embedded)
    scalebench report results/<name> --format md     -> results/<name>/report.md
    scalebench report --claims [--readme README.md]  -> the claims | simulated | difference table
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="?", help="a results directory written by `scalebench run`")
    parser.add_argument("--format", choices=("html", "md"), default="html",
                        help="html (default: one self-contained page, plots embedded) or md (markdown)")
    parser.add_argument("--out", help="output file (default: report.html / report.md in the results directory)")
    parser.add_argument("--claims", action="store_true", help="print the seeds' claims table from the results root")
    parser.add_argument("--results-root", default="results", help="with --claims: where the experiments' results are")
    parser.add_argument("--readme", help="with --claims: rewrite the table between the markers in this file")


def run(args: argparse.Namespace) -> int:
    from sim.errors import ConfigError

    if args.claims:
        from pathlib import Path

        from experiments.claims import claims_markdown, update_readme

        if not Path(args.results_root).is_dir():
            raise ConfigError("--results-root", args.results_root, "a directory of experiments' results (scalebench run "
                              "writes results/<name>/)")
        if args.readme:
            from sim.fileio import check_writable

            check_writable("--readme", args.readme)
        table = claims_markdown(args.results_root)
        if args.readme:
            update_readme(args.readme, table)
            print(f"claims table rewritten in {args.readme}")
        else:
            print(table, end="")
        return 0
    if not args.results:
        raise ConfigError("results", None, "a results directory (results/<name>), or --claims")
    from pathlib import Path

    from experiments.report import render_html, render_markdown
    from experiments.store import ResultDir
    from sim.fileio import atomic_write_text, check_writable

    store = ResultDir(args.results)
    store.meta()
    if store.read_csv().empty:
        raise ConfigError(str(store.csv_path), "no rows", "at least one finished point (run the experiment first)")
    out = Path(args.out) if args.out else Path(args.results) / f"report.{args.format}"
    check_writable("--out" if args.out else "results", out)
    text = render_html(args.results) if args.format == "html" else render_markdown(args.results)
    atomic_write_text(out, text)
    print(out)
    return 0
