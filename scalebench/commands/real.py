"""scalebench real: run a scenario for real with torch.distributed and print or save its row.

``scalebench real --gpus 2 --model small_cnn --strategy ddp`` (gloo on this machine);
``--comm`` runs the nccl-tests-style collective microbenchmarks instead; ``--bench`` the
harness' own benchmark (busbw vs memcpy, shaped link, harness vs a bare loop).
"""

from __future__ import annotations

import argparse

from real.cli import (
    DEFAULT_OUT_DIR,
    DEFAULT_SCENARIO,
    REAL_FLAGS,
    add_arguments,
    apply_defaults,
    check_flags,
    row_table,
    spec_from_args,
)
from scalebench.commands.common import format_rows, write_out

__all__ = ["DEFAULT_SCENARIO", "REAL_FLAGS", "add_arguments", "run", "spec_from_args"]

def run(args: argparse.Namespace) -> int:
    from scalebench.commands.common import require_torch

    require_torch()
    check_flags(args)
    apply_defaults(args)
    from real.launch import RunFailed, check_nproc
    from real.results import check_row_path
    from sim.fileio import check_writable

    # the output path first: a measurement takes minutes, and a path that cannot be written loses it
    if args.bench and args.out:
        check_writable("--out", args.out)
        if not args.out.lower().endswith(".json"):
            from sim.errors import ConfigError

            raise ConfigError("--out", args.out, "a .json file (--bench writes its figures as JSON)")
    elif args.out:
        check_row_path("--out", args.out)
    elif not (args.bench or args.comm):
        check_writable("--out", DEFAULT_OUT_DIR, directory=True)
    if args.trace:
        check_writable("--trace", args.trace)
    if args.gpus is not None:
        check_nproc(args.gpus)  # before anything starts: what this machine's cores and memory hold
    try:
        if args.bench:
            from real.benchmarks import run_benchmarks

            return run_benchmarks(out=args.out)
        if args.comm:
            if args.profile or args.trace:
                from sim.errors import ConfigError

                flag = "--profile" if args.profile else "--trace"
                raise ConfigError(flag, args.profile or args.trace, "a training run (not with --comm)")
            return _run_comm(args)
        from real.config import check_measured_labels
        from real.measure import measure_point

        spec = spec_from_args(args)
        check_measured_labels(spec)
        row = measure_point(spec, iterations=args.iterations, warmup=args.warmup,
                            timeout_s=args.timeout, link=args.link, topology=args.topology, trace_path=args.trace,
                            profile_path=args.profile)
    except RunFailed as err:
        import sys

        print(f"scalebench real: run failed: {err}", file=sys.stderr)
        return 1
    from real.results import default_row_path, write_rows

    path = write_rows(args.out or default_row_path(row, DEFAULT_OUT_DIR), [row])
    text = row_table(row) + _saved(path)
    if args.profile:
        text += (f"  torch.profiler trace of rank 0 written to {args.profile}; per-layer times: "
                 f"scalebench layers {row['model']} --profile {args.profile}\n")
    write_out(text if args.format == "table" else format_rows([row], args.format))
    return 0


def _run_comm(args: argparse.Namespace) -> int:
    from real.bench_comm import COLLECTIVES, format_comm_table, measure_collectives
    from sim.errors import require_positive

    nproc = require_positive("--gpus", args.gpus if args.gpus is not None else 2, integer=True)
    names = args.collectives or list(COLLECTIVES)
    rows = measure_collectives(nproc, names, max_bytes=args.max_bytes, backend=args.backend or "gloo",
                               iterations=args.iterations, warmup=args.warmup, timeout_s=args.timeout,
                               link=args.link, topology=args.topology, device=args.device)
    if args.out:
        from real.results import write_rows

        write_rows(args.out, rows)
    write_out(format_comm_table(rows) if args.format == "table" else format_rows(rows, args.format))
    return 0 if all(r["wrong"] == 0 for r in rows) else 1


def _saved(path) -> str:
    return f"  row written to {path}\n"
