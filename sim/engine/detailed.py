"""Detailed fidelity: every rank, every message, links shared max-min fairly.

Every rank is a pair of SimPy processes, as in the fast path but not shared: a compute
stream (forward, backward in reverse, the optimizer step after its last bucket) and a
communication stream that reduces the buckets in order, one at a time. Per-layer times and
buckets come from ``sim.engine.plan.build_plan``; only the communication differs from the
fast path: each collective runs as the per-rank message schedule it names, on the flow
network of ``sim.engine.flows.ClusterNetwork``:
- ring: 2(n-1) steps over the ranks in node-major order; at step k rank i sends a chunk of
  S/n to i+1, and starts step k+1 once its own send is done and step k from i-1 has arrived
  (no global barrier between steps).
- hierarchical: an intra-node ring reduce-scatter of S/g chunks, then one inter-node ring
  allreduce of the rank's S/g shard per local rank (chunks S/(g nodes)), then an intra-node
  ring allgather; a single node or one GPU per node runs the flat ring, as the fast path does.
- ps: every worker pushes S/P to each of the P servers; a server answers each worker with S/P
  once it holds all n pushes of the bucket; a worker's bucket is done when all P answers are in.
The fast path's step-synchronous cost is the critical path of these schedules when ranks are
symmetric, so the two agree (tests/test_detailed.py); the detailed mode exists to check that,
and to run cases the fast path cannot (asymmetric placement, contention between collectives).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import simpy

from sim.config import Scenario
from sim.engine.flows import ClusterNetwork
from sim.engine.plan import Bucket, IterationPlan, build_plan
from sim.errors import ConfigError
from sim.result import BucketRecord, IterationResult, Span

MAX_DETAILED_WORLD_SIZE = 256
"""Beyond this the per-flow mode is slow and the fast path is the tool (identical ranks)."""
TRACED_RANKS = 8
"""Ranks whose compute and comm spans are recorded: traces of big clusters stay readable."""


class _Messages:
    """Point-to-point messages of the collectives, matched by key.

    ``send`` starts the transfer and returns the event that fires on delivery; ``arrival``
    returns the same event for the receiver, whether or not the send has started yet.
    """

    def __init__(self, env: simpy.Environment, net: ClusterNetwork):
        self.env = env
        self.net = net
        self._slots: dict[Any, simpy.Event] = {}

    def _slot(self, key: Any) -> simpy.Event:
        slot = self._slots.pop(key, None)
        if slot is None:  # first of the two sides to ask: keep it for the other one
            slot = self._slots[key] = self.env.event()
        return slot

    def send(self, key: Any, src: int, dst: int, n_bytes: float) -> simpy.Event:
        return self.net.transfer(src, dst, n_bytes, done=self._slot(key))

    def arrival(self, key: Any) -> simpy.Event:
        return self._slot(key)


class _RingPart:
    """One rank's steps of a ring, advanced by the callbacks of its messages."""

    __slots__ = ("messages", "me", "succ", "pos", "pred", "steps", "chunk_bytes", "tag", "k", "waiting", "done")

    def __init__(self, messages: _Messages, members: list[int], pos: int, steps: int, chunk_bytes: float, tag: Any):
        m = len(members)
        self.messages = messages
        self.me, self.succ = members[pos], members[(pos + 1) % m]
        self.pos, self.pred = pos, (pos - 1) % m
        self.steps, self.chunk_bytes, self.tag = steps, chunk_bytes, tag
        self.k = 0
        self.waiting = 0
        self.done = messages.env.event()
        self._step()

    def _step(self) -> None:
        if self.k == self.steps:
            self.done.succeed()
            return
        key = (self.tag, self.k)
        sent = self.messages.send((key, self.pos), self.me, self.succ, self.chunk_bytes)
        received = self.messages.arrival((key, self.pred))
        self.waiting = 2
        for event in (sent, received):
            if event.callbacks is None:  # already processed
                self._one_done(event)
            else:
                event.callbacks.append(self._one_done)

    def _one_done(self, _event: simpy.Event) -> None:
        self.waiting -= 1
        if self.waiting == 0:
            self.k += 1
            self._step()


Schedule = Callable[["_Collective", int, Bucket], Generator[simpy.Event, Any, None]]


class _Collective:
    """The per-rank message schedules of the gradient reduction, on one network."""

    def __init__(self, env: simpy.Environment, scenario: Scenario, net: ClusterNetwork):
        self.env = env
        self.cluster = scenario.cluster
        self.servers = scenario.strategy.ps_servers
        self.net = net
        self.messages = _Messages(env, net)

    def ring(self, members: list[int], pos: int, steps: int, chunk_bytes: float, tag: Any) -> simpy.Event:
        """This rank's part of ``steps`` ring steps over ``members`` (it is ``members[pos]``).

        Step k sends a chunk to the successor; step k+1 starts once that send is done and
        step k from the predecessor has arrived. Driven by callbacks (no process per step):
        the returned event fires when the last step is complete.
        """
        return _RingPart(self.messages, members, pos, steps, chunk_bytes, tag).done

    def ring_allreduce(self, rank: int, bucket: Bucket):
        n = self.cluster.world_size
        yield self.ring(list(range(n)), rank, 2 * (n - 1), bucket.n_bytes / n, (bucket.index, "ring"))

    def hierarchical_allreduce(self, rank: int, bucket: Bucket):
        g, nodes = self.cluster.gpus_per_node, self.cluster.nodes
        if g == 1 or nodes == 1:
            yield from self.ring_allreduce(rank, bucket)
            return
        node, local = divmod(rank, g)
        in_node = [node * g + i for i in range(g)]
        across = [d * g + local for d in range(nodes)]
        shard = bucket.n_bytes / g
        yield self.ring(in_node, local, g - 1, shard, (bucket.index, "reduce_scatter", node))
        yield self.ring(across, node, 2 * (nodes - 1), shard / nodes, (bucket.index, "allreduce", local))
        yield self.ring(in_node, local, g - 1, shard, (bucket.index, "allgather", node))

    def ps_worker(self, rank: int, bucket: Bucket):
        n, shard = self.cluster.world_size, bucket.n_bytes / self.servers
        pushes = [self.messages.send((bucket.index, "push", rank, p), rank, n + p, shard)
                  for p in range(self.servers)]
        pulls = [self.messages.arrival((bucket.index, "pull", p, rank)) for p in range(self.servers)]
        yield from pushes + pulls

    def ps_server(self, p: int, buckets: tuple[Bucket, ...]):
        """Server p: for each bucket in order, wait for every worker's push, then answer all."""
        n = self.cluster.world_size
        for bucket in buckets:
            if bucket.n_bytes <= 0:
                continue
            for rank in range(n):
                yield self.messages.arrival((bucket.index, "push", rank, p))
            shard = bucket.n_bytes / self.servers
            for rank in range(n):
                self.messages.send((bucket.index, "pull", p, rank), n + p, rank, shard)


SCHEDULES: dict[str, Schedule] = {
    "ring": _Collective.ring_allreduce,
    "hierarchical": _Collective.hierarchical_allreduce,
    "ps": _Collective.ps_worker,
}


class _Rank:
    """One rank's compute stream and communication stream (the fast path's, per rank)."""

    def __init__(self, env: simpy.Environment, rank: int, plan: IterationPlan, collective: _Collective,
                 schedule: Schedule | None, log: list[tuple[float, str]]):
        self.env = env
        self.rank = rank
        self.plan = plan
        self.collective = collective
        self.schedule = schedule
        self.traced = rank < TRACED_RANKS
        self.log = log
        self.spans: list[Span] = []
        self.ready: simpy.Store = simpy.Store(env)
        self.ready_at: dict[int, float] = {}
        self.comm_window: dict[int, tuple[float, float]] = {}
        self.comm_busy_s = 0.0
        self.comm_done = env.event()
        self.end_s = 0.0
        env.process(self.communicate())
        self.done = env.process(self.compute())

    def _span(self, lane: str, name: str, start: float) -> None:
        if self.traced:
            lane = f"rank{self.rank}/{lane}"
            self.spans.append(Span(lane, name, start, self.env.now))
            self.log.append((self.env.now, f"{lane}:{name}"))

    def compute(self):
        env, plan = self.env, self.plan
        for name, t in zip(plan.layer_names, plan.fwd_s, strict=True):
            start = env.now
            yield env.timeout(t)
            self._span("compute", f"fwd {name}", start)
        bucket_of = {b.layers[-1]: b for b in plan.buckets}
        deferred = []
        for i in range(len(plan.layer_names) - 1, -1, -1):
            start = env.now
            yield env.timeout(plan.bwd_s[i])
            self._span("compute", f"bwd {plan.layer_names[i]}", start)
            if i in bucket_of:
                bucket = bucket_of[i]
                self.ready_at[bucket.index] = env.now
                if plan.overlap:
                    yield self.ready.put(bucket)
                else:
                    deferred.append(bucket)
        for bucket in deferred:
            yield self.ready.put(bucket)
        yield self.comm_done
        start = env.now
        yield env.timeout(plan.optimizer_s)
        self._span("compute", "optimizer step", start)
        self.end_s = env.now

    def communicate(self):
        env = self.env
        for _ in self.plan.buckets:
            bucket = yield self.ready.get()
            start = env.now
            if self.schedule is not None and bucket.n_bytes > 0:
                yield from self.schedule(self.collective, self.rank, bucket)
            self.comm_window[bucket.index] = (start, env.now)
            self.comm_busy_s += env.now - start
            self._span("comm", f"bucket {bucket.index}", start)
        self.comm_done.succeed()


def check_detailed(scenario: Scenario) -> None:
    """Refuse what the detailed mode does not model, naming the alternative."""
    n, collective = scenario.cluster.world_size, scenario.strategy.collective
    if n > MAX_DETAILED_WORLD_SIZE:
        raise ConfigError("cluster.gpus", n, f"at most {MAX_DETAILED_WORLD_SIZE} with simulation.fidelity=detailed "
                          "(use fidelity fast for larger clusters)")
    if collective not in SCHEDULES:
        raise ConfigError("simulation.fidelity", "detailed",
                          f"fast for collective={collective} (the detailed mode has per-rank schedules for "
                          + ", ".join(SCHEDULES) + ")")


def run_detailed(scenario: Scenario) -> IterationResult:
    """One iteration of ``scenario`` with every rank and every message simulated."""
    return run_detailed_with_network(scenario)[0]


def run_detailed_with_network(scenario: Scenario) -> tuple[IterationResult, ClusterNetwork]:
    """``run_detailed`` and the network it ran on (per-endpoint byte counts, flow counts)."""
    check_detailed(scenario)
    plan = build_plan(scenario)
    cluster, strategy = scenario.cluster, scenario.strategy
    n = cluster.world_size
    env = simpy.Environment()
    servers = strategy.ps_servers if strategy.collective == "ps" and n > 1 else 0
    net = ClusterNetwork(env, cluster, servers=servers)
    collective = _Collective(env, scenario, net)
    schedule = SCHEDULES[strategy.collective] if n > 1 else None
    log: list[tuple[float, str]] = []
    ranks = [_Rank(env, r, plan, collective, schedule, log) for r in range(n)]
    for p in range(servers):
        env.process(collective.ps_server(p, plan.buckets))
    events = 0
    while env.peek() != float("inf"):
        env.step()
        events += 1
    unfinished = [r.rank for r in ranks if not r.done.triggered]
    if unfinished:
        raise RuntimeError(f"detailed run deadlocked: ranks {unfinished[:8]} never finished")
    total = max(r.end_s for r in ranks)
    names = plan.layer_names
    records = tuple(
        BucketRecord(b.index, b.n_bytes, names[b.layers[0]], names[b.layers[-1]], ranks[0].ready_at[b.index],
                     min(r.comm_window[b.index][0] for r in ranks), max(r.comm_window[b.index][1] for r in ranks))
        for b in plan.buckets
    )
    spans = tuple(s for r in ranks[:TRACED_RANKS] for s in r.spans)
    result = IterationResult(
        world_size=n,
        batch_size=scenario.workload.batch_size,
        iteration_time_s=total,
        compute_time_s=plan.compute_s,
        exposed_comm_time_s=max(0.0, total - plan.compute_s),
        comm_time_s=max(r.comm_busy_s for r in ranks),
        forward_time_s=sum(plan.fwd_s),
        backward_time_s=sum(plan.bwd_s),
        optimizer_time_s=plan.optimizer_s,
        bytes_by_link=dict(net.bytes_by_link),
        buckets=records,
        spans=spans,
        events=events,
        fidelity="detailed",
        log=tuple(sorted(log, key=lambda entry: entry[0])),
    )
    return result, net
