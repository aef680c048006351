"""Regenerate every shipped experiment: run, plot, report, and the README's claims table.

    python -m experiments.ship [--force] [--readme README.md] [--results results]

Run it from the repository root after the model or the catalog changes, and commit
results/<name>/ and README.md together.
"""

from __future__ import annotations

import argparse
from importlib import resources
from pathlib import Path

SHIPPED = ("quickstart", "tcp_vs_infiniband", "chainermn_128", "ps_vs_allreduce", "inception_sync", "compression",
           "model_vs_data_parallel", "sync_vs_async")


def main(argv: list[str] | None = None) -> int:
    from experiments.claims import claims_markdown, update_readme
    from experiments.config import load_experiment
    from experiments.plots import plot_results
    from experiments.report import render_markdown
    from experiments.runner import run_experiment
    from sim.fileio import atomic_write_text

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="recompute every point")
    parser.add_argument("--results", default="results")
    parser.add_argument("--readme", default="README.md")
    parser.add_argument("--jobs", type=int, default=None)
    args = parser.parse_args(argv)
    for name in SHIPPED:
        experiment = load_experiment(resources.files("experiments").joinpath(f"{name}.yaml"))
        out = Path(args.results) / experiment.name
        summary = run_experiment(experiment, out, jobs=args.jobs, force=args.force, progress=False)
        plot_results(out)
        atomic_write_text(out / "report.md", render_markdown(out))
        print(f"{name}: {summary.rows} rows, plots and report.md in {out}")
    update_readme(args.readme, claims_markdown(args.results))
    print(f"claims table rewritten in {args.readme}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
