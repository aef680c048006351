"""Detailed fidelity: every rank, every message, links shared max-min fairly.

Every rank has a communication stream that reduces the buckets in order, one at a time. Per-layer
times and buckets come from ``sim.engine.plan.build_plan``, the same for every rank, so the
compute stream (forward, backward in reverse, the optimizer step after the last bucket) runs once
per traced rank and once more as the *envelope*, whose optimizer waits for every rank's last
bucket: its end is the iteration's (a rank's end is monotone in when its comm stream finishes).
Untraced ranks run only their comm streams, fed the buckets as rank 0 hands them over.
Only the communication differs from the fast path: each bucket runs as per-rank message schedules
(``sim.engine.detailed_collectives``: ring, hierarchical, ps) on the flow network of
``sim.engine.flows.ClusterNetwork`` (a single switch, or a fabric: ``cluster.topology``), through
the strategy's codec and codec path (``sim.engine.detailed_sync``: encode, decode and local sums
as device time where they happen: the encode on the compute stream at the hand-off, the rest on
the rank's comm stream).

Two flow engines (``simulation.flow_engine``):
- event: every message an event, rates re-shared as flows start and end (sim.engine.flows);
- periodic: rings as periodic schedules, solved in closed form (sim.engine.periodic), the same
  answer where flows of different edges do not share links or share them in phase, and thousands
  of times faster (16,384 ranks in seconds);
- auto (the default): periodic for rings (ring, hierarchical, the codecs' rings), event for
  parameter servers (and pipelines: sim.engine.detailed_pipeline).
The fast path's step-synchronous cost is the critical path of these schedules when ranks are
symmetric, so the two agree (tests/test_detailed*.py); the detailed mode exists to check that,
and to run cases the fast path cannot (ECMP collisions, asymmetric placement, contention).
"""

from __future__ import annotations

import simpy

from sim.costs.comm import per_flow_cluster, ring_latency_for, spec_of
from sim.engine.attribution import exposed_terms
from sim.engine.detailed_collectives import Collectives
from sim.engine.detailed_scope import check_strategy_scope
from sim.engine.detailed_sync import GradientSync, check_sync, detailed_collective, uses_collective
from sim.engine.flows import ClusterNetwork, run_to_end
from sim.engine.plan import IterationPlan, build_plan
from sim.engine.streams import RankStreams
from sim.errors import ConfigError
from sim.result import BucketRecord, IterationResult, LinkStat, Span
from sim.scenario import Scenario

MAX_EVENT_WORLD_SIZE = 256
"""The event engine's limit (a 256-rank ring of ResNet-50 takes seconds; it grows as n^2);
periodic rings go further, and the fast path is the tool beyond (identical ranks)."""
MAX_DETAILED_WORLD_SIZE = 65536
"""Periodic rings, and pipelines by replicas: 16,384 ranks take well under a minute
(docs/topology.md's scale table)."""
FLOW_ENGINES = ("auto", "event", "periodic")
TRACED_RANKS = 8
"""Ranks whose compute and comm spans are recorded: traces of big clusters stay readable."""


class _Handoffs:
    """Rank 0's hand-offs, in order, for the ranks that run no compute stream of their own."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.events: list[simpy.Event] = []
        self.count = 0

    def get(self, k: int) -> simpy.Event:
        while len(self.events) <= k:
            self.events.append(self.env.event())
        return self.events[k]

    def put(self, item) -> None:
        self.get(self.count).succeed(item)
        self.count += 1


class _BroadcastStore(simpy.Store):
    """Rank 0's ready queue: every bucket put here is also handed to the other ranks."""

    def __init__(self, env: simpy.Environment, handoffs: _Handoffs):
        super().__init__(env)
        self.handoffs = handoffs

    def _do_put(self, event):
        done = super()._do_put(event)
        self.handoffs.put(event.item)
        return done


class _Rank(RankStreams):
    """One rank's communication stream, and for traced ranks its compute stream (the fast path's,
    per rank)."""

    honors_release = False  # the detailed mode starts a bucket as soon as it is handed over

    def __init__(self, env: simpy.Environment, rank: int, plan: IterationPlan, sync: GradientSync,
                 members: list[int], log: list[tuple[float, str]], handoffs: _Handoffs):
        super().__init__(env, plan, log)
        self.rank = rank
        self.sync = sync
        self.members = members
        self.traced = rank < TRACED_RANKS
        self.handoffs = handoffs
        self.comm_window: dict[int, tuple[float, float]] = {}
        self.comm_busy_s = 0.0
        if rank == 0:
            self.ready = _BroadcastStore(env, handoffs)
        if self.traced:
            self.start()
        else:
            env.process(self.communicate())

    def _span(self, lane: str, name: str, start: float, detail: str = "") -> None:
        if self.traced:
            lane = f"rank{self.rank}/{lane}"
            self.spans.append(Span(lane, name, start, self.env.now, detail))
            self.log.append((self.env.now, f"{lane}:{name}"))

    def _comm_span(self, name: str, start: float) -> None:
        self._span("comm", name, start)

    def communicate(self):
        env, coll = self.env, self.sync.coll
        for k in range(len(self.plan.buckets)):
            bucket = yield (self.ready.get() if self.traced else self.handoffs.get(k))
            start = env.now
            self.comm_started(bucket)
            yield from self.sync.bucket(self.members, self.rank, bucket.n_bytes, bucket.index, self._comm_span,
                                        encoded=bool(self.plan.bucket_encode_s))
            self.comm_busy, self.footprint = False, None
            self.comm_window[bucket.index] = (start, env.now)
            self.comm_busy_s += env.now - start
            if self.traced:
                delay = coll.delays.pop(self.rank, None)
                detail = "" if delay is None else (f"rank {delay.src} -> {delay.dst} at {delay.rate_Bps / 1e9:.3g} GB/s, "
                                                   f"held by {delay.link}")
                self._span("comm", f"bucket {bucket.index}", start, detail)
        self.comm_done.succeed()


class _Envelope(RankStreams):
    """The compute stream once more, its optimizer waiting for every rank's last bucket."""

    def __init__(self, env: simpy.Environment, plan: IterationPlan, ranks: list[_Rank]):
        super().__init__(env, plan, [])
        self.ranks = ranks
        self.start()

    def _span(self, lane: str, name: str, start: float) -> None:
        pass

    def communicate(self):
        yield simpy.AllOf(self.env, [r.comm_done for r in self.ranks])
        self.comm_done.succeed()

    def comm_schedule(self):
        """Rank 0's collectives slow this compute stream as they slow rank 0's (the ranks are alike)."""
        return self.ranks[0].comm_schedule()


def check_detailed(scenario: Scenario) -> None:
    """Refuse what the detailed mode does not model, naming the alternative (sim.config's
    validate_scenario calls this, so a sweep finds such points before it runs them)."""
    _refuse_fast_only_fields(scenario)
    n = scenario.cluster.world_size
    engine = scenario.flow_engine
    if engine not in FLOW_ENGINES:
        raise ConfigError("simulation.flow_engine", engine, FLOW_ENGINES)
    check_strategy_scope(scenario.strategy)
    limit = MAX_DETAILED_WORLD_SIZE
    if engine == "event" or not _ring_based(scenario):
        limit = MAX_EVENT_WORLD_SIZE
    if n > limit:
        what = "the event engine" if limit == MAX_EVENT_WORLD_SIZE else "simulation.fidelity=detailed"
        raise ConfigError("cluster.gpus", n, f"at most {limit} with {what} (periodic rings and pipelines by replicas "
                          "take ring, hierarchical and codec rings further; use fidelity fast for larger clusters)",
                          related=("simulation.fidelity",))
    if scenario.strategy.model_parallel or scenario.strategy.micro_batches > 1:
        from sim.engine.detailed_pipeline import check_detailed_pipeline

        check_detailed_pipeline(scenario)
    else:
        check_sync(scenario)


def _refuse_fast_only_fields(scenario: Scenario) -> None:
    """The large-model fields (sim.strategy.LLM_FIELDS) the detailed mode does not simulate per
    flow: any of them away from its default is refused, naming fidelity fast (attention is each
    layer's compute, which both modes share)."""
    from sim.strategy import LLM_FIELDS, Strategy

    default = Strategy()
    for field in LLM_FIELDS:
        value, plain = getattr(scenario.strategy, field), getattr(default, field)
        if field != "attention" and value != plain:
            raise ConfigError(f"strategy.{field}", value, f"{plain} with simulation.fidelity detailed (the detailed mode "
                              "does not simulate it per flow; use fidelity: fast)", related=("simulation.fidelity",))


def _ring_based(scenario: Scenario) -> bool:
    return not (detailed_collective(scenario.strategy.collective) == "ps" and uses_collective(scenario))


def run_detailed(scenario: Scenario, compute_scale: float = 1.0) -> IterationResult:
    """One iteration of ``scenario`` with every rank and every message simulated, every compute
    time x ``compute_scale`` (the slowest rank's: sim.costs.stragglers)."""
    return run_detailed_with_network(scenario, compute_scale)[0]


def _collectives(env: simpy.Environment, net: ClusterNetwork, scenario: Scenario, members: list[int]) -> Collectives:
    """The event engine's collectives or the periodic engine's, as ``simulation.flow_engine`` says,
    their rings paced by the library's latency (sim.costs.comm.ring_latency)."""
    from sim.engine.periodic import PeriodicCollectives

    latency = ring_latency_for(scenario.cluster, spec_of(scenario.strategy))
    if scenario.flow_engine == "event" or not _ring_based(scenario) or len(members) == 1:
        return Collectives(env, net, traced=TRACED_RANKS, latency=latency)
    return PeriodicCollectives(env, net, traced=TRACED_RANKS, latency=latency)


def run_detailed_with_network(scenario: Scenario, compute_scale: float = 1.0) -> tuple[IterationResult, ClusterNetwork]:
    """``run_detailed`` and the network it ran on (per-endpoint byte counts, flow counts)."""
    check_detailed(scenario)
    if scenario.strategy.model_parallel or scenario.strategy.micro_batches > 1:
        from sim.engine.detailed_pipeline import run_detailed_pipeline

        return run_detailed_pipeline(scenario, compute_scale)
    plan = build_plan(scenario).scaled(compute_scale)
    cluster, strategy = scenario.cluster, scenario.strategy
    n = cluster.world_size
    env = simpy.Environment()
    servers = strategy.ps_servers if strategy.collective == "ps" and uses_collective(scenario) and n > 1 else 0
    net = ClusterNetwork(env, per_flow_cluster(cluster, spec_of(strategy)), servers=servers, seed=scenario.seed)
    members = list(range(n))
    coll = _collectives(env, net, scenario, members)
    sync = GradientSync(env, scenario, coll)
    log: list[tuple[float, str]] = []
    handoffs = _Handoffs(env)
    ranks = [_Rank(env, r, plan, sync, members, log, handoffs) for r in range(n)]
    envelope = _Envelope(env, plan, ranks)
    reductions = [(b.index, sync.collective_bytes(b.n_bytes)) for b in plan.buckets]
    for p in range(servers):
        env.process(sync.coll.ps_server(p, reductions, servers, members))
    events = run_to_end(env)
    unfinished = [r.rank for r in ranks if not r.comm_done.triggered]
    if unfinished or not envelope.done.triggered:
        raise RuntimeError(f"detailed run deadlocked: ranks {unfinished[:8]} never finished")
    total = envelope.end_s
    names = plan.layer_names
    records = tuple(
        BucketRecord(b.index, b.n_bytes, names[b.layers[0]], names[b.layers[-1]], ranks[0].ready_at[b.index],
                     min(r.comm_window[b.index][0] for r in ranks), max(r.comm_window[b.index][1] for r in ranks))
        for b in plan.buckets
    )
    spans = tuple(s for r in ranks[:TRACED_RANKS] for s in r.spans)
    compute = plan.compute_s + plan.iteration_overhead_s
    terms = {}
    if plan.bucket_terms:
        runs = [(rec.start_s, rec.end_s) for rec in records]
        terms = exposed_terms(envelope.waits, runs, plan.bucket_terms)
        if plan.bucket_encode_s:
            terms["codec"] = terms.get("codec", 0.0) + sum(plan.bucket_encode_s)
        if plan.param_gather_s > 0:  # ZeRO-1/2's allgather after the step: on the critical path
            terms["parameter allgather"] = plan.param_gather_s
    result = IterationResult(
        world_size=n,
        batch_size=scenario.workload.batch_size,
        iteration_time_s=total,
        compute_time_s=compute,
        exposed_comm_time_s=max(0.0, total - compute - envelope.overlap_slowdown_s),
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
        codec_time_s=max((sync.codec_busy_s[r] for r in members), default=0.0),
        links=link_stats(net),
        flow_engine="event" if type(coll) is Collectives else "periodic",
        overlap_slowdown_time_s=envelope.overlap_slowdown_s,
        exposed_comm_terms=terms,
    )
    return result, net


def link_stats(net: ClusterNetwork) -> tuple[LinkStat, ...]:
    f = net.flows
    return tuple(LinkStat(f.link_names[i], f.link_tiers[i], f.capacity_Bps[i], f.link_bytes[i], f.busy_s[i])
                 for i in range(len(f.capacity_Bps)) if f.link_bytes[i] > 0)
