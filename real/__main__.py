"""``python -m real``: the entry point torchrun starts on every machine of a multi-machine run.

    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        -m real --model small_cnn --strategy ddp --backend nccl --out results/real/run.csv

Takes the flags of ``scalebench real``; the world size and ranks per node come from torchrun's
environment (WORLD_SIZE, LOCAL_WORLD_SIZE), not from --gpus. Rank 0 prints the row and writes
--out. Bad arguments: one line, exit 2, on every rank before any rank joins the group.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from real.cli import add_arguments, apply_defaults, spec_from_args
    from sim.errors import ConfigError

    parser = argparse.ArgumentParser(prog="python -m real", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = apply_defaults(parser.parse_args(argv))
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        print("python -m real: error: RANK/WORLD_SIZE not set: start it with torchrun "
              "(on one machine, `scalebench real --gpus N` launches the ranks itself)", file=sys.stderr)
        return 2
    world, local_world = int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))
    rank = int(os.environ["RANK"])
    args.gpus = world
    try:
        if args.out and rank == 0:  # before measuring: a path that cannot be written would lose the run
            from real.results import check_row_path

            check_row_path("--out", args.out)
        if args.comm:
            from real.bench_comm import COLLECTIVES
            from real.config import resolve_device

            job = {"kind": "comm", "collectives": args.collectives or list(COLLECTIVES), "max_bytes": args.max_bytes,
                   "min_bytes": 1024, "iterations": args.iterations, "warmup": args.warmup,
                   "backend": args.backend or "gloo", "device": resolve_device({"device": args.device}, args.backend or "gloo", "--device")}
            spec = None
        else:
            from real.config import real_scenario
            from real.measure import job_for

            spec = spec_from_args(args)
            spec["cluster"]["gpus_per_node"] = local_world
            scenario, options = real_scenario(spec)
            job = job_for(spec, options, args.iterations, args.warmup)
            if args.profile:  # every rank steps; rank 0 records and writes it (real/profiled.py)
                job["profile"] = str(Path(args.profile).resolve())
    except ConfigError as err:
        print(f"python -m real: error: {err}", file=sys.stderr)
        return 2
    from real.worker import run_job

    with tempfile.TemporaryDirectory(prefix=f"scalebench-real-{os.getpid()}-") as tmp:  # real/lifecycle.py
        out = Path(tmp) / "raw.json"
        status = run_job({**job, "timeout_s": args.timeout, "out": str(out) if rank == 0 else None})
        if status == 0 and rank == 0:
            _report(args, spec, out)
    return status


def _report(args: argparse.Namespace, spec: dict | None, raw_path: Path) -> None:
    import json

    from real.results import environment_columns, write_rows
    from sim.fileio import format_rows

    raw = json.loads(raw_path.read_text(encoding="utf-8"))
    if spec is None:
        env = environment_columns(backend=args.backend or "gloo", link=None, topology="shared", threads=None,
                                  device=args.device)
        from real.bench_comm import format_comm_table

        rows = [{**r, **env, "source": "real"} for r in raw["rows"] if "time_s" in r]
        text = format_comm_table(rows)
    else:
        from real.cli import row_table
        from real.config import real_scenario
        from real.measure import row_from_raw

        scenario, options = real_scenario(spec)
        row = row_from_raw(scenario, options, raw, iterations=args.iterations, warmup=args.warmup, link=None,
                           topology="shared", one_machine=os.environ.get("LOCAL_WORLD_SIZE") == os.environ.get("WORLD_SIZE"))
        rows = [row]
        text = row_table(row)
    if args.out:
        write_rows(args.out, rows)
    sys.stdout.write(text if args.format == "table" else format_rows(rows, args.format))


if __name__ == "__main__":
    from real.lifecycle import exit_skipping_teardown

    exit_skipping_teardown(main())
