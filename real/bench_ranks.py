"""Microbenchmarks on co-located ranks: launching them, one rank's frame, and timing a phase.

The calibration's own microbenchmarks (real/microbench.py, real/codec_bench.py,
real/pipeline_bench.py) each run as ``python -m real.<module> JOB.json`` on n ranks of this
machine (RANK, WORLD_SIZE, MASTER_* set): ``run_ranks`` starts them and returns rank 0's rows,
``rank_main`` is one rank (bound to its cores, the harness' threads, a gloo process group, the
module's body, rank 0's rows to ``job["out"]``), ``timed`` times one phase as every repeated
phase is timed (real/timing.py, real/results.py).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def timed(fn, iterations: int, warmup: int, min_time_s: float = 1.0, max_iterations: int = 1000, *,
          own: bool = False) -> float:
    """Mean over repetitions of the slowest rank (each started after a barrier; ``own``: of
    this rank's own times; the mean, as every repeated phase: ``real.results.mean_iqr``); at least
    ``iterations`` and enough to last ``min_time_s`` (real/timing.py)."""
    import torch
    import torch.distributed as dist

    from real.timing import agreed_repetitions

    def once() -> float:
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    warm = [once() for _ in range(warmup)]
    count = agreed_repetitions(warm, {"iterations": iterations, "min_time_s": min_time_s,
                                      "max_iterations": max_iterations})
    times = [once() for _ in range(count)]
    if own:
        return statistics.fmean(times)
    slowest = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return statistics.fmean(slowest.tolist())


def rank_main(job_file: str, body: Callable[[dict[str, Any]], Any]) -> None:
    """One rank: bound to its cores with the harness' threads per rank (real/binding.py,
    sim/costs/colocation.py), in a gloo process group; rank 0 writes ``body(job)`` to
    ``job["out"]`` as JSON."""
    from real.binding import bind_from_env
    from sim.costs.colocation import threads_per_rank

    threads = threads_per_rank(os.cpu_count() or 1, int(os.environ["WORLD_SIZE"]))
    bind_from_env(threads)
    import torch
    import torch.distributed as dist

    job = json.loads(Path(job_file).read_text())
    torch.set_num_threads(threads)
    dist.init_process_group("gloo")
    out = body(job)
    if dist.get_rank() == 0:
        Path(job["out"]).write_text(json.dumps(out))
    dist.barrier()
    dist.destroy_process_group()


def run_as_rank(body: Callable[[dict[str, Any]], Any]) -> None:
    """A benchmark module's ``__main__``: die with the launcher, ``rank_main`` on argv[1], and
    leave without the interpreter's teardown (real/lifecycle.py)."""
    from real.lifecycle import die_with_parent_from_env, exit_skipping_teardown

    die_with_parent_from_env()
    rank_main(sys.argv[1], body)
    exit_skipping_teardown(0)


def run_ranks(n: int, job: dict[str, Any], *, module: str, timeout_s: float = 300) -> list[dict[str, Any]]:
    """Run ``job`` on ``n`` co-located ranks of ``module`` (``python -m module JOB.json``, which
    writes rank 0's rows to ``job["out"]``); return rank 0's rows. Launched again when the
    hypervisor took too much of the CPU meanwhile (real/steal.py)."""
    from real.load import BUSY_ATTEMPTS, LAUNCH_LOG, LoadSample, busy_limit, busy_progress
    from real.steal import least_stolen

    def once() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        with LoadSample() as load:
            rows = _run_ranks_once(n, job, timeout_s=timeout_s, module=module)
        LAUNCH_LOG.append({"kind": job.get("kind", module), "ranks": n, **load.as_dict()})
        return rows, load.as_dict()

    limit = busy_limit()
    (rows, _), _, _ = least_stolen(once, others=lambda r: r[1].get("others_cpu_fraction"),
                                   others_limit=1.0 if limit is None else limit,
                                   others_attempts=BUSY_ATTEMPTS if limit is not None else 1, progress=busy_progress())
    return rows


def _run_ranks_once(n: int, job: dict[str, Any], *, timeout_s: float, module: str) -> list[dict[str, Any]]:
    from real.launch import free_port
    from real.lifecycle import child_env, held_tmp_dir

    with held_tmp_dir() as tmp:  # ranks die with us, the reaper removes tmp (real/lifecycle.py)
        job = {**job, "out": str(Path(tmp) / "out.json")}
        job_file = Path(tmp) / "job.json"
        job_file.write_text(json.dumps(job))
        port = str(free_port())
        procs = [subprocess.Popen([sys.executable, "-m", module, str(job_file)],
                                  env=child_env({**os.environ, "RANK": str(r), "WORLD_SIZE": str(n),
                                                 "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for r in range(n)]
        try:
            for p in procs:
                p.wait(timeout=timeout_s)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        if any(p.returncode for p in procs) or not Path(job["out"]).exists():
            raise RuntimeError(f"{job.get('kind', module)} benchmark failed: " + " | ".join(
                (p.stderr.read().decode(errors="replace").strip().splitlines() or [""])[-1] for p in procs if p.stderr))
        return json.loads(Path(job["out"]).read_text())
