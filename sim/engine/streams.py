"""A rank's compute stream, shared by the fast path (one rank for all) and the detailed mode.

The compute stream runs forward, then backward layer by layer in reverse, handing each
gradient bucket to the rank's communication stream (``ready``) when its last gradient exists
(or all of them after backward, without overlap), after the codec work that precedes the
bucket's collective (its encode: DDP's hook runs on the backward thread); the optimizer step
waits for ``comm_done``.
Subclasses provide ``communicate()`` (how a bucket is reduced) and ``_span()`` (what is logged).
"""

from __future__ import annotations

import simpy

from sim.costs.contention import Footprint, PassLoad, contended_time_s
from sim.engine.plan import IterationPlan
from sim.result import Span


class RankStreams:
    def __init__(self, env: simpy.Environment, plan: IterationPlan, log: list[tuple[float, str]]):
        self.env = env
        self.plan = plan
        self.log = log
        self.spans: list[Span] = []
        self.ready: simpy.Store = simpy.Store(env)
        self.ready_at: dict[int, float] = {}
        self.comm_done = env.event()
        self.end_s = 0.0
        self.backward_start_s = 0.0
        self.comm_busy = False
        self.footprint: Footprint | None = None
        """What the collective in flight takes from the GPU (None: nothing runs, or it takes
        nothing): a kernel that starts meanwhile runs at sim.costs.contention's contended time."""
        self.overlap_slowdown_s = 0.0
        self.comm_until_s = 0.0
        """When the collective in flight ends, where the engine knows it in advance (the fast path)."""
        self.pending: list = []
        """Buckets handed to the comm stream and not started yet, in order."""
        self.waits: list[tuple[float, float]] = []
        """Spans the compute stream waited for the communication stream (exposed communication)."""
        """Compute time added by collectives running beside it (sum over kernels of contended - free)."""

    def start(self) -> None:
        self.env.process(self.communicate())
        self.done = self.env.process(self.compute())

    def _span(self, lane: str, name: str, start: float) -> None:
        raise NotImplementedError

    def communicate(self):
        raise NotImplementedError

    honors_release = True
    """Whether the comm stream holds a bucket until ``plan.bucket_release_s`` (the fast path's Horovod cycle)."""

    def comm_started(self, bucket) -> None:
        """The comm stream starts ``bucket``'s reduction now; it ends, as the plan costs it, after
        ``plan.bucket_comm_s`` (the detailed mode's flows may end it a little earlier or later)."""
        if bucket in self.pending:
            self.pending.remove(bucket)
        self.comm_busy, self.footprint = True, self.plan.footprint(bucket.index)
        self.comm_until_s = self.env.now + self.plan.bucket_comm_s[bucket.index]

    def comm_schedule(self) -> list[tuple[float, float, Footprint | None]]:
        """The comm stream's collectives from now on as (start, end, footprint): the one in flight,
        then the pending buckets in order, each from the end of the one before (or its release),
        as the plan costs them. Nothing is handed over while a layer runs, so this is the fast
        path's exact future; the detailed mode's flows may move the ends a little."""
        plan, now = self.plan, self.env.now
        out = []
        clock = now
        if self.comm_busy:
            end = max(self.comm_until_s, now)
            out.append((now, end, self.footprint))
            clock = end
        for bucket in self.pending:
            start = clock
            if plan.bucket_release_s and self.honors_release:
                start = max(start, self.backward_start_s + plan.bucket_release_s[bucket.index])
            clock = start + plan.bucket_comm_s[bucket.index]
            out.append((start, clock, plan.footprint(bucket.index)))
        return out

    def _work(self, t: float, load: PassLoad | None) -> float:
        """A kernel's duration: its time alone, slowed while collectives run beside it
        (sim.costs.contention: SMs held, memory bandwidth taken): it progresses at the contended
        rate while a collective runs (``comm_schedule``) and at full rate outside."""
        if load is None:
            return t
        clock, work, extra = self.env.now, t, 0.0
        for start, end, footprint in self.comm_schedule():
            if work <= 0:
                break
            if footprint is None or end <= clock or start >= clock + work:  # not beside this kernel
                continue
            if start > clock:  # the comm stream idles until then: full speed
                work -= start - clock
                clock = start
            factor = contended_time_s(1.0, load, footprint)
            if work * factor <= end - clock:
                extra += work * (factor - 1.0)
                work = 0.0
            else:
                done = (end - clock) / factor
                extra += (end - clock) - done
                work -= done
                clock = end
        slowed = t + extra
        self.overlap_slowdown_s += slowed - t
        return slowed

    def _load(self, layer: int, backward: bool) -> PassLoad | None:
        loads = self.plan.layer_loads
        return loads[layer][1 if backward else 0] if loads else None

    def compute(self):
        env, plan = self.env, self.plan
        if plan.double_buffering:  # the previous iteration's gradients reduce during this one
            for bucket in plan.buckets:
                yield from self._hand_off(bucket)
        for i, (name, t) in enumerate(zip(plan.layer_names, plan.fwd_s, strict=True)):
            start = env.now
            yield env.timeout(self._work(t, self._load(i, False)))
            self._span("compute", f"fwd {name}", start)
        bucket_of = {b.layers[-1]: b for b in plan.buckets}
        deferred = []
        self.backward_start_s = env.now
        for i in range(len(plan.layer_names) - 1, -1, -1):
            start = env.now
            yield env.timeout(self._work(plan.bwd_s[i], self._load(i, True)))
            self._span("compute", f"bwd {plan.layer_names[i]}", start)
            if i in bucket_of and not plan.double_buffering:
                bucket = bucket_of[i]
                self.ready_at[bucket.index] = env.now
                if plan.overlap:
                    yield from self._hand_off(bucket)
                else:
                    deferred.append(bucket)
        for bucket in deferred:
            yield from self._hand_off(bucket)
        if not plan.double_buffering:
            yield from self._wait_for_comm()
        start = env.now
        yield env.timeout(self._work(plan.optimizer_s, plan.optimizer_load if plan.layer_loads else None))
        self._span("compute", "optimizer step", start)
        if plan.double_buffering:
            yield from self._wait_for_comm()
        if plan.param_gather_s > 0:  # ZeRO-1/2: the updated shards, allgathered before the next forward
            start = env.now
            yield env.timeout(plan.param_gather_s)
            self._span("comm", "parameter allgather", start)
        if plan.iteration_overhead_s > 0:
            start = env.now
            yield env.timeout(plan.iteration_overhead_s)
            self._span("compute", "iteration overhead", start)
        self.end_s = env.now

    def _wait_for_comm(self):
        start = self.env.now
        yield self.comm_done
        if self.env.now > start:
            self.waits.append((start, self.env.now))

    def _hand_off(self, bucket):
        """Give ``bucket`` to the comm stream, after the codec work that precedes its collective
        (``plan.bucket_encode_s``: DDP's hook encodes on the backward thread, holding it)."""
        env = self.env
        encode_s = self.plan.bucket_encode_s[bucket.index] if self.plan.bucket_encode_s else 0.0
        if encode_s > 0:
            start = env.now
            yield env.timeout(encode_s)
            self._span("compute", f"encode bucket {bucket.index}", start)
        self.ready_at.setdefault(bucket.index, env.now)
        self.pending.append(bucket)
        yield self.ready.put(bucket)
