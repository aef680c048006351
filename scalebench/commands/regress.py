"""scalebench regress: compare scaling efficiency and iteration time with the committed baselines.

Exit status 0 when every point is within tolerance, 1 when any moved (or has no baseline).
``--update`` rewrites the baselines on purpose (review the diff of results/baselines/ before committing).
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite", help="suite YAML (default: the built-in experiments/regress.yaml)")
    parser.add_argument("--baselines", default="results/baselines", metavar="DIR", help="baseline CSVs, one per scenario")
    parser.add_argument("--update", action="store_true", help="rewrite the baselines from this run")
    parser.add_argument("--quiet", action="store_true", help="print only the points that are not OK")


def run(args: argparse.Namespace) -> int:
    from importlib import resources

    from experiments.regress import format_checks, run_suite

    suite = args.suite or resources.files("experiments").joinpath("regress.yaml")
    if args.update:  # before simulating: a directory that cannot be written would lose the run
        from sim.fileio import check_writable

        check_writable("--baselines", args.baselines, directory=True)
    checks = run_suite(suite, args.baselines, update=args.update)
    shown = [c for c in checks if c.failed] if args.quiet else checks
    if shown:
        print(format_checks(shown))
    failed = [c for c in checks if c.failed]
    counts = {s: sum(c.status == s for c in checks) for s in ("OK", "FAIL", "NEW", "GONE")}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    if args.update:
        print(f"scalebench regress: baselines rewritten in {args.baselines} ({len(checks)} points)")
        return 0
    if failed:
        print(f"scalebench regress: FAILED ({summary}); if the change is intended, run "
              f"`scalebench regress --update` and commit {args.baselines}/")
        return 1
    print(f"scalebench regress: passed ({summary})")
    return 0
