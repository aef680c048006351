"""Microbenchmarks of our own for what the collective fits and layer profiles cannot see.

1. DDP's per-iteration overhead (``framework``): see ``_framework_overhead``; -> framework.yaml.
2. The cost of summing fp16/bf16 in gloo (CPU):

gloo sums fp16 and bf16 on the CPU more slowly per byte than fp32 (DESIGN.md, observed), so
half the bytes is not half the time. We time allreduce of E elements in each dtype and of E/2
fp32 elements (the same bytes on the wire); the difference is the extra summation cost, which
the simulator's codec model charges per element summed ((n-1)/n x E per rank in a ring):
  reduce_ns_per_elem(dtype) = (t_dtype(E) - t_fp32(E/2)) / ((n-1)/n x E)   [median over sizes]
Written to ``<calibration>/codecs.yaml``; read by ``reduce_ns_for``. A microbenchmark of its
own: no training iteration of the validation sweep is involved.

``python -m validation.microbench JOB.json`` is one rank (RANK, WORLD_SIZE, MASTER_* set).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from sim.fileio import atomic_write_text

CODECS_FILE = "codecs.yaml"
DTYPES = ("fp32", "fp16", "bf16")
SIZES_ELEMS = (2**16, 2**18, 2**20)


def _timed(fn, iterations: int, warmup: int, min_time_s: float = 1.0, max_iterations: int = 1000, *,
           own: bool = False) -> float:
    """Mean over repetitions of the slowest rank (each started after a barrier; ``own``: of
    this rank's own times; the mean, as every repeated phase: ``real.results.mean_iqr``); at least ``iterations`` and enough to last ``min_time_s``
    (real/timing.py)."""
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


def _framework_overhead(job) -> list[dict[str, Any]]:
    """One DDP training step of a one-layer model (Linear 16x16, batch 8), the same step without
    DDP, and a bare allreduce of its gradient. The simulator's DDP overhead (hooks, bucket copies,
    the hand-off to gloo's threads) is ddp_step_s - local_step_s - its own predicted allreduce of
    gradient_bytes (validation.calib.framework_overhead_s); overhead_s (minus the bare allreduce
    timed here) is kept for reference only."""
    import copy

    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = torch.nn.Linear(16, 16)
    local = copy.deepcopy(model)
    ddp = DDP(model)
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    loss = torch.nn.MSELoss()

    def step(m, opt):
        def run():
            opt.zero_grad(set_to_none=True)
            loss(m(x), y).backward()
            opt.step()
        return run

    opt_l = torch.optim.SGD(local.parameters(), lr=0.01, momentum=0.9)
    opt_d = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    grad = torch.zeros(16 * 16 + 16)
    t_local = _timed(step(local, opt_l), job["iterations"], job["warmup"])
    t_ddp = _timed(step(ddp, opt_d), job["iterations"], job["warmup"])
    t_bare = _timed(lambda: torch.distributed.all_reduce(grad), job["iterations"], job["warmup"])
    return [{"local_step_s": t_local, "ddp_step_s": t_ddp, "bare_allreduce_s": t_bare,
             "overhead_s": max(0.0, t_ddp - t_local - t_bare), "gradient_bytes": grad.numel() * grad.element_size()}]


def _rank_main(job_file: str) -> None:
    from real.binding import bind_from_env
    from sim.costs.colocation import threads_per_rank

    threads = threads_per_rank(os.cpu_count() or 1, int(os.environ["WORLD_SIZE"]))
    bind_from_env(threads)
    import torch
    import torch.distributed as dist

    job = json.loads(Path(job_file).read_text())
    torch.set_num_threads(threads)
    dist.init_process_group("gloo")
    if job.get("kind") in ("framework", "codec_ops"):
        if job["kind"] == "framework":
            out = _framework_overhead(job)
        else:
            from validation.codec_bench import run_ops

            out = run_ops(job)
        if dist.get_rank() == 0:
            Path(job["out"]).write_text(json.dumps(out))
        dist.barrier()
        dist.destroy_process_group()
        return
    types = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    out = []
    for elems in job["sizes_elems"]:
        for name, count in [*((d, elems) for d in DTYPES), ("fp32_half", elems // 2)]:
            buf = torch.ones(count, dtype=types[name.split("_")[0]])
            times = []
            for i in range(job["warmup"] + job["iterations"]):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(buf)
                if i >= job["warmup"]:
                    times.append(time.perf_counter() - t0)
            slowest = torch.tensor(times, dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            out.append({"dtype": name, "elems": elems, "time_s": statistics.fmean(slowest.tolist())})
    if dist.get_rank() == 0:
        Path(job["out"]).write_text(json.dumps(out))
    dist.barrier()
    dist.destroy_process_group()


def measure_codec_sums(n: int, *, iterations: int = 8, warmup: int = 2, timeout_s: float = 300,
                       sizes_elems: tuple[int, ...] = SIZES_ELEMS, kind: str = "codec") -> list[dict[str, Any]]:
    return run_ranks(n, {"sizes_elems": list(sizes_elems), "iterations": iterations, "warmup": warmup, "kind": kind},
                     timeout_s=timeout_s)


def run_ranks(n: int, job: dict[str, Any], *, timeout_s: float = 300,
              module: str = "validation.microbench") -> list[dict[str, Any]]:
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
            raise RuntimeError(f"{job.get('kind', 'codec')} benchmark failed: " + " | ".join(
                (p.stderr.read().decode(errors="replace").strip().splitlines() or [""])[-1] for p in procs if p.stderr))
        return json.loads(Path(job["out"]).read_text())


def reduce_cost_ns(rows: list[dict[str, Any]], n: int) -> dict[str, float]:
    """Extra ns per element summed of fp16/bf16 over fp32 at the same wire bytes (>= 0)."""
    t = {(r["dtype"], r["elems"]): r["time_s"] for r in rows}
    out = {}
    for dtype in ("fp16", "bf16"):
        per = [(t[(dtype, e)] - t[("fp32_half", e)]) / ((n - 1) / n * e) * 1e9
               for e in sorted({r["elems"] for r in rows}) if (dtype, e) in t and ("fp32_half", e) in t]
        out[dtype] = max(0.0, statistics.median(per)) if per else 0.0
    return out


def calibrate_codecs(directory: str | Path, ranks: tuple[int, ...] = (2,), progress=print) -> dict[str, Any]:
    data: dict[str, Any] = {"form": __doc__.split("\n\n")[0] if __doc__ else "", "world_sizes": {}}
    for n in ranks:
        progress(f"codec sums: fp32/fp16/bf16 allreduce on {n} ranks")
        rows = measure_codec_sums(n)
        data["world_sizes"][n] = {"reduce_ns_per_elem": reduce_cost_ns(rows, n), "rows": rows}
    atomic_write_text(Path(directory) / CODECS_FILE, yaml.safe_dump(data, sort_keys=False))
    return data


FRAMEWORK_FILE = "framework.yaml"


def calibrate_framework(directory: str | Path, ranks: tuple[int, ...] = (1, 2, 4), rounds: int = 3,
                        progress=print) -> dict[str, Any]:
    """Per world size, DDP's per-iteration overhead on a one-layer model (``_framework_overhead``):
    the launch (of ``rounds``) whose DDP step minus local step is the median."""
    from real.calibrate import median_round

    data: dict[str, Any] = {"form": _framework_overhead.__doc__, "world_sizes": {}}
    for n in ranks:
        progress(f"framework overhead: DDP step of a one-layer model on {n} rank(s)")
        launches = [measure_codec_sums(n, iterations=30, warmup=5, kind="framework")[0] for _ in range(rounds)]
        for entry in launches:
            entry["ddp_minus_local_s"] = entry["ddp_step_s"] - entry["local_step_s"]
        data["world_sizes"][n] = median_round(launches, "ddp_minus_local_s")
    atomic_write_text(Path(directory) / FRAMEWORK_FILE, yaml.safe_dump(data, sort_keys=False))
    return data


def reduce_ns_for(cal_dir: str | Path, dtype: str, ranks: int) -> float | None:
    """The calibrated extra summation cost for ``dtype`` at the nearest measured world size."""
    found = nearest_world_size(Path(cal_dir) / CODECS_FILE, ranks)
    return None if found is None else found[1]["reduce_ns_per_elem"].get(dtype)


def nearest_world_size(path: Path, ranks: int) -> tuple[int, dict[str, Any]] | None:
    """(k, entry) of a calibration file's ``world_sizes`` at the measured k nearest ``ranks``
    (ties to the larger k); None when the file or its entries are missing."""
    if not path.exists():
        return None
    sizes = {int(k): v for k, v in (yaml.safe_load(path.read_text()) or {}).get("world_sizes", {}).items()}
    if not sizes:
        return None
    nearest = min(sizes, key=lambda k: (abs(k - ranks), -k))
    return nearest, sizes[nearest]


def piecewise_linear(points: list[tuple[float, float]], x: float) -> float:
    """y(x) through sorted (x, y) points, linear between them, held beyond the first and the last."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if x <= x1:
            return y0 + (y1 - y0) * ((x - x0) / (x1 - x0)) if x1 > x0 else y1
    return points[-1][1]


if __name__ == "__main__":
    from real.lifecycle import die_with_parent_from_env
    from real.worker import exit_skipping_teardown

    die_with_parent_from_env()
    _rank_main(sys.argv[1])
    exit_skipping_teardown(0)
