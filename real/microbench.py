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

``python -m real.microbench JOB.json`` is one rank (real/bench_ranks.py).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import yaml

from real.bench_ranks import run_as_rank, run_ranks, timed
from real.calib_lookup import nearest_world_size
from sim.fileio import atomic_write_text

CODECS_FILE = "codecs.yaml"
DTYPES = ("fp32", "fp16", "bf16")
SIZES_ELEMS = (2**16, 2**18, 2**20)


def _framework_overhead(job) -> list[dict[str, Any]]:
    """One DDP training step of a one-layer model (Linear 16x16, batch 8), the same step without
    DDP, and a bare allreduce of its gradient. The simulator's DDP overhead (hooks, bucket copies,
    the hand-off to gloo's threads) is ddp_step_s - local_step_s - its own predicted allreduce of
    gradient_bytes (validation/calib.py ``framework_overhead_s``); overhead_s (minus the bare allreduce
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
    t_local = timed(step(local, opt_l), job["iterations"], job["warmup"])
    t_ddp = timed(step(ddp, opt_d), job["iterations"], job["warmup"])
    t_bare = timed(lambda: torch.distributed.all_reduce(grad), job["iterations"], job["warmup"])
    return [{"local_step_s": t_local, "ddp_step_s": t_ddp, "bare_allreduce_s": t_bare,
             "overhead_s": max(0.0, t_ddp - t_local - t_bare), "gradient_bytes": grad.numel() * grad.element_size()}]


def _codec_sums(job) -> list[dict[str, Any]]:
    """Allreduce of each size in fp32, fp16, bf16 and of half the elements in fp32 (the same
    wire bytes as the 16-bit ones): mean over iterations of the slowest rank."""
    import torch
    import torch.distributed as dist

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
    return out


def _rank_body(job) -> list[dict[str, Any]]:
    return _framework_overhead(job) if job.get("kind") == "framework" else _codec_sums(job)


def measure_codec_sums(n: int, *, iterations: int = 8, warmup: int = 2, timeout_s: float = 300,
                       sizes_elems: tuple[int, ...] = SIZES_ELEMS, kind: str = "codec") -> list[dict[str, Any]]:
    return run_ranks(n, {"sizes_elems": list(sizes_elems), "iterations": iterations, "warmup": warmup, "kind": kind},
                     module="real.microbench", timeout_s=timeout_s)


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


if __name__ == "__main__":
    run_as_rank(_rank_body)
