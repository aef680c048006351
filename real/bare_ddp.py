"""A bare torch DDP training loop: the yardstick for the harness' own overhead.

``python -m real.bare_ddp MODEL BATCH ITERATIONS WARMUP THREADS OUT.json`` on each rank (env
RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). The same model, data, optimizer and threads as
the harness' DDP run, none of its machinery: no barriers per step, no heartbeats, no
barrier per step. Rank 0 writes the mean wall time per iteration, (t_end - t_start) / N between
two barriers around the N timed iterations, and, with the harness' own statistic, the median
over iterations of the slowest rank's step (wall and process CPU time; one perf_counter and
process_time per step, gathered after the loop: on a shared machine the median resists
other processes' bursts).
"""

from __future__ import annotations

import json
import statistics
import sys
import time


def main(argv: list[str]) -> int:
    from real.binding import bind_from_env

    bind_from_env(int(argv[5]))
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
    steps, cpu = [], []
    for i in range(warmup + iterations):
        if i == warmup:
            dist.barrier()
            start = time.perf_counter()
        t0, c0 = time.perf_counter(), time.process_time()
        x, y = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        loss(ddp(x), y).backward()
        opt.step()
        steps.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    dist.barrier()
    per_iteration = (time.perf_counter() - start) / iterations
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (steps[warmup:], cpu[warmup:]))  # after the timed loop
    if rank == 0:
        slowest = [max(col) for col in zip(*(g[0] for g in gathered), strict=True)]
        slowest_cpu = [max(col) for col in zip(*(g[1] for g in gathered), strict=True)]
        with open(out, "w", encoding="utf-8") as fh:
            json.dump({"mean_iteration_time_s": per_iteration,
                       "slowest_mean_iteration_time_s": statistics.fmean(slowest),
                       "slowest_mean_iteration_cpu_s": statistics.fmean(slowest_cpu),
                       "median_iteration_time_s": statistics.median(slowest)}, fh)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    from real.lifecycle import die_with_parent_from_env, exit_skipping_teardown

    die_with_parent_from_env()
    exit_skipping_teardown(main(sys.argv))


def run_interleaved(ctx) -> dict:
    """Harness step and bare loop in the same processes, alternating blocks (load drift cancels).

    Harness block: what real/strategies does per iteration (barrier, timed DDPTrainer.step,
    heartbeat), statistic = slowest rank per iteration. Bare block: a plain DDP model (its own
    copy) stepped ``block`` times between two barriers, statistic = wall time / block.
    """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from real.config import real_scenario
    from real.models import loss_fn
    from real.strategies.common import base_model, make_optimizer, rank_batches
    from real.strategies.ddp import DDPTrainer

    job = ctx.job
    scenario, options = real_scenario(job["spec"])
    w = scenario.workload
    batches = rank_batches(w.name, w.batch_size, scenario.seed, ctx.rank)
    harness = DDPTrainer(base_model(scenario), scenario, options, ctx.device)
    bare = DDP(base_model(scenario))
    bare_opt = make_optimizer(bare.parameters(), w.optimizer, options.lr)
    bare_loss = loss_fn(w.name)
    h_times, b_means = [], []
    for b in range(job["warmup_blocks"] + job["blocks"]):
        timed = b >= job["warmup_blocks"]
        for i in range(job["block"]):
            x, y = batches[i % len(batches)]
            dist.barrier()
            t0 = time.perf_counter()
            harness.step(x, y)
            elapsed = time.perf_counter() - t0
            ctx.beat()
            if timed:
                h_times.append(elapsed)
        dist.barrier()
        t0 = time.perf_counter()
        for i in range(job["block"]):
            x, y = batches[i % len(batches)]
            bare_opt.zero_grad(set_to_none=True)
            bare_loss(bare(x), y).backward()
            bare_opt.step()
        dist.barrier()
        ctx.beat()
        if timed:
            b_means.append((time.perf_counter() - t0) / job["block"])
    slowest = torch.tensor(h_times, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    per_block = slowest.view(job["blocks"], job["block"]).mean(dim=1).tolist()  # as the harness reports a phase
    return {"harness_block_means_s": per_block, "bare_block_means_s": b_means} if ctx.rank == 0 else {}
