"""Each rank on cores of its own, bound before torch starts its threads.

Observed on this machine (2 vCPUs under KVM, `python` loop of the seeds' MLP step, batch 64,
each step started after a gloo barrier, medians of 200-step blocks): one thread pinned to one
CPU runs the step in 0.17-0.18 ms, unpinned in 0.27 ms (woken by gloo's thread, it lands on the
other vCPU with cold caches); with two OpenMP threads the unpinned step flips between 0.19 and
0.25 ms inside one launch, and OMP_PROC_BIND=true holds it at 0.19. A per-launch lottery of
1.5x on a sub-millisecond step is more than the whole error budget of the validation, and the
calibration's launches and the measured points drew it independently.

So rank r of k local ranks with t threads each gets the t CPUs starting at (r x t) mod C of the
C CPUs this process may use (k <= C: disjoint sets; k > C: ranks r and r + C share), and
OpenMP binds its threads to them (OMP_PROC_BIND=true, read when torch loads libgomp): where a
rank runs several threads or ranks outnumber CPUs. With 4 ranks on 2 CPUs, bound, a 1 KiB
allreduce takes 1.05 ms where unbound ones read ~5 ms with an IQR as large. One single-threaded
rank per CPU stays unbound (``worth_binding``). This is
what torch's own CPU launcher does (``python -m torch.backends.xeon.run_cpu --ninstances N
--ncores-per-instance T``: taskset/numactl per instance, OpenMP thread affinity); torchrun's
--numa-binding binds to the CPUs near a GPU. SCALEBENCH_BIND_CORES=0 turns it off.
"""

from __future__ import annotations

import os
import sys

BIND_ENV = "SCALEBENCH_BIND_CORES"
BIND_VALUES = {"1": True, "0": False}  # what it may be set to: bind or not


def rank_cpus(local_rank: int, local_world: int, threads: int, cpus: list[int]) -> list[int]:
    """The CPUs of ``local_rank``: ``threads`` consecutive ones of ``cpus`` from (rank x threads)
    mod len(cpus), wrapping around."""
    if not cpus:
        raise ValueError("no CPUs to bind to")
    if not 0 <= local_rank < local_world:
        raise ValueError(f"local_rank {local_rank} outside 0..{local_world - 1}")
    count = min(max(1, threads), len(cpus))
    start = local_rank * count
    return sorted({cpus[(start + i) % len(cpus)] for i in range(count)})


def binding_enabled() -> bool:
    """SCALEBENCH_BIND_CORES: 1 (the default, also when unset or empty) binds, 0 does not; any
    other value is refused, so that a typo ("off", "false") cannot leave the ranks bound."""
    value = os.environ.get(BIND_ENV, "").strip() or "1"
    if value not in BIND_VALUES:
        # imported only here: importing sim loads numpy, whose threads would start before the rank binds
        from sim.errors import ConfigError

        raise ConfigError(BIND_ENV, value, "1 (bind each rank to its own cores, the default) or 0 (no binding)")
    return BIND_VALUES[value] and hasattr(os, "sched_setaffinity")


def describe(local_world: int, threads: int, cpus: list[int]) -> str:
    """The whole map, for the rows: "rank:cpus" per rank, e.g. "0:0 1:1 2:0 3:1"."""
    return " ".join(f"{r}:{','.join(map(str, rank_cpus(r, local_world, threads, cpus)))}" for r in range(local_world))


def worth_binding(local_world: int, threads: int, n_cpus: int) -> bool:
    """Not for single-threaded ranks that each have a CPU to themselves: bound, gloo's own
    threads (its TCP loop, its runloops) must share the rank's one CPU and every wait halts that
    vCPU; unbound they spill onto the other. Measured here, 2 ranks on 2 CPUs, ten 256 KiB
    allreduces back to back: 12.1-12.6 ms bound, 3.9-5.1 ms unbound; a 1 KiB sendrecv read 4 ms
    in some bound launches and 0.13-0.2 ms in others."""
    return threads > 1 or local_world > n_cpus


def bind_rank(local_rank: int, local_world: int, threads: int) -> str | None:
    """Bind this process (the calling thread and every thread it starts later) to its CPUs; the
    map of every local rank (``describe``), or None when turned off, not worth it
    (``worth_binding``) or where the OS cannot."""
    if not binding_enabled():
        return None
    allowed = sorted(os.sched_getaffinity(0))
    if not worth_binding(local_world, threads, len(allowed)):
        return None
    cpus = rank_cpus(local_rank, local_world, threads, allowed)
    os.sched_setaffinity(0, cpus)
    if "torch" not in sys.modules:  # libgomp reads it once, when torch loads it
        os.environ.setdefault("OMP_PROC_BIND", "true")
    return describe(local_world, threads, allowed)


def bind_from_env(threads: int) -> str | None:
    """``bind_rank`` for a rank process started with LOCAL_RANK/RANK and LOCAL_WORLD_SIZE/WORLD_SIZE."""
    env = os.environ
    rank = int(env.get("LOCAL_RANK", env.get("RANK", "0")))
    world = int(env.get("LOCAL_WORLD_SIZE", env.get("WORLD_SIZE", "1")))
    return bind_rank(rank, world, threads)
