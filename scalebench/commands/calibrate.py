"""scalebench calibrate: measure this machine (per-layer compute, co-location, collectives) and
write a calibration directory the simulator loads (catalog.yaml works with --catalog)."""

from __future__ import annotations

import argparse

from scalebench.commands.common import write_out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="results/calibration", help="calibration directory to write")
    parser.add_argument("--models", nargs="+", help="CPU-sized workloads (default: mlp small_cnn small_transformer)")
    parser.add_argument("--colocated", type=int, nargs="+", default=[1, 2, 4], help="co-located rank counts to profile")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2], help="world sizes of the collective benchmarks")
    parser.add_argument("--links", nargs="+", default=["loopback"],
                        help="link settings: loopback (unshaped) and/or 100mbit, 1gbit, 10gbit (needs root and tc)")
    parser.add_argument("--max-bytes", type=int, default=64 * 2**20)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank, the same for every k")
    parser.add_argument("--step-rounds", type=int, default=3,
                        help="separate launches of the whole-step profile per (model, k); the median one is kept")


def run(args: argparse.Namespace) -> int:
    import sys

    from real.calibrate import calibrate
    from real.launch import RunFailed
    from sim.errors import ConfigError, require_positive

    for k in [*args.colocated, *args.ranks, args.threads]:
        require_positive("--colocated/--ranks", k, integer=True)
    require_positive("--step-rounds", args.step_rounds, integer=True)
    if any(n < 2 for n in args.ranks):
        raise ConfigError("--ranks", args.ranks, "world sizes of at least 2")
    if args.models:
        from real.config import _check_model

        for m in args.models:
            _check_model(m)
    links = tuple(None if link == "loopback" else link for link in args.links)
    if any(links):
        from real.netem import check_link

        for link in links:
            if link:
                check_link(link)
    try:
        summary = calibrate(args.out, models=args.models, colocated=tuple(args.colocated), comm_ranks=tuple(args.ranks),
                            links=links, max_bytes=args.max_bytes, iterations=args.iterations, timeout_s=args.timeout,
                            threads=args.threads, step_rounds=args.step_rounds,
                            progress=lambda msg: print(f"calibrate: {msg}", file=sys.stderr))
    except RunFailed as err:
        print(f"scalebench calibrate: run failed: {err}", file=sys.stderr)
        return 1
    slow = ", ".join(f"{k}: {v:.2f}x" for k, v in summary["slowdown"].items())
    links_text = "; ".join(f"{n} {v['bandwidth_GBps']:.3f} GB/s, {v['software_latency_us']:.0f} us/step"
                           for n, v in summary["links"].items())
    write_out(f"calibration written to {summary['dir']}/ (catalog.yaml, device.yaml, links.yaml, comm.csv)\n"
              f"  co-location slowdown per rank: {slow}\n  links: {links_text}\n"
              f"  use: scalebench simulate --catalog {summary['dir']}/catalog.yaml --gpu cpu_local "
              "--intra-link gloo_loopback ...\n")
    return 0
