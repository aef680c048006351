"""scalebench calibrate: measure this machine (per-layer compute, co-location, collectives) and
write a calibration directory the simulator loads (catalog.yaml works with --catalog)."""

from __future__ import annotations

import argparse

from scalebench.commands.common import byte_size, write_out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from-nccl-tests", nargs="+", metavar="FILE",
                        help="instead of measuring here: read nccl-tests output (all_reduce_perf ... text, or CSV/JSON "
                             "made of it) from your cluster and write catalog links fitted to it (no torch needed)")
    parser.add_argument("--name", default="nccl_tests", help="with --from-nccl-tests: prefix of the link entries")
    parser.add_argument("--op", help="with --from-nccl-tests: the collective, where the file name does not say it")
    parser.add_argument("--nranks", type=int, help="with --from-nccl-tests: ranks of the run, where the output lacks "
                                                   "its '# Rank ... device' lines")
    parser.add_argument("--intra-link", default="nvlink2",
                        help="with --from-nccl-tests over several hosts: the catalog's link inside a node (default nvlink2)")
    parser.add_argument("--out", default="results/calibration", help="calibration directory to write")
    parser.add_argument("--models", nargs="+", help="CPU-sized workloads (default: mlp small_cnn small_transformer)")
    parser.add_argument("--colocated", type=int, nargs="+", default=[1, 2, 4], help="co-located rank counts to profile")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2], help="world sizes of the collective benchmarks")
    parser.add_argument("--links", nargs="+", default=["loopback"],
                        help="link settings: loopback (unshaped) and/or 100mbit, 1gbit, 10gbit (needs root and tc)")
    parser.add_argument("--max-bytes", type=byte_size, default=64 * 2**20, metavar="SIZE",
                        help="largest collective message, e.g. 256M or 1G (default 64M)")
    parser.add_argument("--iterations", type=int, default=10, metavar="N", help="timed repetitions per measurement (default 10)")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                        help="seconds without progress before a launch is stopped (default 60)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank, the same for every k")
    parser.add_argument("--step-rounds", type=int, default=3,
                        help="separate launches of the whole-step profile per (model, k); the median one is kept")


def run(args: argparse.Namespace) -> int:
    from scalebench.commands.common import require_torch

    require_torch()
    import sys

    if args.from_nccl_tests:
        return _from_nccl_tests(args)

    from real.bench_comm import MAX_COMM_BYTES
    from real.calibrate import calibrate
    from real.launch import RunFailed
    from sim.errors import ConfigError, require_positive
    from sim.fileio import check_writable

    for flag, values in (("--colocated", args.colocated), ("--ranks", args.ranks), ("--threads", [args.threads])):
        for k in values:
            require_positive(flag, k, integer=True)
    require_positive("--step-rounds", args.step_rounds, integer=True)
    require_positive("--max-bytes", args.max_bytes, integer=True, maximum=MAX_COMM_BYTES, why="per rank")
    require_positive("--iterations", args.iterations, integer=True)
    require_positive("--timeout", args.timeout)
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
    check_writable("--out", args.out, directory=True)  # before minutes of measuring
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


def _from_nccl_tests(args: argparse.Namespace) -> int:
    """Parse every file first (a bad one: one line naming file and line, nothing written), fit,
    then write catalog.yaml and nccl_tests.csv atomically into --out."""
    import csv
    import io

    import yaml

    from sim.catalog import builtin_catalog
    from sim.costs.backends.alpha_beta import cost as alpha_beta_cost
    from sim.costs.backends.common import CommOptions
    from sim.errors import ConfigError, require_positive
    from sim.fileio import atomic_write_text, check_writable
    from sim.nccl_tests import link_entries, read_nccl_tests

    if args.nranks is not None:
        require_positive("--nranks", args.nranks, integer=True)
    if args.intra_link not in builtin_catalog().links:
        raise ConfigError("--intra-link", args.intra_link, builtin_catalog().links)
    rows = []
    for path in args.from_nccl_tests:
        rows += read_nccl_tests(path, op=args.op, ranks=args.nranks)
    links = link_entries(rows, args.name, args.intra_link)
    out = check_writable("--out", args.out, directory=True)
    catalog = builtin_catalog().extended({"links": links})
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=["op", "size_bytes", "time_s", "algbw_GBps", "busbw_GBps", "ranks",
                                             "hosts", "predicted_time_s", "error_pct", "where"], lineterminator="\n")
    writer.writeheader()
    lines = []
    for r in rows:
        from sim.cluster import Cluster

        key = f"{args.name}_{'intra' if r.hosts == 1 else 'inter'}" + ("" if r.op == "allreduce" else f"_{r.op}")
        per_node = r.ranks // r.hosts
        group = Cluster(nodes=r.hosts, gpus_per_node=per_node, gpu=builtin_catalog().gpus["v100"],
                        intra_link=catalog.links[key] if r.hosts == 1 else catalog.links[f"{args.name}_intra"],
                        inter_link=catalog.links[key])
        predicted = alpha_beta_cost(r.op, r.size_bytes, group, CommOptions()).time_s
        err = 100 * (predicted - r.time_s) / r.time_s
        writer.writerow({"op": r.op, "size_bytes": r.size_bytes, "time_s": r.time_s, "algbw_GBps": r.algbw_GBps,
                         "busbw_GBps": r.busbw_GBps, "ranks": r.ranks, "hosts": r.hosts,
                         "predicted_time_s": predicted, "error_pct": round(err, 2), "where": r.where})
        lines.append(err)
    atomic_write_text(out / "catalog.yaml", yaml.safe_dump({"links": links}, sort_keys=False, width=100))
    atomic_write_text(out / "nccl_tests.csv", buf.getvalue())
    from scalebench.commands.common import write_out

    big = [abs(e) for e, r in zip(lines, rows, strict=True) if r.size_bytes >= 256 * 1024]
    summary = "\n".join(f"  {k}: {v.get('bandwidth_GBps', '(base ' + str(v.get('base')) + ')')} GB/s, "
                        f"{v.get('software_latency_us', '')} us/step" for k, v in links.items())
    write_out(f"calibration written to {out}/ (catalog.yaml, nccl_tests.csv) from {len(rows)} rows\n{summary}\n"
              f"  the fitted links reproduce the rows >= 256 KiB within {max(big, default=0):.1f} % "
              f"(median {sorted(big)[len(big) // 2] if big else 0:.1f} %)\n"
              f"  use: scalebench collective --catalog {out}/catalog.yaml --intra-link ... --inter-link ...\n")
    return 0
