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
        """True while a collective runs: compute then runs at 1 - plan.comm_slowdown."""

    def start(self) -> None:
        self.env.process(self.communicate())
        self.done = self.env.process(self.compute())

    def _span(self, lane: str, name: str, start: float) -> None:
        raise NotImplementedError

    def communicate(self):
        raise NotImplementedError

    def _work(self, t: float) -> float:
        """A kernel's duration: slowed while a collective holds some of the GPU's SMs (the
        state at its start decides: layers are short next to a collective)."""
        return t / (1.0 - self.plan.comm_slowdown) if self.comm_busy and self.plan.comm_slowdown else t

    def compute(self):
        env, plan = self.env, self.plan
        if plan.double_buffering:  # the previous iteration's gradients reduce during this one
            for bucket in plan.buckets:
                yield from self._hand_off(bucket)
        for name, t in zip(plan.layer_names, plan.fwd_s, strict=True):
            start = env.now
            yield env.timeout(self._work(t))
            self._span("compute", f"fwd {name}", start)
        bucket_of = {b.layers[-1]: b for b in plan.buckets}
        deferred = []
        self.backward_start_s = env.now
        for i in range(len(plan.layer_names) - 1, -1, -1):
            start = env.now
            yield env.timeout(self._work(plan.bwd_s[i]))
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
            yield self.comm_done
        start = env.now
        yield env.timeout(self._work(plan.optimizer_s))
        self._span("compute", "optimizer step", start)
        if plan.double_buffering:
            yield self.comm_done
        if plan.param_gather_s > 0:  # ZeRO-1/2: the updated shards, allgathered before the next forward
            start = env.now
            yield env.timeout(plan.param_gather_s)
            self._span("comm", "parameter allgather", start)
        if plan.iteration_overhead_s > 0:
            start = env.now
            yield env.timeout(plan.iteration_overhead_s)
            self._span("compute", "iteration overhead", start)
        self.end_s = env.now

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
        yield self.ready.put(bucket)
