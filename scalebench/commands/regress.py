"""scalebench regress: compare scaling efficiency and iteration time with the committed baselines.

The baselines are package data (``experiments/baselines/``, installed with the package), so the
check gives the same answer from any working directory. Exit status 0 when every point is within
tolerance, 1 when any moved (or has no baseline). ``--update`` rewrites the baselines on purpose:
the package's own in a source checkout (review the diff of experiments/baselines/ before
committing), or those of ``--baselines DIR``; an installed (non-editable) package's are refused.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite", help="suite YAML (default: the built-in experiments/regress.yaml)")
    parser.add_argument("--baselines", metavar="DIR",
                        help="baseline CSVs, one per scenario (default: the package's, experiments/baselines/)")
    parser.add_argument("--update", action="store_true", help="rewrite the baselines from this run")


def run(args: argparse.Namespace) -> int:
    from importlib import resources

    from experiments.regress import format_checks, run_suite

    suite = args.suite or resources.files("experiments").joinpath("regress.yaml")
    baselines = Path(args.baselines) if args.baselines else package_baselines(update=args.update)
    args.baselines = baselines
    if args.update:  # before simulating: a directory that cannot be written would lose the run
        from sim.fileio import check_writable

        check_writable("--baselines", str(baselines), directory=True)
    checks = run_suite(suite, baselines, update=args.update)
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


def package_baselines(*, update: bool) -> Path:
    """experiments/baselines/ of the installed package. Rewriting it (``update``) is allowed only
    in a source checkout (an editable install: pyproject.toml beside the package), never inside
    site-packages."""
    import experiments
    from sim.errors import ConfigError

    package = Path(experiments.__file__).resolve().parent
    if update and not (package.parent / "pyproject.toml").is_file():
        raise ConfigError("--update", str(package / "baselines"), "a source checkout's baselines (this package is "
                          "installed, not editable: pass --baselines DIR to write baselines elsewhere)")
    return package / "baselines"
