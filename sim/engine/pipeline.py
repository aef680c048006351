"""Pipeline (and tensor) parallelism as SimPy processes: one process per stage, one per link.

Data-parallel replicas are identical, so one pipeline is simulated for all. A stage process
runs its schedule's sequence of forward and backward micro-batch operations; a forward waits
for its activation from the previous stage, a backward for its gradient from the next. Sends
are asynchronous: a link process per boundary and direction carries one message at a time.
After its last backward, a stage synchronises its gradients over its data-parallel group and
steps its optimizer (and with ZeRO-1/2 allgathers its updated parameters); the iteration ends
when the last stage has. With the interleaved schedule (vpp > 1) every stage holds vpp model
chunks: the pipeline has pp x vpp virtual stages, virtual stage k = chunk x pp + stage, with a
link per virtual boundary (from the last stage back to the first between chunks).
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


def interleaved_ops(p: int, m: int, stage: int, vpp: int) -> list[tuple[str, int, int]]:
    """The interleaved 1F1B order of ('F'|'B', micro-batch, model chunk) of one stage, as
    Megatron-LM's forward_backward_pipelining_with_interleaving runs it
    (megatron/core/pipeline_parallel/schedules.py, NVIDIA/Megatron-LM d98e8a64, get_pp_rank_microbatches
    and get_schedule_table with microbatch_group_size_per_vp_stage = p, its default): of the m x vpp
    chunk-steps, (p - stage - 1) x 2 + (vpp - 1) x p warm-up forwards (at most all of them), then
    one forward and one backward alternately, then the remaining backwards; step k runs
    micro-batch (k // (p vpp)) p + k % p on chunk (k % (p vpp)) // p, backwards on the chunks in
    reverse (vpp - 1 - that). m must be a multiple of p (sim.strategy.check_large_model)."""
    total = m * vpp
    warmup = min((p - stage - 1) * 2 + (vpp - 1) * p, total)

    def step(k: int, forward: bool) -> tuple[int, int]:
        chunk = (k % (p * vpp)) // p
        return (k // (p * vpp)) * p + k % p, chunk if forward else vpp - 1 - chunk

    ops = [("F", *step(k, True)) for k in range(warmup)]
    for k in range(total - warmup):
        ops += [("F", *step(warmup + k, True)), ("B", *step(k, False))]
    ops += [("B", *step(k, False)) for k in range(total - warmup, total)]
    return ops


def stage_ops(schedule: str, p: int, m: int, stage: int, vpp: int = 1) -> list[tuple[str, int, int]]:
    """('F'|'B', micro-batch, chunk) of one stage under the schedule (chunk 0 without interleaving)."""
    if vpp == 1:
        return [(op, mb, 0) for op, mb in schedule_ops(schedule, p, m, stage)]
    return interleaved_ops(p, m, stage, vpp)


class _Pipeline:
    def __init__(self, env: simpy.Environment, plan: PipelinePlan):
        self.env, self.plan = env, plan
        p = len(plan.stages)
        self.virtual = plan.virtual_stages()
        n = len(self.virtual)
        # inbox[k]['F'] holds activations for virtual stage k; inbox[k]['B'] gradients for it
        self.inbox = [{"F": simpy.Store(env), "B": simpy.Store(env)} for _ in range(n)]
        self.outbox = [{"F": simpy.Store(env), "B": simpy.Store(env)} for _ in range(n)]
        self.spans: list[Span] = []
        self.flush_end = [0.0] * p
        self.end = [0.0] * p
        for k, (_, _, send_s) in enumerate(self.virtual):
            if k < n - 1:
                env.process(self.link(self.outbox[k]["F"], self.inbox[k + 1]["F"], send_s))
                env.process(self.link(self.outbox[k + 1]["B"], self.inbox[k]["B"], send_s))
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
        last = len(self.virtual) - 1
        lane = f"stage{s}"
        for op, mb, chunk in stage_ops(plan.schedule, p, plan.micro_batches, s, plan.vpp):
            k = chunk * p + s
            fwd_s, bwd_s, _ = self.virtual[k]
            if op == "F" and k > 0:
                yield self.inbox[k]["F"].get()
            if op == "B" and k < last:
                yield self.inbox[k]["B"].get()
            start = env.now
            yield env.timeout(fwd_s if op == "F" else bwd_s)
            self.spans.append(Span(lane, f"{op}{mb}" if plan.vpp == 1 else f"{op}{mb}.{chunk}", start, env.now))
            if op == "F" and k < last:
                yield self.outbox[k]["F"].put(mb)
            if op == "B" and k > 0:
                yield self.outbox[k]["B"].put(mb)
        self.flush_end[s] = env.now
        if st.dp_sync_s > 0:
            start = env.now
            yield env.timeout(st.dp_sync_s)
            self.spans.append(Span(f"{lane}/comm", "dp gradient sync", start, env.now))
        start = env.now
        yield env.timeout(st.optimizer_s)
        self.spans.append(Span(lane, "optimizer step", start, env.now))
        if st.param_gather_s > 0:
            start = env.now
            yield env.timeout(st.param_gather_s)
            self.spans.append(Span(f"{lane}/comm", "parameter allgather", start, env.now))
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
    slowdown = m * busiest.slowdown_s  # inside its passes; reported apart, as the data-parallel path does
    compute = busy + busiest.optimizer_s - slowdown
    bubble = max(0.0, flush - busy)  # one stage: the sum of m passes may round a hair below m x a pass
    bytes_total = dict(plan.tp_bytes_by_link)
    for st in plan.stages:
        for k, v in st.dp_bytes_by_link.items():
            bytes_total[k] = bytes_total.get(k, 0.0) + v * plan.tp  # one DP group per TP rank
        # activations forward and gradients back, m micro-batches, every replica
        for link, n_bytes in ([(ch.send_link, ch.send_bytes) for ch in st.chunks] or [(st.send_link, st.send_bytes)]):
            bytes_total[link] = bytes_total.get(link, 0.0) + 2 * m * n_bytes * plan.dp
    return IterationResult(
        world_size=world_size,
        batch_size=batch_size,
        iteration_time_s=total,
        compute_time_s=compute,
        exposed_comm_time_s=max(0.0, total - compute - slowdown - bubble),
        comm_time_s=max(st.dp_sync_s for st in plan.stages),
        # the kernels alone, as the data-parallel path reports them: the slowdown is its own term
        forward_time_s=m * (busiest.fwd_s - busiest.fwd_slowdown_s),
        backward_time_s=m * (busiest.bwd_s - (busiest.slowdown_s - busiest.fwd_slowdown_s)),
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
        pp_comm_time_s=2 * m * max(pp_sends_s(st) for st in plan.stages),
        model_comm_time_s=m * busiest.model_comm_s,
        recompute_time_s=m * busiest.recompute_s,
        overlap_slowdown_time_s=slowdown,
    )


def pp_sends_s(st: StagePlan) -> float:
    """One micro-batch's sends of a stage in one direction: its chunk's (each chunk's with vpp > 1)."""
    return sum(ch.send_s for ch in st.chunks) if st.chunks else st.send_s


def bubble_fraction_of(result: IterationResult) -> float:
    """Measured bubble share of the flush (compare with costs.pipeline.bubble_fraction)."""
    flush = result.bubble_time_s + result.forward_time_s + result.backward_time_s
    return result.bubble_time_s / flush if flush else 0.0
