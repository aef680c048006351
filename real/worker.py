"""One rank: join the process group, run a job, hand rank 0's result back, leave cleanly.

``python -m real.worker JOB.json`` (started by real/launch.py) or ``run_job(job)`` in a
process torchrun started (``python -m real``). RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
come from the environment.

Reliability: a rank started by real/launch.py dies with the launcher (PR_SET_PDEATHSIG,
real/lifecycle.py). A liveness thread rewrites ``alive<rank>`` every LIVENESS_INTERVAL_S with
"wait" while the rank waits for its peers in a barrier (``Context.barrier``) and "run"
otherwise: the launcher tells a stopped rank (its file goes stale) from the peers that wait for
it, and a rank that stopped making progress from one that waits. The same thread ends this
process (exit 124) when no step completed for ``timeout_s`` + 2 graces, because a hung gloo
collective is not always ended by the process-group timeout (``timeout_s`` + a grace, so that
the launcher, which judges at ``timeout_s``, names the culprit first). Any error prints one line
naming the rank and exits 1 without waiting for peers. A clean run tears the process group
down explicitly (ranks here sometimes abort at exit otherwise) and exits 0.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from real.lifecycle import PARENT_ENV, die_with_parent, exit_skipping_teardown

WATCHDOG_GRACE_S = 5.0
LIVENESS_INTERVAL_S = 0.5


@dataclass
class Context:
    rank: int
    world: int
    local_rank: int
    local_world: int
    job: dict[str, Any]
    heartbeat_file: Path | None = None
    last_beat: float = field(default_factory=time.monotonic)
    started: bool = False
    """Set at the first step beat (after the process group formed): the in-process watchdog counts from then."""
    waiting: bool = False
    phase: str = "setup"
    """What the rank is doing (the liveness file says it, and so does the launcher's blame)."""
    """True while this rank waits for its peers in ``barrier`` (read by the liveness thread)."""
    cpu_binding: str | None = None
    """Every local rank's CPUs ("rank:cpus ...", real/binding.py); None when unbound."""

    def beat(self) -> None:
        """Mark progress (call once per step): feeds both watchdogs."""
        self.last_beat = time.monotonic()
        self.started = True
        if self.heartbeat_file is not None:
            self.heartbeat_file.touch()

    def join(self) -> None:
        """Mark that the rank joined the process group (``joined<rank>``); its steps follow."""
        self.last_beat = time.monotonic()
        if self.heartbeat_file is not None:
            (self.heartbeat_file.parent / f"joined{self.rank}").touch()

    def barrier(self) -> None:
        """``dist.barrier()``, marked as waiting for the peers (the launcher then blames them, not us)."""
        import torch.distributed as dist

        self.waiting = True
        try:
            dist.barrier()
        finally:
            self.waiting = False

    @property
    def timeout_s(self) -> float:
        return float(self.job.get("timeout_s", 60))

    @property
    def device(self):
        """The job's ``device`` (real.config.DEVICES; NCCL's default is cuda): CUDA device
        LOCAL_RANK modulo the devices there are, so that ranks beyond the count share them."""
        import torch

        if job_device(self.job) == "cuda":
            return torch.device("cuda", self.local_rank % max(1, torch.cuda.device_count()))
        return torch.device("cpu")


def job_device(job: dict[str, Any]) -> str:
    return str(job.get("device") or ("cuda" if job.get("backend") == "nccl" else "cpu"))


NCCL_PROCESS_GROUP = "cpu:gloo,cuda:nccl"
"""The process group of an NCCL job: NCCL for CUDA tensors (what is measured), gloo for the CPU
tensors of the harness' own bookkeeping (agreeing on repetition counts, the baseline's flags, the
gathered timings), which a plain "nccl" group refuses ("No backend type associated with device
type cpu"). torch.distributed.init_process_group's documentation: backend may be a list of
device:backend pairs, e.g. "cpu:gloo,cuda:nccl"."""


def _start_watchdog(ctx: Context, alive_file: Path | None, parent_pid: int | None) -> None:
    """The liveness writes, the in-process progress watchdog and, where prctl is missing, the
    parent check, in one daemon thread."""
    from real.lifecycle import parent_gone

    limit = ctx.timeout_s + 2 * WATCHDOG_GRACE_S

    def watch() -> None:
        while True:
            if alive_file is not None:
                try:
                    tmp = alive_file.with_suffix(".tmp")
                    tmp.write_text(f"{'wait' if ctx.waiting else 'run'} {ctx.phase}")
                    os.replace(tmp, alive_file)
                except OSError:
                    pass
            if parent_pid is not None and parent_gone(parent_pid):
                os._exit(1)  # the launcher is gone: nobody reads our result
            idle = time.monotonic() - ctx.last_beat
            if ctx.started and idle > limit:
                print(f"rank {ctx.rank}: no progress for {idle:.0f} s (a peer died or a collective hung); exiting",
                      file=sys.stderr, flush=True)
                os._exit(124)
            time.sleep(LIVENESS_INTERVAL_S)

    threading.Thread(target=watch, name="scalebench-watchdog", daemon=True).start()


def _threads(ctx: Context) -> int:
    wanted = int(ctx.job.get("threads", 0) or 0)
    from sim.costs.colocation import threads_per_rank

    return wanted or threads_per_rank(os.cpu_count() or 1, ctx.local_world)


def run_job(job: dict[str, Any]) -> int:
    """Run ``job`` as the rank the environment names; return the exit status."""
    env = os.environ
    ctx = Context(rank=int(env["RANK"]), world=int(env["WORLD_SIZE"]),
                  local_rank=int(env.get("LOCAL_RANK", env["RANK"])),
                  local_world=int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])), job=job)
    from real.binding import bind_rank

    ctx.cpu_binding = bind_rank(ctx.local_rank, ctx.local_world, _threads(ctx))  # before any thread starts
    alive_file = None
    if job.get("heartbeat_dir"):
        ctx.heartbeat_file = Path(job["heartbeat_dir"]) / f"heartbeat{ctx.rank}"
        alive_file = Path(job["heartbeat_dir"]) / f"alive{ctx.rank}"
    parent = os.environ.get(PARENT_ENV)
    _start_watchdog(ctx, alive_file, int(parent) if parent and parent.isdigit() else None)
    try:
        import warnings

        import torch
        import torch.distributed as dist

        warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.distributed")
        torch.set_num_threads(_threads(ctx))
        backend = job.get("backend", "gloo")
        if ctx.device.type == "cuda":
            torch.cuda.set_device(ctx.device)
        _preload(job["kind"])  # imports count as start-up, not as a step that made no progress
        if job["kind"] != "ps_async":  # rpc brings its own rendezvous
            dist.init_process_group(NCCL_PROCESS_GROUP if backend == "nccl" else backend, rank=ctx.rank,
                                    world_size=ctx.world, timeout=timedelta(seconds=ctx.timeout_s + WATCHDOG_GRACE_S))
        ctx.join()
        if job.get("link") and job.get("topology") == "per_link" and dist.is_initialized():
            _shape_per_link(ctx)
        result = _dispatch(ctx)
        ctx.beat()
        if isinstance(result, dict):
            result["cpu_binding"] = ctx.cpu_binding or "unbound"
        if ctx.rank == 0 and job.get("out"):
            from sim.fileio import atomic_write_json

            atomic_write_json(job["out"], result, strict=False)  # the launcher reads NaN back
        if dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()
        return 0
    except Exception as err:  # one line per rank; the launcher names the first failure
        lines = [line for line in str(err).splitlines() if line.strip()] or [""]
        detail = f"{type(err).__name__}: {lines[0]}"
        print(f"rank {ctx.rank}: error: {detail}", file=sys.stderr, flush=True)
        if os.environ.get("SCALEBENCH_DEBUG"):
            traceback.print_exc()
        return 1


def _shape_per_link(ctx: Context) -> None:
    """Once gloo's connections are open, rank 0 gives each flow its own htb class."""
    import torch
    import torch.distributed as dist

    from real.netem import install_per_link, parse_rate

    dist.all_reduce(torch.zeros(1))  # every pair has talked: the connections exist
    if ctx.rank == 0:
        flows = install_per_link(parse_rate(ctx.job["link"]))
        print(f"rank 0: per-link shaping on {flows} flow directions", file=sys.stderr, flush=True)
    dist.barrier()


KIND_MODULES = {"train": "real.strategies", "comm": "real.bench_comm", "layer_profile": "real.profile_layers",
                "step_profile": "real.profile_layers", "interleaved": "real.bare_ddp",
                "grad_check": "real.strategies.hooks", "ps_async": "real.strategies.ps"}
"""The module each job kind runs from (imported before the process group forms)."""


def _preload(kind: str) -> None:
    """Import what the job will need before the rank joins its peers: torch's optimizers import
    torch._dynamo on first use (5 s and more on a loaded 2-core machine, seen here), which would
    otherwise land inside the first step and look like a hang to a short ``timeout_s``."""
    import importlib

    if kind in KIND_MODULES:
        importlib.import_module(KIND_MODULES[kind])
    if kind not in ("comm", "affinity_probe"):
        importlib.import_module("torch._dynamo")


def _dispatch(ctx: Context) -> dict[str, Any] | None:
    kind = ctx.job["kind"]
    if kind == "train":
        from real.strategies import run_training

        return run_training(ctx)
    if kind == "comm":
        from real.bench_comm import run_comm_bench

        return run_comm_bench(ctx)
    if kind == "layer_profile":
        from real.profile_layers import run_layer_profile

        return run_layer_profile(ctx)
    if kind == "step_profile":
        from real.profile_layers import run_step_profile

        return run_step_profile(ctx)
    if kind == "interleaved":
        from real.bare_ddp import run_interleaved

        return run_interleaved(ctx)
    if kind == "affinity_probe":  # tests: what each rank is really bound to
        import torch.distributed as dist

        mine = {"cpus": sorted(os.sched_getaffinity(0)), "omp": os.environ.get("OMP_PROC_BIND", "")}
        every: list[Any] = [None] * ctx.world
        dist.all_gather_object(every, mine)
        return {"affinities": [e["cpus"] for e in every], "omp_proc_bind": every[0]["omp"]}
    if kind == "grad_check":
        from real.strategies.hooks import run_grad_check

        return run_grad_check(ctx)
    if kind == "ps_async":
        from real.strategies.ps import run_async_ps

        return run_async_ps(ctx)
    raise ValueError(f"unknown job kind {kind!r}")


def main(argv: list[str]) -> None:
    parent = os.environ.get(PARENT_ENV)
    if parent and parent.isdigit():
        die_with_parent(int(parent))  # first: a launcher killed outright takes its ranks along
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <rank>`: its stacks, into its log
    job = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    exit_skipping_teardown(run_job(job))


if __name__ == "__main__":
    main(sys.argv)
