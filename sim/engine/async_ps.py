"""Asynchronous parameter servers: one SimPy process per worker, because workers differ.

Each worker loops: pull the parameters from every server, compute forward and backward (its own
speed, its own jitter), push the gradients, and wait until every server has applied them. A
server's NIC (one per direction) and its update compute serve requests one at a time in the
order they are made (first-come first-served; over a run this moves the same bytes per second
as fair sharing, which is what contention costs); a worker node's NIC likewise. A pull ends when
the slower of the server side and the worker side has delivered it. The global version counts
applied updates; an update's staleness is how many other updates were applied between the
worker's read and its own (Dean et al. 2012 'Downpour SGD'; Zhang et al. 2016).

Resources are reserved by arithmetic on "free at" times, not simpy.Resource requests: two
timeouts per worker step keep 1,024 workers x 100 steps fast (scalebench bench).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import simpy


@dataclass(frozen=True)
class AsyncPlan:
    compute_s: np.ndarray
    """(steps, workers): forward + backward seconds of each worker's step (speed x jitter)."""
    server_bytes: tuple[float, ...]
    """Bytes each server holds, pulled as parameters and pushed back as gradients."""
    server_Bps: float
    """Effective bandwidth of a server NIC, per direction."""
    worker_Bps: float
    """Effective bandwidth of a worker node's NICs, per direction, shared by the node's workers."""
    alpha_s: float
    update_s: tuple[float, ...]
    """Each server's optimizer step on its bytes."""
    gpus_per_node: int
    fail_rank: int | None = None
    fail_at_s: float = math.inf
    max_staleness: int | None = None
    """Stale synchronous parallel bound in steps; None: fully asynchronous."""


@dataclass(frozen=True)
class AsyncRun:
    wall_time_s: float
    steps_done: np.ndarray
    """Completed (applied) steps per worker."""
    staleness: np.ndarray
    """Staleness of every applied update, in application order."""
    applied_s: np.ndarray
    """When each update was applied (same order)."""
    finish_s: np.ndarray
    """When each worker finished its last step (inf for a failed worker)."""
    lost_work_s: float
    """Compute and transfer time of the failed worker's step that never reached the servers."""
    events: int


class _Servers:
    """Free-at times of every server NIC (in, out), server compute and worker node NIC."""

    def __init__(self, plan: AsyncPlan, workers: int):
        self.plan = plan
        nodes = -(-workers // plan.gpus_per_node)
        # per server: (bytes, NIC seconds per transfer, update seconds). Every request goes to
        # every server in the same order, so servers holding equal shards have identical
        # free-at times: one of them stands for all (exact, and O(1) per request).
        self.servers = [(size, size / plan.server_Bps, upd) for size, upd in zip(plan.server_bytes, plan.update_s, strict=True)]
        if len(set(self.servers)) == 1:
            self.servers = self.servers[:1]
        self.out_free = [0.0] * len(self.servers)
        self.in_free = [0.0] * len(self.servers)
        self.cpu_free = [0.0] * len(self.servers)
        self.node_in_free = [0.0] * nodes
        self.node_out_free = [0.0] * nodes
        self.node_s = sum(plan.server_bytes) / plan.worker_Bps
        self.alpha_s = plan.alpha_s
        self.version = 0
        self.staleness: list[int] = []
        self.applied_s: list[float] = []

    def pull_done_at(self, now: float, node: int) -> float:
        end = now
        out_free = self.out_free
        for p, (_, nic_s, _) in enumerate(self.servers):
            free = out_free[p]
            out_free[p] = free = (free if free > now else now) + nic_s
            if free > end:
                end = free
        free = self.node_in_free[node]
        self.node_in_free[node] = free = (free if free > now else now) + self.node_s
        return (end if end > free else free) + self.alpha_s

    def push_applied_at(self, now: float, node: int) -> float:
        free = self.node_out_free[node]
        self.node_out_free[node] = sent = (free if free > now else now) + self.node_s
        end = now
        in_free, cpu_free, alpha = self.in_free, self.cpu_free, self.alpha_s
        for p, (_, nic_s, update_s) in enumerate(self.servers):
            free = in_free[p]
            in_free[p] = free = (free if free > now else now) + nic_s
            arrived = (free if free > sent else sent) + alpha
            busy = cpu_free[p]
            cpu_free[p] = busy = (busy if busy > arrived else arrived) + update_s
            if busy > end:
                end = busy
        return end


class _StepBound:
    """Stale synchronous parallel (Ho et al. 2013, 'More Effective Distributed ML via a Stale
    Synchronous Parallel Parameter Server'): a worker may start step k only while
    k - (steps done by the slowest live worker) <= bound. ``reached[k]`` counts live workers
    that have done at least k steps, so the slowest's count advances in amortised O(1)."""

    def __init__(self, env: simpy.Environment, workers: int, steps: int, bound: int):
        self.env, self.bound, self.alive = env, bound, workers
        self.reached = [workers] + [0] * (steps + 1)
        self.slowest = 0
        self.advanced = env.event()

    def finished(self, done: int) -> None:
        self.reached[done] += 1
        self._advance()

    def left(self, done: int) -> None:
        """A failed worker no longer holds the others back."""
        for k in range(done + 1):
            self.reached[k] -= 1
        self.alive -= 1
        self._advance()

    def _advance(self) -> None:
        moved = False
        while self.slowest + 1 < len(self.reached) and self.reached[self.slowest + 1] >= self.alive:
            self.slowest += 1
            moved = True
        if moved:
            event, self.advanced = self.advanced, self.env.event()
            event.succeed()


def run_async_ps(plan: AsyncPlan) -> AsyncRun:
    steps, workers = plan.compute_s.shape
    env = simpy.Environment()
    servers = _Servers(plan, workers)
    done = [0] * workers
    lost = [0.0]
    events = [0]
    finish = [math.inf] * workers
    columns = plan.compute_s.T.tolist()  # python floats: numpy scalars are slow in this loop
    bound = None if plan.max_staleness is None else _StepBound(env, workers, steps, plan.max_staleness)

    def worker(w: int):
        node = w // plan.gpus_per_node
        deadline = plan.fail_at_s if w == plan.fail_rank else math.inf
        timeout, pull, push = env.timeout, servers.pull_done_at, servers.push_applied_at
        for k, compute_s in enumerate(columns[w]):
            while bound is not None and k - bound.slowest > bound.bound:
                events[0] += 1
                yield bound.advanced
            begun = env.now
            read = servers.version
            # the pull (server and node NICs) then the computation: nothing shared in between
            yield timeout(pull(begun, node) - begun + compute_s)
            pushed = env.now
            if pushed >= deadline:
                lost[0] = deadline - begun
                events[0] += 1 + 2 * done[w]
                if bound is not None:
                    bound.left(done[w])
                return
            yield timeout(push(pushed, node) - pushed)
            servers.staleness.append(servers.version - read)
            servers.applied_s.append(env.now)
            servers.version += 1
            done[w] += 1
            if bound is not None:
                bound.finished(done[w])
        events[0] += 2 * done[w]
        finish[w] = env.now

    for w in range(workers):
        env.process(worker(w))
    env.run()
    return AsyncRun(env.now, np.asarray(done, dtype=np.int64), np.asarray(servers.staleness, dtype=np.int64),
                    np.asarray(servers.applied_s), np.asarray(finish), lost[0], events[0])
