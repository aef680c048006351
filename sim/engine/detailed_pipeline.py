"""Detailed fidelity for dp x pp x tp layouts: ranks as processes, messages as flows.

Rank r = (d pp + s) tp + t (replica d, stage s, tensor rank t; ``sim.parallel``). A rank of a
simulated replica runs its stage's schedule (``sim.engine.pipeline.schedule_ops``: GPipe or 1F1B):
- a forward waits for its activation slice from rank (d, s-1, t), a backward for its gradient
  slice from (d, s+1, t); each rank sends its 1/t slice (``StagePlan.send_bytes`` / t) on
  its own send queue per direction, one message at a time (NCCL's p2p stream; the fast path's
  link process), each message a flow, so the t slices of a boundary share the links they cross;
- each layer computes 1/t of its work, then runs its tensor-parallel allreduces
  (``sim.costs.tensor``: count and message size) as ring allreduces over the ranks
  (d, s, 0..t-1), in forward and again in backward;
- after its last backward the rank reduces its stage's gradient shard over its data-parallel
  group (ranks (0..dp-1, s, t)) in DDP buckets, through the strategy's collective and codec
  (``sim.engine.detailed_sync``), then steps its optimizer.
Per-layer times, stage bounds, send sizes and optimizer times come from
``sim.engine.pipeline_plan`` (the fast path's plan); only the communication is per flow.

Two engines (``simulation.flow_engine``):
- ``auto`` / ``periodic`` (replicas): the replicas of a pipeline are identical until their
  gradients meet, so one replica (d = 0) is simulated as above, its p2p messages as flows on the
  network, its TP rings solved in closed form (sim.engine.periodic); every other replica's
  ranks run only their data-parallel sync, started at replica 0's flush of their (s, t) (its
  time is theirs). The DP rings of all replicas are solved as periodic schedules over the real
  network: each stage's t rings (one per tensor rank, the same buckets at the same moment) share
  its nodes' NICs and the fabric max-min at once, the ECMP collisions of their flows included.
  What it leaves out: traffic of other replicas' pipelines and TP groups (they run on their own
  nodes and GPU ports, the same as replica 0's; on a fabric their p2p flows could collide on
  cables too), and sharing between rings of different stages, or between a ring and p2p
  messages, that overlap in time (each stage's DP sync is solved with its own t rings; the
  fast path assumes every stage's sync on a node runs at once, the detailed run lets stages
  that flush one after another each have the links while the others still compute). 16,384
  GPUs in well under a minute (``scalebench bench --fidelity detailed``).
- ``event``: every rank of every replica a process, every message of every ring a flow (256 GPUs
  at most; its cost grows as GPUs^1.9): the reference the replica engine is checked against
  (tests/test_detailed_pipeline.py).
Where every node's links carry what the fast path's load counting assumes the engines agree with
it; elsewhere the detailed mode is the one that sees who shares a link at a given moment.
"""

from __future__ import annotations

from collections import defaultdict

import simpy

from sim.costs.comm import per_flow_cluster, ring_latency_for, spec_of
from sim.costs.elementwise import elementwise_times_s
from sim.costs.passes import layer_compute_s, pass_options, with_elementwise
from sim.costs.tensor import tp_allreduces_per_pass, tp_message_bytes
from sim.engine.detailed_collectives import Collectives
from sim.engine.detailed_sync import GradientSync, check_sync
from sim.engine.flows import ClusterNetwork, run_to_end
from sim.engine.periodic import PeriodicCollectives
from sim.engine.periodic_groups import GroupSharingCollectives
from sim.engine.pipeline import schedule_ops
from sim.engine.pipeline_plan import (
    PipelinePlan,
    StagePlan,
    build_pipeline_plan,
    micro_batch_times_s,
)
from sim.engine.plan import DDP_FIRST_BUCKET_BYTES, assign_buckets
from sim.errors import ConfigError
from sim.result import IterationResult, Span
from sim.scenario import Scenario
from sim.strategy import DTYPE_BYTES

TRACED_RANKS = 8


def check_detailed_pipeline(scenario: Scenario) -> None:
    check_sync(scenario)
    if scenario.strategy.collective == "ps":
        raise ConfigError("simulation.fidelity", "detailed",
                          f"fast for collective=ps with tp * pp > 1 or micro_batches > 1 (tp={scenario.strategy.tp}, "
                          f"pp={scenario.strategy.pp}): the detailed mode's servers serve one data-parallel group",
                          related=("strategy.collective", "strategy.tp", "strategy.pp", "strategy.micro_batches"))


class _Layout:
    """Rank numbering of ``sim.parallel``: rank = (d pp + s) tp + t."""

    def __init__(self, plan: PipelinePlan):
        self.dp, self.tp, self.pp = plan.dp, plan.tp, len(plan.stages)

    def rank(self, d: int, s: int, t: int) -> int:
        return (d * self.pp + s) * self.tp + t

    def coords(self, rank: int) -> tuple[int, int, int]:
        d, rest = divmod(rank, self.pp * self.tp)
        s, t = divmod(rest, self.tp)
        return d, s, t


class _SyncStep:
    """A rank's end of the iteration: its stage's gradient shard reduced over its data-parallel
    group, bucket by bucket, then its optimizer step."""

    run: _DetailedPipeline
    rank: int
    d: int
    s: int
    t: int
    stage: StagePlan
    traced: bool
    done: simpy.Process
    sync_busy_s: float
    end_s: float

    def _span(self, lane: str, name: str, start: float) -> None:
        if self.traced:
            self.run.spans.append(Span(f"rank{self.rank}/{lane}", name, start, self.run.env.now))

    def _comm_span(self, name: str, start: float) -> None:
        self._span("comm", name, start)

    def sync_and_step(self):
        run, env = self.run, self.run.env
        start = env.now
        members, concurrent = run.dp_groups[self.s][self.t], run.dp_groups[self.s]
        for index, n_bytes in enumerate(run.stage_buckets[self.s]):
            yield from run.sync.bucket(members, self.d, n_bytes, ("dp", self.s, self.t, index), self._comm_span,
                                       concurrent=concurrent)
        self.sync_busy_s = env.now - start
        if self.sync_busy_s > 0:
            self._span("comm", "dp gradient sync", start)
        start = env.now
        yield env.timeout(self.stage.optimizer_s * self.run.compute_scale)
        self._span("compute", "optimizer step", start)
        self.end_s = env.now


class _PipelineRank(_SyncStep):
    def __init__(self, run: _DetailedPipeline, rank: int):
        self.run, self.rank = run, rank
        self.d, self.s, self.t = run.layout.coords(rank)
        self.stage = run.plan.stages[self.s]
        env = run.env
        self.traced = rank < TRACED_RANKS
        self.outbox = {"F": simpy.Store(env), "B": simpy.Store(env)}
        self.send_busy_s = {"F": 0.0, "B": 0.0}
        self.tp_busy_s = 0.0
        self.sync_busy_s = 0.0
        self.flush_s = 0.0
        self.end_s = 0.0
        self.flushed = env.event()
        """Succeeds at this rank's flush: the other replicas' (s, t) ranks start their sync then."""
        for direction in ("F", "B"):
            env.process(self.sender(direction))
        self.done = env.process(self.work())

    def sender(self, direction: str):
        """This rank's send queue in one direction: one message at a time, in order."""
        env, messages = self.run.env, self.run.coll.messages
        while True:
            key, dst, n_bytes = yield self.outbox[direction].get()
            start = env.now
            yield messages.send(key, self.rank, dst, n_bytes)
            self.send_busy_s[direction] += env.now - start
            self._span("send", f"{key[0]}{key[-1]}", start)

    def pass_over_layers(self, op: str, mb: int):
        run, env = self.run, self.run.env
        lo, hi = self.stage.layers
        layers = range(lo, hi) if op == "F" else range(hi - 1, lo - 1, -1)
        tp_members = run.tp_groups[(self.d, self.s)]
        for i in layers:
            yield env.timeout(run.layer_s[i][0 if op == "F" else 1])
            for j in range(run.tp_count[i]):
                start = env.now
                yield from run.coll.ring_allreduce(tp_members, self.t, run.tp_bytes[i], ("tp", self.d, self.s, op, mb, i, j))
                self.tp_busy_s += env.now - start

    def work(self):
        run, env, s, layout = self.run, self.run.env, self.s, self.run.layout
        p = layout.pp
        slice_bytes = self.stage.send_bytes / layout.tp
        for op, mb in schedule_ops(run.plan.schedule, p, run.plan.micro_batches, s):
            if op == "F" and s > 0:
                yield run.coll.messages.arrival(("F", self.d, s, self.t, mb))
            if op == "B" and s < p - 1:
                yield run.coll.messages.arrival(("B", self.d, s, self.t, mb))
            start = env.now
            yield from self.pass_over_layers(op, mb)
            self._span("compute", f"{op}{mb}", start)
            if op == "F" and s < p - 1:
                self.outbox["F"].put((("F", self.d, s + 1, self.t, mb), layout.rank(self.d, s + 1, self.t), slice_bytes))
            if op == "B" and s > 0:
                prev = run.plan.stages[s - 1].send_bytes / layout.tp
                self.outbox["B"].put((("B", self.d, s - 1, self.t, mb), layout.rank(self.d, s - 1, self.t), prev))
        self.flush_s = env.now
        self.flushed.succeed()
        yield from self.sync_and_step()


class _ReplicaRank(_SyncStep):
    """A rank of a replica that is not simulated (d >= 1 with the replica engine): it flushes when
    replica 0's rank (0, s, t) does, then runs its own data-parallel sync and optimizer step."""

    def __init__(self, run: _DetailedPipeline, rank: int, twin: _PipelineRank):
        self.run, self.rank = run, rank
        self.d, self.s, self.t = run.layout.coords(rank)
        self.stage = run.plan.stages[self.s]
        self.traced = False
        self.twin = twin
        self.sync_busy_s = 0.0
        self.end_s = 0.0
        self.done = run.env.process(self.work())

    def work(self):
        yield self.twin.flushed
        yield from self.sync_and_step()


class _DetailedPipeline:
    def __init__(self, scenario: Scenario, compute_scale: float = 1.0):
        self.scenario = scenario
        self.compute_scale = compute_scale
        self.plan = plan = build_pipeline_plan(scenario)
        self.layout = layout = _Layout(plan)
        strategy, workload = scenario.strategy, scenario.workload
        dtype_bytes = DTYPE_BYTES[strategy.precision]
        micro_batch = workload.batch_size // strategy.micro_batches
        # each rank's share of a layer's compute, as the fast path splits it (sim.costs.passes), x the
        # slowest rank's factor
        options = pass_options(scenario)
        elementwise = elementwise_times_s(workload, micro_batch, scenario.cluster.gpu, dtype_bytes, options.flash)
        self.layer_s = [tuple(t * compute_scale for t in with_elementwise(*layer_compute_s(layer, f, b, options), ew, options))
                        for layer, (f, b), ew in zip(workload.layers, micro_batch_times_s(scenario, micro_batch, dtype_bytes),
                                                     elementwise, strict=True)]
        tp = strategy.tp
        self.tp_count = [tp_allreduces_per_pass(layer) if tp > 1 else 0 for layer in workload.layers]
        self.tp_bytes = [tp_message_bytes(layer, micro_batch, dtype_bytes) for layer in workload.layers]
        per_param = strategy.grad_bytes_per_param / tp
        self.stage_buckets: list[list[float]] = []
        for st in plan.stages:
            lo, hi = st.layers
            grads = [workload.layers[i].param_count * per_param for i in range(hi - 1, lo - 1, -1)]
            groups = assign_buckets(grads, strategy.bucket_bytes, DDP_FIRST_BUCKET_BYTES)
            self.stage_buckets.append([sum(grads[i] for i in group) for group in groups])
        self.replicas = scenario.flow_engine != "event"
        """Simulate replica 0 and solve every replica's DP rings (the replica engine), or every rank."""
        self.dp_groups = [[[layout.rank(d, s, t) for d in range(layout.dp)] for t in range(layout.tp)]
                          for s in range(layout.pp)]
        self.tp_groups = {(d, s): [layout.rank(d, s, t) for t in range(layout.tp)]
                          for d in range(1 if self.replicas else layout.dp) for s in range(layout.pp)}
        self.env = simpy.Environment()
        spec = spec_of(scenario.strategy)
        self.net = ClusterNetwork(self.env, per_flow_cluster(scenario.cluster, spec), seed=scenario.seed)
        latency = ring_latency_for(scenario.cluster, spec)
        self.coll: Collectives = Collectives(self.env, self.net, latency=latency)
        dp_coll = self.coll
        if self.replicas:  # TP rings in closed form; the stages' DP rings share links while they overlap
            self.coll = PeriodicCollectives(self.env, self.net, latency=latency)
            dp_coll = GroupSharingCollectives(self.env, self.net, latency=latency)
            # a message inside replica 0 (p2p, TP) stands for one in every replica
            self.net.replica_ranks, self.net.replicas = layout.pp * layout.tp, layout.dp
        self.sync = GradientSync(self.env, scenario, dp_coll)
        self.spans: list[Span] = []
        simulated = layout.pp * layout.tp if self.replicas else scenario.cluster.world_size
        self.ranks: list[_PipelineRank] = [_PipelineRank(self, r) for r in range(simulated)]
        self.mirrors = [_ReplicaRank(self, r, self.ranks[r % simulated])
                        for r in range(simulated, scenario.cluster.world_size)]


def run_detailed_pipeline(scenario: Scenario, compute_scale: float = 1.0) -> tuple[IterationResult, ClusterNetwork]:
    """One iteration of a dp x pp x tp layout: replica 0 simulated rank by rank, every replica's
    data-parallel rings on the network (or, with ``flow_engine: event``, every rank of every
    replica and every message), every compute time x ``compute_scale`` (the slowest rank's:
    sim.costs.stragglers)."""
    check_detailed_pipeline(scenario)
    run = _DetailedPipeline(scenario, compute_scale)
    env, plan = run.env, run.plan
    events = run_to_end(env)
    everyone: list[_SyncStep] = [*run.ranks, *run.mirrors]
    unfinished = [r.rank for r in everyone if not r.done.triggered]
    if unfinished:
        raise RuntimeError(f"detailed pipeline deadlocked: ranks {unfinished[:8]} never finished")
    m = plan.micro_batches
    busiest = max(plan.stages, key=lambda st: st.fwd_s + st.bwd_s)
    busy = m * (busiest.fwd_s + busiest.bwd_s)
    total = max(r.end_s for r in everyone)
    flush = max(r.flush_s for r in run.ranks)
    boundary_busy: dict[int, float] = defaultdict(float)  # activations forward + gradients back, per boundary
    for r in run.ranks:
        if r.s + 1 < run.layout.pp:
            back = run.ranks[run.layout.rank(r.d, r.s + 1, r.t)].send_busy_s["B"]
            boundary_busy[r.s] = max(boundary_busy[r.s], r.send_busy_s["F"] + back)
    result = IterationResult(
        world_size=scenario.cluster.world_size,
        batch_size=scenario.workload.batch_size,
        iteration_time_s=total,
        compute_time_s=busy + busiest.optimizer_s,
        exposed_comm_time_s=max(0.0, total - flush - busiest.optimizer_s),  # iteration - compute - bubble
        comm_time_s=max(r.sync_busy_s for r in everyone),
        forward_time_s=m * busiest.fwd_s,
        backward_time_s=m * busiest.bwd_s,
        optimizer_time_s=busiest.optimizer_s,
        bytes_by_link=dict(run.net.bytes_by_link),
        buckets=(),
        spans=tuple(run.spans),
        events=events,
        fidelity="detailed",
        data_parallel=plan.dp,
        codec_time_s=max((run.sync.codec_busy_s[r.rank] for r in everyone), default=0.0),
        bubble_time_s=flush - busy,
        tp_comm_time_s=max(r.tp_busy_s for r in run.ranks),
        pp_comm_time_s=max(boundary_busy.values(), default=0.0),
        flow_engine="replicas" if run.replicas else "event",
    )
    return result, run.net
