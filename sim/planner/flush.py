"""A pipeline's flush, replayed: when each stage of ``sim.engine.pipeline.run_pipeline`` finishes
its last backward, computed from the same schedule without the event loop.

The planner simulates thousands of pipelines whose flushes have up to stages x micro-batches x 2
operations (GPT-2 XL at a global batch of 512: half a million stage operations in one search,
about 95 us each through SimPy's stores and link processes). The engine's stage and link
processes are deterministic, so their times follow a recurrence that this module evaluates in
the same order of floating-point operations, giving the same numbers bit for bit:

- a stage runs its ``stage_ops`` in order (with vpp > 1 each op on one of its model chunks, a
  virtual stage); an operation starts at max(the stage's clock, the
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

from sim.engine.pipeline import stage_ops


def flush_ends(schedule: str, m: int, stages: Sequence[tuple[float, float]], sends: Sequence[float],
               vpp: int = 1) -> tuple[float, ...]:
    """Per stage, when its last backward ends. ``stages``: (forward, backward) seconds of one
    micro-batch per virtual stage (pp x vpp of them, virtual stage k = chunk x pp + stage);
    ``sends[k]``: the link between virtual stages k and k + 1, both directions."""
    n = len(stages)
    p = n // vpp
    ops = [_ops(schedule, p, m, s, vpp) for s in range(p)]
    fwd_in: list[list[float]] = [[] for _ in range(n)]   # activation i reaches virtual stage k's inbox at fwd_in[k][i]
    bwd_in: list[list[float]] = [[] for _ in range(n)]   # gradient i reaches virtual stage k's inbox at bwd_in[k][i]
    clock = [0.0] * p
    pos = [0] * p
    left = sum(len(o) for o in ops)
    last = n - 1
    while left:
        moved = 0
        for s in range(p):
            mine, j, now = ops[s], pos[s], clock[s]
            while j < len(mine):
                forward, i, k = mine[j]
                if forward:
                    if k > 0:
                        inbox = fwd_in[k]
                        if i >= len(inbox):
                            break
                        if inbox[i] > now:  # max(clock, arrival)
                            now = inbox[i]
                    now = now + stages[k][0]
                    if k < last:  # the link: take at max(put, previous delivery), deliver send later
                        out, send = fwd_in[k + 1], sends[k]
                        take = out[-1] if out and out[-1] > now else now
                        out.append(take + send if send > 0 else take)
                else:
                    if k < last:
                        inbox = bwd_in[k]
                        if i >= len(inbox):
                            break
                        if inbox[i] > now:
                            now = inbox[i]
                    now = now + stages[k][1]
                    if k > 0:
                        out, send = bwd_in[k - 1], sends[k - 1]
                        take = out[-1] if out and out[-1] > now else now
                        out.append(take + send if send > 0 else take)
                j += 1
            moved += j - pos[s]
            pos[s], clock[s] = j, now
        if not moved:
            raise RuntimeError("pipeline schedule deadlock (no stage can proceed)")
        left -= moved
    return tuple(clock)


@lru_cache(maxsize=4096)
def _ops(schedule: str, p: int, m: int, stage: int, vpp: int) -> tuple[tuple[bool, int, int], ...]:
    """The stage's operations as (is forward, micro-batch, virtual stage)."""
    return tuple((op == "F", i, chunk * p + stage) for op, i, chunk in stage_ops(schedule, p, m, stage, vpp))
