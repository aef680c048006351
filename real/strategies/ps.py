"""Parameter servers.

Synchronous (``SyncPSTrainer``): the flat parameter vector is split into S contiguous shards;
server s is rank s (servers are co-located with workers, ranks 0..S-1). Each step every worker
reduces its gradient shard s to rank s (``dist.reduce``, sum), server s divides by the world
size, applies the optimizer (torch's own, on its shard, so the update is the same elementwise
arithmetic as DDP's) and broadcasts the new shard back. Bytes per worker and step: S_grad up,
S_param down, as the simulator's ps collective counts them.

Asynchronous (``run_async_ps``, torch.distributed.rpc over TensorPipe): rank 0 is the server
only; workers 1..n-1 loop pull parameters -> gradient -> push, with no barrier. The server
applies each push at once and records its staleness = updates applied since that worker
pulled the parameters it used.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import torch
import torch.distributed as dist

from real.models import loss_fn
from real.strategies.common import make_optimizer


def shard_bounds(total: int, shards: int) -> list[tuple[int, int]]:
    """Contiguous, as equal as possible: the first total % shards shards get one more element."""
    base, extra = divmod(total, shards)
    bounds, lo = [], 0
    for s in range(shards):
        hi = lo + base + (1 if s < extra else 0)
        bounds.append((lo, hi))
        lo = hi
    return bounds


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def _unflatten_into(flat: torch.Tensor, params) -> None:
    offset = 0
    with torch.no_grad():
        for p in params:
            p.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()


class SyncPSTrainer:
    def __init__(self, model: torch.nn.Module, scenario: Any, options: Any):
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.loss = loss_fn(scenario.workload.name)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        servers = min(scenario.strategy.ps_servers, self.world)
        self.bounds = shard_bounds(sum(p.numel() for p in self.params), servers)
        self.shard = None
        if self.rank < servers:
            lo, hi = self.bounds[self.rank]
            self.shard = torch.nn.Parameter(_flat(self.params).detach()[lo:hi].clone())
            self.opt = make_optimizer([self.shard], scenario.workload.optimizer, options.lr)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> float:
        for p in self.params:
            p.grad = None
        loss = self.loss(self.model(x), y)
        loss.backward()
        grad = _flat([p.grad for p in self.params])
        for s, (lo, hi) in enumerate(self.bounds):
            part = grad[lo:hi].contiguous()
            dist.reduce(part, dst=s)
            if s == self.rank:
                self.shard.grad = part.div_(self.world)
                self.opt.step()
        flat = torch.empty_like(grad)
        for s, (lo, hi) in enumerate(self.bounds):
            part = self.shard.detach().clone() if s == self.rank else torch.empty(hi - lo)
            dist.broadcast(part, src=s)
            flat[lo:hi] = part
        _unflatten_into(flat, self.params)
        return float(loss.detach())

    def info(self) -> dict[str, Any]:
        return {"comm_path": f"reduce+broadcast, {len(self.bounds)} server shard(s)"}


# -- asynchronous, over RPC -----------------------------------------------------------------

_SERVER: dict[str, Any] = {}


def _ps_pull() -> tuple[torch.Tensor, int]:
    s = _SERVER
    with s["lock"]:
        return _flat(s["params"]).detach().clone(), s["version"]


def _ps_push(grad: torch.Tensor, version: int, worker: int) -> int:
    s = _SERVER
    with s["lock"]:
        staleness = s["version"] - version
        offset = 0
        for p in s["params"]:
            p.grad = grad[offset:offset + p.numel()].view_as(p).clone()
            offset += p.numel()
        s["opt"].step()
        s["version"] += 1
        s["staleness"].append((worker, staleness))
    s["ctx"].beat()
    return staleness


def _ps_report(worker: int, data: dict[str, Any]) -> None:
    with _SERVER["lock"]:
        _SERVER["reports"][worker] = data


def run_async_ps(ctx) -> dict[str, Any]:
    import os

    from torch.distributed import rpc

    from real.config import real_scenario
    from real.strategies.common import base_model, rank_batches

    job = ctx.job
    scenario, options = real_scenario(job["spec"])
    w = scenario.workload
    model = base_model(scenario)
    rpc_opts = rpc.TensorPipeRpcBackendOptions(
        init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", rpc_timeout=ctx.timeout_s)
    if ctx.rank == 0:
        params = [p for p in model.parameters() if p.requires_grad]
        _SERVER.update(params=params, opt=make_optimizer(params, w.optimizer, options.lr), version=0,
                       staleness=[], reports={}, lock=threading.Lock(), ctx=ctx)
    rpc.init_rpc(f"rank{ctx.rank}", rank=ctx.rank, world_size=ctx.world, rpc_backend_options=rpc_opts)
    ctx.beat()
    if ctx.rank != 0:
        loss = loss_fn(w.name)
        batches = rank_batches(w.name, w.batch_size, scenario.seed, ctx.rank)
        params = [p for p in model.parameters() if p.requires_grad]
        times, losses = [], []
        for i in range(job["warmup"] + job["iterations"]):
            x, y = batches[i % len(batches)]
            t0 = time.perf_counter()
            flat, version = rpc.rpc_sync("rank0", _ps_pull)
            _unflatten_into(flat, params)
            for p in params:
                p.grad = None
            value = loss(model(x), y)
            value.backward()
            rpc.rpc_sync("rank0", _ps_push, args=(_flat([p.grad for p in params]), version, ctx.rank))
            elapsed = time.perf_counter() - t0
            ctx.beat()
            losses.append(float(value.detach()))
            if i >= job["warmup"]:
                times.append(elapsed)
        rpc.rpc_sync("rank0", _ps_report, args=(ctx.rank, {"rank": ctx.rank, "iteration": times, "losses": losses}))
    rpc.shutdown()  # waits for every worker: the graceful end
    if ctx.rank != 0:
        return {}
    staleness = [st for _, st in _SERVER["staleness"]]
    ranks = [_SERVER["reports"][r] for r in sorted(_SERVER["reports"])]
    return {"ranks": ranks, "world": ctx.world, "workers": ctx.world - 1, "threads": torch.get_num_threads(),
            "staleness": staleness,
            "staleness_mean": sum(staleness) / len(staleness), "staleness_max": max(staleness)}
