"""Fast path: the identical ranks of synchronous data parallelism simulated once.

Two SimPy processes on one rank: the compute stream runs forward, then backward layer by
layer in reverse, handing each gradient bucket to the communication stream when its last
gradient exists; the communication stream reduces buckets in order, one at a time (one
process group, one stream), each taking the time the cost layer gives. The optimizer step
waits for the last bucket. Every rank does the same, so one rank's timeline is the cluster's.
"""

from __future__ import annotations

import simpy

from sim.engine.attribution import exposed_terms
from sim.engine.plan import IterationPlan
from sim.engine.streams import RankStreams
from sim.result import BucketRecord, IterationResult, Span


class _Iteration(RankStreams):
    def __init__(self, env: simpy.Environment, plan: IterationPlan, log: list[tuple[float, str]]):
        super().__init__(env, plan, log)
        self.bucket_records: list[BucketRecord] = []
        self.start()

    def _span(self, lane: str, name: str, start: float) -> None:
        self.spans.append(Span(lane, name, start, self.env.now))
        self.log.append((self.env.now, f"{lane}:{name}"))

    def communicate(self):
        env, plan = self.env, self.plan
        for _ in plan.buckets:
            bucket = yield self.ready.get()
            if plan.bucket_release_s:  # Horovod: the next cycle tick after the batch is ready
                release = self.backward_start_s + plan.bucket_release_s[bucket.index]
                if release > env.now:
                    yield env.timeout(release - env.now)
            start = env.now
            self.comm_started(bucket)
            yield env.timeout(plan.bucket_comm_s[bucket.index])
            self.comm_busy, self.footprint = False, None
            self._span("comm", f"bucket {bucket.index}", start)
            names = plan.layer_names
            self.bucket_records.append(
                BucketRecord(bucket.index, bucket.n_bytes, names[bucket.layers[0]], names[bucket.layers[-1]],
                             self.ready_at[bucket.index], start, env.now)
            )
        self.comm_done.succeed()


def run_fast(plan: IterationPlan, world_size: int, batch_size: int) -> IterationResult:
    env = simpy.Environment()
    log: list[tuple[float, str]] = []
    it = _Iteration(env, plan, log)
    events = 0
    while env.peek() != float("inf"):
        env.step()
        events += 1
    assert it.done.triggered, "iteration did not finish: a bucket was never handed to the comm stream"
    total = env.now
    compute = plan.compute_s + plan.iteration_overhead_s
    terms = {}
    if plan.bucket_terms:
        runs = [(r.start_s, r.end_s) for r in sorted(it.bucket_records, key=lambda r: r.index)]
        terms = exposed_terms(it.waits, runs, plan.bucket_terms)
        if plan.bucket_encode_s:
            terms["codec"] = terms.get("codec", 0.0) + sum(plan.bucket_encode_s)
        if plan.param_gather_s > 0:  # ZeRO-1/2's allgather after the step: on the critical path
            terms["parameter allgather"] = plan.param_gather_s
    bytes_total = {"intra": 0.0, "inter": 0.0}
    for per_bucket in plan.bucket_bytes_by_link:
        for k, v in per_bucket.items():
            bytes_total[k] = bytes_total.get(k, 0.0) + v
    return IterationResult(
        world_size=world_size,
        batch_size=batch_size,
        iteration_time_s=total,
        compute_time_s=compute,
        exposed_comm_time_s=max(0.0, total - compute - it.overlap_slowdown_s),
        comm_time_s=sum(plan.bucket_comm_s),
        forward_time_s=sum(plan.fwd_s),
        backward_time_s=sum(plan.bwd_s),
        optimizer_time_s=plan.optimizer_s,
        bytes_by_link=bytes_total,
        buckets=tuple(it.bucket_records),
        spans=tuple(it.spans),
        events=events,
        fidelity="fast",
        log=tuple(log),
        codec_time_s=sum(plan.bucket_codec_s),
        coordination_time_s=plan.coordination_s,
        recompute_time_s=plan.recompute_s,
        overlap_slowdown_time_s=it.overlap_slowdown_s,
        exposed_comm_terms=terms,
    )
