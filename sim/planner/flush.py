"""A pipeline's flush, replayed: when each stage of ``sim.engine.pipeline.run_pipeline`` finishes
its last backward, computed from the same schedule without the event loop.

The planner simulates thousands of pipelines whose flushes have up to stages x micro-batches x 2
operations (GPT-2 XL at a global batch of 512: half a million stage operations in one search,
about 95 us each through SimPy's stores and link processes). The engine's stage and link
processes are deterministic, so their times follow a recurrence that this module evaluates in
the same order of floating-point operations, giving the same numbers bit for bit:

- a stage runs its ``schedule_ops`` in order; an operation starts at max(the stage's clock, the
  time its input reached the stage's inbox) (a forward needs the activation from the previous
  stage, a backward the gradient from the next) and ends at start + its seconds;
- a boundary's link carries one message at a time in the order they were put: it takes message
  i at max(put time, delivery of message i - 1) and delivers it after the send time (at once
  when that is 0), into the next stage's inbox.

tests/test_planner.py checks it against ``run_pipeline`` on random stage times, sends, stage
counts, micro-batches and both schedules, with ``==``; the planner re-simulates its top
candidates through ``sim.simulate.simulate`` at every run and refuses to print a mismatch.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from sim.engine.pipeline import schedule_ops


def flush_ends(schedule: str, m: int, stages: Sequence[tuple[float, float]], sends: Sequence[float]) -> tuple[float, ...]:
    """Per stage, when its last backward ends. ``stages``: (forward, backward) seconds of one
    micro-batch per stage; ``sends[s]``: the link between stage s and s + 1, both directions."""
    p = len(stages)
    ops = [_ops(schedule, p, m, s) for s in range(p)]
    fwd_in: list[list[float]] = [[] for _ in range(p)]   # activation i reaches stage s's inbox at fwd_in[s][i]
    bwd_in: list[list[float]] = [[] for _ in range(p)]   # gradient i reaches stage s's inbox at bwd_in[s][i]
    clock = [0.0] * p
    pos = [0] * p
    left = sum(len(o) for o in ops)
    while left:
        moved = 0
        for s in range(p):
            mine, k, now = ops[s], pos[s], clock[s]
            f_s, b_s = stages[s]
            first, last = s == 0, s == p - 1
            inbox_f, inbox_b = fwd_in[s], bwd_in[s]
            out_f = None if last else fwd_in[s + 1]
            out_b = None if first else bwd_in[s - 1]
            send_f = 0.0 if last else sends[s]
            send_b = 0.0 if first else sends[s - 1]
            while k < len(mine):
                forward, i = mine[k]
                if forward:
                    if not first:
                        if i >= len(inbox_f):
                            break
                        if inbox_f[i] > now:  # max(clock, arrival)
                            now = inbox_f[i]
                    now = now + f_s
                    if out_f is not None:  # the link: take at max(put, previous delivery), deliver send later
                        take = out_f[-1] if out_f and out_f[-1] > now else now
                        out_f.append(take + send_f if send_f > 0 else take)
                else:
                    if not last:
                        if i >= len(inbox_b):
                            break
                        if inbox_b[i] > now:
                            now = inbox_b[i]
                    now = now + b_s
                    if out_b is not None:
                        take = out_b[-1] if out_b and out_b[-1] > now else now
                        out_b.append(take + send_b if send_b > 0 else take)
                k += 1
            moved += k - pos[s]
            pos[s], clock[s] = k, now
        if not moved:
            raise RuntimeError("pipeline schedule deadlock (no stage can proceed)")
        left -= moved
    return tuple(clock)


@lru_cache(maxsize=4096)
def _ops(schedule: str, p: int, m: int, stage: int) -> tuple[tuple[bool, int], ...]:
    """The stage's operations as (is forward, micro-batch)."""
    return tuple((op == "F", i) for op, i in schedule_ops(schedule, p, m, stage))
