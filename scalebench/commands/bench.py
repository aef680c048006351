"""scalebench bench: how fast the simulator itself is, at 64 to 16,384 GPUs.

Each point runs in a fresh child process (``python -m scalebench.commands.bench --one ...``)
so its wall time and peak memory (ru_maxrss) are its own; the table shows the median of
``--repeats`` runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

DEFAULT_GPUS = (64, 1024, 16384)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--gpus", type=int, nargs="+", default=list(DEFAULT_GPUS))
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--collective", default="ring")
    parser.add_argument("--repeats", type=int, default=5, help="runs per point; the median is shown")
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table")


def _scenario_spec(model: str, gpus: int, per_node: int, collective: str) -> dict:
    return {
        "name": f"bench-{model}-{gpus}",
        "workload": {"model": model},
        "cluster": {"gpus": gpus, "gpus_per_node": per_node, "gpu": "v100", "intra_link": "nvlink2", "inter_link": "ib_edr"},
        "strategy": {"collective": collective},
    }


def measure_one(spec: dict) -> dict:
    """Time simulate() on one scenario in this process (imports excluded), with peak RSS."""
    import resource
    import time

    from sim.config import scenario_from_dict
    from sim.simulate import simulate

    start = time.perf_counter()
    scenario = scenario_from_dict(spec)
    result = simulate(scenario)
    wall = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"wall_s": wall, "events": result.events, "iteration_time_s": result.iteration_time_s,
            "scaling_efficiency": result.scaling_efficiency, "peak_rss_mib": peak_kib / 1024}


def run(args: argparse.Namespace) -> int:
    from sim.errors import ConfigError, require_positive
    from sim.workload import load_workload

    load_workload(args.model, "--model")
    require_positive("--repeats", args.repeats, integer=True)
    rows = []
    for gpus in args.gpus:
        require_positive("--gpus", gpus, integer=True)
        if gpus > args.gpus_per_node and gpus % args.gpus_per_node:
            raise ConfigError("--gpus", gpus, f"a multiple of --gpus-per-node={args.gpus_per_node}")
        spec = _scenario_spec(args.model, gpus, args.gpus_per_node, args.collective)
        runs = []
        for _ in range(args.repeats):
            out = subprocess.run([sys.executable, "-m", "scalebench.commands.bench", json.dumps(spec)],
                                 capture_output=True, text=True, check=True)
            runs.append(json.loads(out.stdout))
        rows.append({
            "gpus": gpus,
            "wall_s_median": statistics.median(r["wall_s"] for r in runs),
            "wall_s_min": min(r["wall_s"] for r in runs),
            "wall_s_max": max(r["wall_s"] for r in runs),
            "events": runs[0]["events"],
            "iteration_time_s": runs[0]["iteration_time_s"],
            "scaling_efficiency": runs[0]["scaling_efficiency"],
            "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
        })
    if args.format == "table":
        print(f"scalebench bench: {args.model}, synchronous data parallel, {args.collective} allreduce, "
              f"{args.gpus_per_node} GPUs/node, v100 + nvlink2 + ib_edr; median of {args.repeats} runs")
        print(f"{'GPUs':>7} {'wall (median)':>14} {'wall min-max':>16} {'events':>8} {'sim. iteration':>15} "
              f"{'efficiency':>11} {'peak RSS':>10}")
        print(f"{'':>7} {'s':>14} {'s':>16} {'':>8} {'ms':>15} {'%':>11} {'MiB':>10}")
        for r in rows:
            print(f"{r['gpus']:>7} {r['wall_s_median']:>14.4f} {r['wall_s_min']:>7.4f}-{r['wall_s_max']:<8.4f} "
                  f"{r['events']:>8} {r['iteration_time_s'] * 1e3:>15.3f} {100 * r['scaling_efficiency']:>11.1f} "
                  f"{r['peak_rss_mib']:>10.1f}")
    else:
        from scalebench.commands.common import format_rows, write_out

        write_out(format_rows(rows, args.format))
    return 0


if __name__ == "__main__":
    print(json.dumps(measure_one(json.loads(sys.argv[1]))))
