"""A bare torch DDP training loop: the yardstick for the harness' own overhead.

``python -m real.bare_ddp MODEL BATCH ITERATIONS WARMUP THREADS OUT.json`` on each rank (env
RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). The same model, data, optimizer and threads as
the harness' DDP run, none of its machinery: no barriers per step, no heartbeats, no
barrier per step. Rank 0 writes the mean wall time per iteration, (t_end - t_start) / N between
two barriers around the N timed iterations, and the median of its per-iteration times (one
perf_counter per step: on a shared machine the median resists other processes' bursts).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time


def main(argv: list[str]) -> int:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from real.models import build_model, loss_fn
    from real.strategies.common import make_optimizer, rank_batches

    model_name, batch, iterations, warmup, threads, out = argv[1], int(argv[2]), int(argv[3]), int(argv[4]), int(argv[5]), argv[6]
    torch.set_num_threads(threads)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ddp = DDP(build_model(model_name, 0))
    opt = make_optimizer(ddp.parameters(), "momentum", 0.01)
    loss = loss_fn(model_name)
    batches = rank_batches(model_name, batch, 0, rank)
    steps = []
    for i in range(warmup + iterations):
        if i == warmup:
            dist.barrier()
            start = time.perf_counter()
        t0 = time.perf_counter()
        x, y = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        loss(ddp(x), y).backward()
        opt.step()
        steps.append(time.perf_counter() - t0)
    dist.barrier()
    per_iteration = (time.perf_counter() - start) / iterations
    if rank == 0:
        with open(out, "w", encoding="utf-8") as fh:
            json.dump({"mean_iteration_time_s": per_iteration,
                       "median_iteration_time_s": statistics.median(steps[warmup:])}, fh)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    os._exit(code)
