"""Benchmark: a 1,000-point simulated sweep, end to end (expand, run in workers, persist, CSV).

    python -m experiments.bench_sweep [--jobs 2] [--model resnet50]

Target (issue 6): at most 60 s on a 2-core machine. The sweep is 10 GPU counts (8 to 4,096)
x 5 inter-node links x 4 collectives x 5 bucket sizes of ResNet-50, written to a temporary
directory that is removed afterwards (nothing goes into results/).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from experiments.config import experiment_from_dict
from experiments.runner import run_experiment


def bench_config(model: str) -> dict:
    return {
        "name": "bench_1000",
        "workload": {"model": model, "batch_size": 32},
        "cluster": {"gpus_per_node": 8, "gpu": "v100", "intra_link": "nvlink2"},
        "strategy": {"ps_servers": 8},
        "sweep": {
            "cluster.gpus": {"geometric": {"start": 8, "stop": 4096, "factor": 2}},
            "cluster.inter_link": ["tcp_10gbe", "tcp_25gbe", "roce_100g", "ib_edr", "ib_hdr"],
            "strategy.collective": ["ring", "tree", "hierarchical", "ps"],
            "strategy.bucket_mib": [1, 5, 25, 100, 400],
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--model", default="resnet50")
    args = parser.parse_args(argv)
    experiment = experiment_from_dict(bench_config(args.model))
    with tempfile.TemporaryDirectory(prefix="scalebench-bench-") as tmp:
        start = time.perf_counter()
        summary = run_experiment(experiment, os.path.join(tmp, "bench_1000"), jobs=args.jobs, progress=False,
                                 log=lambda _: None)
        wall = time.perf_counter() - start
    print(f"{summary.rows} points of {args.model} simulated, persisted and tabulated in {wall:.1f} s "
          f"with {args.jobs} worker processes on a machine with {os.cpu_count()} cores "
          f"({1e3 * wall / max(1, summary.rows):.1f} ms per point; target <= 60 s)")
    return 0 if summary.rows == 1000 else 1


if __name__ == "__main__":
    raise SystemExit(main())
