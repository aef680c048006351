"""Periodic rings of groups that start at different moments and share links while they overlap.

The periodic engine (sim.engine.periodic) solves a ring with its flows' rates from max-min over a
fixed set of rings that run together. A pipeline's stages flush one after another, so each
stage's data-parallel rings (one group: its tensor ranks' rings, which start together) overlap
the other stages' for part of their time. Here the rates a ring runs at follow the groups that
are running:

- a ring is solved, when its last member joins, with its flows shared max-min with every ring of
  every group running at that moment (sim.engine.periodic's pattern of their union);
- when the set of running groups changes (a group's first ring starts, its last one ends), every
  running ring of another group is re-paced: each member keeps the fraction of its ring it has
  left, f, and finishes f x its duration under the new sharing from now (a fluid model at the
  ring's scale: its rate follows the links' max-min shares as they change, as a flow's does in
  sim.engine.flows between its rate changes).

Within one group nothing changes: rings that start together are the periodic engine's. Where
groups never overlap this is the periodic engine; where they overlap the whole time it is the
periodic engine over their union (the fast path's every-stage-at-once assumption).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import simpy

from sim.costs.comm import RingLatency
from sim.engine.periodic import PeriodicCollectives

Group = tuple[tuple[int, ...], ...]
Inputs = tuple[int, float, int, float, RingLatency]
"""A ring's steps, chunk bytes, summing steps, seconds per sum and library latency."""


class _Run:
    """One solved ring: its members' progress, re-paced as the groups around it change."""

    __slots__ = ("group", "state", "inputs", "union", "left", "since", "duration", "version", "events", "open")

    def __init__(self, group: Group, state: dict[str, Any], inputs: Inputs, union: Group, ends: np.ndarray):
        self.group, self.state, self.inputs, self.union = group, state, inputs, union
        start = state["start"]
        self.left = np.ones(len(start))  # the fraction of its ring each member has still to run
        self.since = start.copy()
        self.duration = np.maximum(ends - start, 0.0)
        self.version = np.zeros(len(start), dtype=np.int64)
        self.events: list[simpy.Event] = state["events"]
        self.open = len(start)


class GroupSharingCollectives(PeriodicCollectives):
    """``PeriodicCollectives`` whose concurrent sets (``concurrent`` of ``ring``: a group) share the
    links with the other groups running at the same time (see the module docstring)."""

    def __init__(self, env: simpy.Environment, net, traced: int = 0, latency=None):
        super().__init__(env, net, traced, latency)
        self._running: dict[Group, set[_Run]] = {}
        self.repaced = 0
        """Rings re-paced when the running groups changed (for tests and the curious)."""

    def _union(self) -> Group:
        return tuple(ring for group in sorted(g for g, runs in self._running.items() if runs) for ring in group)

    def _solve(self, state: dict[str, Any], steps: int, chunk_bytes: float, sum_steps: int, step_sum_s: float,
               latency: RingLatency) -> None:
        group: Group = tuple(tuple(r) for r in state["rings"])
        was = self._union()
        self._running.setdefault(group, set())
        union = was if self._running[group] else tuple(
            ring for g in sorted({*[g for g, runs in self._running.items() if runs], group}) for ring in g)
        inputs: Inputs = (steps, chunk_bytes, sum_steps, step_sum_s, latency)
        ends = self._ends(self.pattern(union), state, *inputs)
        run = _Run(group, state, inputs, union, ends)
        self._running[group].add(run)
        for pos in range(len(run.events)):
            self._schedule(run, pos)
        if union != was:
            self._repace(union)

    def _schedule(self, run: _Run, pos: int) -> None:
        version = int(run.version[pos])
        end = run.since[pos] + run.left[pos] * run.duration[pos]
        timeout = self.env.timeout(max(0.0, float(end) - self.env.now))
        timeout.callbacks.append(lambda _t: self._member_done(run, pos, version))

    def _member_done(self, run: _Run, pos: int, version: int) -> None:
        if run.version[pos] != version:
            return  # re-paced since: a later timeout finishes it
        run.left[pos] = 0.0
        run.events[pos].succeed()
        run.open -= 1
        if run.open == 0:
            runs = self._running[run.group]
            runs.discard(run)
            if not runs:  # the group may go on at this instant (its next bucket): look once more after it
                self.env.timeout(0.0).callbacks.append(lambda _t: self._group_may_have_ended())

    def _group_may_have_ended(self) -> None:
        union = self._union()
        if any(run.union != union for runs in self._running.values() for run in runs):
            self._repace(union)

    def _repace(self, union: Group) -> None:
        """Every running ring not paced by ``union`` yet: each member keeps the fraction it has left
        and runs it at its duration under ``union``'s sharing."""
        pattern = self.pattern(union) if union else None
        now = self.env.now
        for runs in self._running.values():
            for run in runs:
                if run.union == union or pattern is None:
                    continue
                steps, chunk_bytes, sum_steps, step_sum_s, latency = run.inputs
                ends = self._ends(pattern, run.state, steps, chunk_bytes, sum_steps, step_sum_s, latency, book=False)
                duration = np.maximum(ends - run.state["start"], 0.0)
                active = run.left > 0
                elapsed = np.maximum(now - run.since, 0.0)
                done_part = np.divide(elapsed, run.duration, out=np.ones_like(elapsed), where=run.duration > 0)
                run.left = np.where(active, np.maximum(run.left - done_part, 0.0), 0.0)
                started = run.since <= now
                run.since = np.where(active & started, now, run.since)
                run.duration = np.where(active, duration, run.duration)
                run.union = union
                self.repaced += 1
                for pos in np.flatnonzero(active).tolist():
                    run.version[pos] += 1
                    self._schedule(run, pos)
