"""Collective microbenchmarks in the nccl-tests manner.

Per collective and size (bytes, geometric 1 KiB to ``max_bytes``): the result is checked
before timing (``wrong`` counts bad elements, as nccl-tests' #wrong), warm-up is excluded,
each timed repetition starts after a barrier and counts as its slowest rank, the mean is
reported with its IQR (nccl-tests reports the mean of its timed loop too; why not the median:
``real.results.mean_iqr``). Sizes follow nccl-tests: allreduce and broadcast the buffer, allgather
the gathered output, reduce-scatter the input, sendrecv what each rank sends.
  algbw = size / time;  busbw = algbw x factor, factor = 2(n-1)/n (allreduce),
  (n-1)/n (allgather, reduce_scatter), 1 (broadcast, sendrecv)  (nccl-tests doc/PERFORMANCE.md)
"""

from __future__ import annotations

import time
from typing import Any

COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast", "sendrecv")
KIB = 1024


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests' factor (sim.costs.backends.BUSBW_FACTOR, the one table)."""
    from sim.costs.backends.common import BUSBW_FACTOR

    return BUSBW_FACTOR[collective](n)


MAX_COMM_BYTES = 2**30
"""1 GiB, the largest message of a sweep: nccl-tests' own examples stop at 128 MiB-8 GiB on GPUs
with 40-80 GB; on a CPU machine every rank holds several buffers of it."""


def sizes_bytes(min_bytes: int = KIB, max_bytes: int = 256 * KIB * KIB, factor: int = 4) -> list[int]:
    sizes, s = [], min_bytes
    while s <= max_bytes:
        sizes.append(s)
        s *= factor
    return sizes


def _op(name: str, n: int, rank: int, size: int, device=None):
    """(fill, run, check) closures for one collective on ``size`` bytes of fp32; check returns #wrong."""
    import functools

    import torch
    import torch.distributed as dist

    empty = functools.partial(torch.empty, device=device or "cpu")

    count = max(n, size // 4 // n * n)  # divisible by n for the sharded collectives
    if name == "allreduce":
        buf = empty(count)

        def fill():
            buf.fill_(rank + 1)

        return fill, lambda: dist.all_reduce(buf), lambda: int((buf != n * (n + 1) / 2).sum())
    if name == "allgather":
        shard, out = empty(count // n), empty(count)

        def fill():
            shard.fill_(rank + 1)

        expect = torch.arange(1, n + 1, dtype=torch.float32, device=device or "cpu").repeat_interleave(count // n)
        return fill, lambda: dist.all_gather_into_tensor(out, shard), lambda: int((out != expect).sum())
    if name == "reduce_scatter":
        inp, out = empty(count), empty(count // n)

        def fill():
            inp.fill_(rank + 1)

        return fill, lambda: dist.reduce_scatter_tensor(out, inp), lambda: int((out != n * (n + 1) / 2).sum())
    if name == "broadcast":
        buf = empty(count)

        def fill():
            buf.fill_(7.0 if rank == 0 else 0.0)

        return fill, lambda: dist.broadcast(buf, src=0), lambda: int((buf != 7.0).sum())
    if name == "sendrecv":  # a ring: send to the next rank, receive from the previous
        send, recv = empty(count), empty(count)

        def fill():
            send.fill_(rank + 1)

        def run():
            ops = [dist.P2POp(dist.isend, send, (rank + 1) % n), dist.P2POp(dist.irecv, recv, (rank - 1) % n)]
            for req in dist.batch_isend_irecv(ops):
                req.wait()

        return fill, run, lambda: int((recv != (rank - 1) % n + 1).sum())
    raise ValueError(name)


BURST_DIM = 64
"""The compute burst's matrix: 64 x 64 fp32 matmuls, a few microseconds each, in a loop."""


def compute_burst(seconds: float, matrix) -> None:
    """Every rank computes for ``seconds`` (matmuls on its own thread) before a timed collective."""
    import torch

    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        torch.mm(matrix, matrix)


def run_comm_bench(ctx) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from real.results import mean_iqr
    from real.timing import timed_phase

    job = ctx.job
    n, rank = ctx.world, ctx.rank
    busy_s = float(job.get("busy_s", 0.0) or 0.0)
    burst = torch.randn(BURST_DIM, BURST_DIM)
    rows = []
    for name in job["collectives"]:
        for size in sizes_bytes(job.get("min_bytes", KIB), job["max_bytes"]):
            try:
                fill, run, check = _op(name, n, rank, size, ctx.device)
                fill()
                run()
            except RuntimeError as err:  # the backend lacks this collective
                rows.append({"collective": name, "size_bytes": size, "error": str(err).splitlines()[0]})
                dist.barrier()
                break
            wrong = torch.tensor([check()], dtype=torch.float64)
            least = job["iterations"] if size <= 4 * KIB * KIB else max(3, job["iterations"] // 4)

            def one(_i: int, run=run) -> tuple[float, float]:
                dist.barrier()
                if busy_s > 0:
                    compute_burst(busy_s, burst)
                t0 = time.perf_counter()
                run()
                if ctx.device.type == "cuda":
                    torch.cuda.synchronize()
                elapsed = time.perf_counter() - t0
                ctx.beat()
                return elapsed, elapsed

            times = timed_phase(ctx, one, job["warmup"], least=least)
            reps = len(times)
            slowest = torch.tensor(times, dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            dist.all_reduce(wrong)
            t, iqr = mean_iqr(slowest.tolist())
            algbw = size / t
            rows.append({"collective": name, "size_bytes": size, "dtype": "fp32", "time_s": t, "time_iqr_s": iqr,
                         "algbw_GBps": algbw / 1e9, "busbw_GBps": algbw * busbw_factor(name, n) / 1e9,
                         "wrong": int(wrong.item()), "repetitions": reps, "world_size": n})
    return {"rows": rows}


def measure_collectives(nproc: int, collectives: list[str], *, max_bytes: int = 64 * KIB * KIB,
                        min_bytes: int = KIB, backend: str = "gloo", iterations: int = 20, warmup: int = 3,
                        timeout_s: float = 60, link: str | None = None, topology: str = "shared",
                        min_time_s: float = 0.0, max_iterations: int = 0, busy_s: float = 0.0,
                        device: str | None = None) -> list[dict]:
    """Rows of the collectives at each size on ``nproc`` ranks. One rank is allowed, as nccl-tests
    allows one GPU: the library's own floor (launch, a local copy), busbw 0 by nccl-tests' factors."""
    from real.launch import launch
    from real.results import environment_columns
    from sim.errors import ConfigError, require_positive

    require_positive("--gpus", nproc, integer=True)
    for name in collectives:
        if name not in COLLECTIVES:
            raise ConfigError("--collectives", name, COLLECTIVES)
    require_positive("--max-bytes", max_bytes, integer=True, maximum=MAX_COMM_BYTES,
                     why="per rank; all_gather holds ranks x that")
    if max_bytes < min_bytes:
        raise ConfigError("--max-bytes", max_bytes, f"at least the smallest size, {min_bytes} bytes")
    from real.config import BACKENDS
    from real.measure import check_run_options
    from sim.errors import require_choice

    require_choice("--backend", backend, BACKENDS)
    if backend == "nccl":
        from real.config import cuda_device_count

        devices = cuda_device_count()
        if not devices:
            raise ConfigError("--backend", backend, "gloo here (nccl needs CUDA devices)")
        if devices < nproc:  # NCCL refuses two ranks on one device
            raise ConfigError("--gpus", nproc, f"at most {devices} with nccl (one CUDA device per rank; gloo with "
                              "--device cuda lets ranks share one)")
    from real.config import resolve_device

    device = resolve_device({"device": device}, backend, "--device")
    check_run_options(iterations=iterations, warmup=warmup, timeout_s=timeout_s, link=link, topology=topology,
                      min_time_s=min_time_s, max_iterations=max_iterations)
    job = {"kind": "comm", "collectives": list(collectives), "max_bytes": max_bytes, "min_bytes": min_bytes,
           "iterations": iterations, "warmup": warmup, "min_time_s": min_time_s, "max_iterations": max_iterations,
           "backend": backend, "device": device, "link": link, "topology": topology, "busy_s": busy_s}
    deadline_s = timeout_s * 3 + 60 + len(collectives) * 60
    if link:
        from real.netem import Namespace

        with Namespace(link, topology) as ns:
            raw = launch(job, nproc, timeout_s=timeout_s, deadline_s=deadline_s, netns=ns.name)
    else:
        raw = launch(job, nproc, timeout_s=timeout_s, deadline_s=deadline_s)
    from real.steal import steal_columns

    env = {**environment_columns(backend=backend, link=link, topology=topology, threads=None,
                                     cpu_binding=raw.get("cpu_binding"), device=device),
           "device": device, **steal_columns(raw)}
    return [{**row, **env, "source": "real"} for row in raw["rows"] if "time_s" in row] + \
           [{**row, **env, "wrong": -1} for row in raw["rows"] if "error" in row]


def format_comm_table(rows: list[dict]) -> str:
    """nccl-tests style, the columns ``scalebench collective`` prints (sim/commtable.py)."""
    from sim.commtable import comm_table

    return comm_table(rows)
