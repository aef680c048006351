"""Pipeline (and tensor) parallelism as SimPy processes: one process per stage, one per link.

Data-parallel replicas are identical, so one pipeline is simulated for all. A stage process
runs its schedule's sequence of forward and backward micro-batch operations; a forward waits
for its activation from the previous stage, a backward for its gradient from the next. Sends
are asynchronous: a link process per boundary and direction carries one message at a time.
After its last backward, a stage synchronises its gradients over its data-parallel group and
steps its optimizer; the iteration ends when the last stage has.
"""

from __future__ import annotations

import simpy

from sim.engine.pipeline_plan import PipelinePlan, StagePlan
from sim.result import IterationResult, Span


def schedule_ops(schedule: str, p: int, m: int, stage: int) -> list[tuple[str, int]]:
    """The order of ('F'|'B', micro-batch) operations of one stage.

    gpipe: all forwards, then all backwards (Huang et al. 2019). 1f1b: p - stage - 1 warm-up
    forwards, then one forward and one backward alternately, then the remaining backwards
    (PipeDream-Flush; Narayanan et al. 2021)."""
    if schedule == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    warmup = min(p - stage - 1, m)
    ops = [("F", i) for i in range(warmup)]
    for i in range(m - warmup):
        ops += [("F", warmup + i), ("B", i)]
    ops += [("B", i) for i in range(m - warmup, m)]
    return ops


class _Pipeline:
    def __init__(self, env: simpy.Environment, plan: PipelinePlan):
        self.env, self.plan = env, plan
        p = len(plan.stages)
        # inbox[s]['F'] holds activations for stage s; inbox[s]['B'] gradients for stage s
        self.inbox = [{"F": simpy.Store(env), "B": simpy.Store(env)} for _ in range(p)]
        self.outbox = [{"F": simpy.Store(env), "B": simpy.Store(env)} for _ in range(p)]
        self.spans: list[Span] = []
        self.flush_end = [0.0] * p
        self.end = [0.0] * p
        for s, stage in enumerate(plan.stages):
            if s < p - 1:
                env.process(self.link(self.outbox[s]["F"], self.inbox[s + 1]["F"], stage.send_s))
                env.process(self.link(self.outbox[s + 1]["B"], self.inbox[s]["B"], stage.send_s))
        self.procs = [env.process(self.stage(st)) for st in plan.stages]

    def link(self, source: simpy.Store, sink: simpy.Store, seconds: float):
        while True:
            item = yield source.get()
            if seconds > 0:
                yield self.env.timeout(seconds)
            yield sink.put(item)

    def stage(self, st: StagePlan):
        env, plan = self.env, self.plan
        p, s = len(plan.stages), st.index
        lane = f"stage{s}"
        for op, mb in schedule_ops(plan.schedule, p, plan.micro_batches, s):
            if op == "F" and s > 0:
                yield self.inbox[s]["F"].get()
            if op == "B" and s < p - 1:
                yield self.inbox[s]["B"].get()
            start = env.now
            yield env.timeout(st.fwd_s if op == "F" else st.bwd_s)
            self.spans.append(Span(lane, f"{op}{mb}", start, env.now))
            if op == "F" and s < p - 1:
                yield self.outbox[s]["F"].put(mb)
            if op == "B" and s > 0:
                yield self.outbox[s]["B"].put(mb)
        self.flush_end[s] = env.now
        if st.dp_sync_s > 0:
            start = env.now
            yield env.timeout(st.dp_sync_s)
            self.spans.append(Span(f"{lane}/comm", "dp gradient sync", start, env.now))
        start = env.now
        yield env.timeout(st.optimizer_s)
        self.spans.append(Span(lane, "optimizer step", start, env.now))
        self.end[s] = env.now


def run_pipeline(plan: PipelinePlan, world_size: int, batch_size: int) -> IterationResult:
    env = simpy.Environment()
    pipe = _Pipeline(env, plan)
    events = 0
    while env.peek() != float("inf"):
        env.step()
        events += 1
    assert all(proc.triggered for proc in pipe.procs), "a pipeline stage never finished (schedule deadlock)"
    m = plan.micro_batches
    total = max(pipe.end)
    flush = max(pipe.flush_end)
    busiest = max(plan.stages, key=lambda st: st.fwd_s + st.bwd_s)
    busy = m * (busiest.fwd_s + busiest.bwd_s)
    compute = busy + busiest.optimizer_s
    bubble = flush - busy
    bytes_total = dict(plan.tp_bytes_by_link)
    for st in plan.stages:
        for k, v in st.dp_bytes_by_link.items():
            bytes_total[k] = bytes_total.get(k, 0.0) + v * plan.tp  # one DP group per TP rank
        # activations forward and gradients back, m micro-batches, every replica
        bytes_total[st.send_link] = bytes_total.get(st.send_link, 0.0) + 2 * m * st.send_bytes * plan.dp
    return IterationResult(
        world_size=world_size,
        batch_size=batch_size,
        iteration_time_s=total,
        compute_time_s=compute,
        exposed_comm_time_s=max(0.0, total - compute - bubble),
        comm_time_s=max(st.dp_sync_s for st in plan.stages),
        forward_time_s=m * busiest.fwd_s,
        backward_time_s=m * busiest.bwd_s,
        optimizer_time_s=busiest.optimizer_s,
        bytes_by_link=bytes_total,
        buckets=(),
        spans=tuple(pipe.spans),
        events=events,
        fidelity="fast",
        data_parallel=plan.dp,
        codec_time_s=max(st.codec_s for st in plan.stages),
        bubble_time_s=bubble,
        tp_comm_time_s=m * busiest.tp_comm_s,
        pp_comm_time_s=2 * m * max(st.send_s for st in plan.stages),
    )


def bubble_fraction_of(result: IterationResult) -> float:
    """Measured bubble share of the flush (compare with costs.pipeline.bubble_fraction)."""
    flush = result.bubble_time_s + result.forward_time_s + result.backward_time_s
    return result.bubble_time_s / flush if flush else 0.0
