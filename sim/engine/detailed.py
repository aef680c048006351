"""Detailed fidelity: every rank, every message, links shared max-min fairly.

Every rank is a pair of SimPy processes, as in the fast path but not shared: a compute
stream (forward, backward in reverse, the optimizer step after its last bucket) and a
communication stream that reduces the buckets in order, one at a time. Per-layer times and
buckets come from ``sim.engine.plan.build_plan``; only the communication differs from the
fast path: each bucket runs as per-rank message schedules (``sim.engine.detailed_collectives``:
ring, hierarchical, ps) on the flow network of ``sim.engine.flows.ClusterNetwork``, through
the strategy's codec and codec path (``sim.engine.detailed_sync``: encode, decode and local
sums as device time where they happen: the encode on the compute stream at the hand-off,
the rest on the rank's comm stream).
The fast path's step-synchronous cost is the critical path of these schedules when ranks are
symmetric, so the two agree (tests/test_detailed*.py); the detailed mode exists to check that,
and to run cases the fast path cannot (asymmetric placement, contention between collectives).
"""

from __future__ import annotations

import simpy

from sim.costs.comm import per_flow_cluster, spec_of
from sim.engine.detailed_collectives import Collectives
from sim.engine.detailed_sync import GradientSync, check_sync, uses_collective
from sim.engine.flows import ClusterNetwork
from sim.engine.plan import IterationPlan, build_plan
from sim.engine.streams import RankStreams
from sim.errors import ConfigError
from sim.result import BucketRecord, IterationResult, Span
from sim.scenario import Scenario

MAX_DETAILED_WORLD_SIZE = 256
"""Beyond this the per-flow mode is slow and the fast path is the tool (identical ranks)."""
TRACED_RANKS = 8
"""Ranks whose compute and comm spans are recorded: traces of big clusters stay readable."""


class _Rank(RankStreams):
    """One rank's compute stream and communication stream (the fast path's, per rank)."""

    def __init__(self, env: simpy.Environment, rank: int, plan: IterationPlan, sync: GradientSync,
                 members: list[int], log: list[tuple[float, str]]):
        super().__init__(env, plan, log)
        self.rank = rank
        self.sync = sync
        self.members = members
        self.traced = rank < TRACED_RANKS
        self.comm_window: dict[int, tuple[float, float]] = {}
        self.comm_busy_s = 0.0
        self.start()

    def _span(self, lane: str, name: str, start: float) -> None:
        if self.traced:
            lane = f"rank{self.rank}/{lane}"
            self.spans.append(Span(lane, name, start, self.env.now))
            self.log.append((self.env.now, f"{lane}:{name}"))

    def _comm_span(self, name: str, start: float) -> None:
        self._span("comm", name, start)

    def communicate(self):
        env = self.env
        for _ in self.plan.buckets:
            bucket = yield self.ready.get()
            start = env.now
            yield from self.sync.bucket(self.members, self.rank, bucket.n_bytes, bucket.index, self._comm_span,
                                        encoded=bool(self.plan.bucket_encode_s))
            self.comm_window[bucket.index] = (start, env.now)
            self.comm_busy_s += env.now - start
            self._span("comm", f"bucket {bucket.index}", start)
        self.comm_done.succeed()


def check_detailed(scenario: Scenario) -> None:
    """Refuse what the detailed mode does not model, naming the alternative (sim.config's
    validate_scenario calls this, so a sweep finds such points before it runs them)."""
    n = scenario.cluster.world_size
    if n > MAX_DETAILED_WORLD_SIZE:
        raise ConfigError("cluster.gpus", n, f"at most {MAX_DETAILED_WORLD_SIZE} with simulation.fidelity=detailed "
                          "(use fidelity fast for larger clusters)", related=("simulation.fidelity",))
    if scenario.strategy.model_parallel or scenario.strategy.micro_batches > 1:
        from sim.engine.detailed_pipeline import check_detailed_pipeline

        check_detailed_pipeline(scenario)
    else:
        check_sync(scenario)


def run_detailed(scenario: Scenario) -> IterationResult:
    """One iteration of ``scenario`` with every rank and every message simulated."""
    return run_detailed_with_network(scenario)[0]


def run_detailed_with_network(scenario: Scenario) -> tuple[IterationResult, ClusterNetwork]:
    """``run_detailed`` and the network it ran on (per-endpoint byte counts, flow counts)."""
    check_detailed(scenario)
    if scenario.strategy.model_parallel or scenario.strategy.micro_batches > 1:
        from sim.engine.detailed_pipeline import run_detailed_pipeline

        return run_detailed_pipeline(scenario)
    plan = build_plan(scenario)
    cluster, strategy = scenario.cluster, scenario.strategy
    n = cluster.world_size
    env = simpy.Environment()
    servers = strategy.ps_servers if strategy.collective == "ps" and uses_collective(scenario) and n > 1 else 0
    net = ClusterNetwork(env, per_flow_cluster(cluster, spec_of(strategy)), servers=servers)
    sync = GradientSync(env, scenario, Collectives(env, net))
    members = list(range(n))
    log: list[tuple[float, str]] = []
    ranks = [_Rank(env, r, plan, sync, members, log) for r in range(n)]
    reductions = [(b.index, sync.collective_bytes(b.n_bytes)) for b in plan.buckets]
    for p in range(servers):
        env.process(sync.coll.ps_server(p, reductions, servers, members))
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
        codec_time_s=max((sync.codec_busy_s[r] for r in members), default=0.0),
    )
    return result, net
