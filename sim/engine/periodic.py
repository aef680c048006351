"""The periodic flow engine: rings as periodic schedules, every flow's rate from max-min at once.

A ring's edge i -> i+1 sends the same chunk at every step over the same connections (its
sub-flows keep their ECMP paths: the same 5-tuples). If the flows of the rings that run together
(a collective's phase: one ring, or a hierarchical allreduce's concurrent rings) share links the
same way at every step, each edge takes a constant t_i = chunk x max over its sub-flows of
(1 / sub-flows) / rate to send, the rates being max-min fair over all those flows at once
(sim.engine.maxmin.max_min_arrays), and d_i = alpha_i (+ the library's hop latency) + t_i from send
to arrival; it holds its sender d_i (a plain ring: done on delivery) or t_i (a pipelined library
ring, sim.costs.comm.ring_latency), and the ring is solved in closed form
(sim.engine.ring_schedule): member i's finish, from every member's start. Nothing per step, nothing
per message: a 16,384-rank ring of 32,766 steps costs a few numpy passes.

It is the event engine's answer (sim.engine.flows) wherever that premise holds: no two edges'
flows share a link (every contiguous ring on a fat tree), or those that share one stay in phase
(symmetric rings: a single switch's oversubscribed core, a hierarchical allreduce's rings sharing
NICs); tests/test_periodic.py checks both to 1e-9. Where ECMP makes flows collide unevenly, the
event engine lets a collided flow speed up when its neighbour ends; this engine keeps the share it
has while all are active (the difference is measured there and in docs/topology.md).

Members join a ring as their comm streams reach it (``ring``); the ring is solved when the last
one arrives (every finish depends on every start once a ring has m-1 steps or more), and each
member's event is scheduled at its own finish.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import simpy

from sim.costs.comm import PLAIN_RING, RingLatency
from sim.engine.detailed_collectives import Collectives, Delay, LatencyOf
from sim.engine.flows import ClusterNetwork
from sim.engine.maxmin import max_min_arrays
from sim.engine.ring_schedule import ring_ends


class _Pattern:
    """The edges of rings that run together, their sub-flows' rates (max-min over all at once)."""

    def __init__(self, net: ClusterNetwork, rings: Sequence[Sequence[int]]):
        edges: dict[tuple[int, int], int] = {}
        for r, members in enumerate(rings):
            m = len(members)
            for i in range(m):
                edges.setdefault((members[i], members[(i + 1) % m]), r)
        self.edges = list(edges)
        ring_of_edge = np.fromiter(edges.values(), dtype=np.int64, count=len(edges))
        index = {}
        ptr = [0]
        links: list[int] = []
        owner: list[int] = []
        self.alpha_s = np.empty(len(self.edges))
        self.subflows = np.empty(len(self.edges))
        self.link_class: list[str] = []
        for e, (src, dst) in enumerate(self.edges):
            index[(src, dst)] = e
            paths, link_class, alpha_s = net.route(src, dst)
            self.alpha_s[e] = alpha_s
            self.subflows[e] = len(paths)
            self.link_class.append(link_class)
            for path in paths:
                links.extend(path)
                ptr.append(len(links))
                owner.append(e)
        self.index = index
        self.intra = np.asarray([c == "intra" for c in self.link_class], dtype=bool)
        self.spans_nodes = net.cluster.nodes > 1
        """On one node every edge takes the ring's one pace (sim.costs.comm.RingLatency)."""
        self.flow_ptr = np.asarray(ptr, dtype=np.int64)
        self.flow_links = np.asarray(links, dtype=np.int64)
        self.owner = np.asarray(owner, dtype=np.int64)
        capacity = np.asarray(net.flows.capacity_Bps)
        rate, neck = max_min_arrays(self.flow_ptr, self.flow_links, capacity)
        per_byte = 1.0 / (self.subflows[self.owner] * rate)  # seconds per byte of the edge's message
        self.s_per_byte = np.zeros(len(self.edges))
        np.maximum.at(self.s_per_byte, self.owner, per_byte)
        slowest = np.full(len(self.edges), -1, dtype=np.int64)
        order = np.argsort(per_byte, kind="stable")
        slowest[self.owner[order]] = order  # the last write per edge is its slowest sub-flow
        self.slowest_flow = slowest
        self.rate = rate
        self.neck = neck
        self.flow_per_byte = per_byte
        # a link's busy time per step and byte: its slowest flow's (in phase, the flows overlap),
        # shared among the rings that have flows on it (each ring books its part)
        lengths = np.diff(self.flow_ptr)
        flow_of = np.repeat(np.arange(len(lengths)), lengths)
        self.link_per_byte = np.zeros(len(capacity))
        np.maximum.at(self.link_per_byte, self.flow_links, per_byte[flow_of])
        ring_link = np.unique(np.stack([self.flow_links, ring_of_edge[self.owner[flow_of]]]), axis=1)
        self.rings_on_link = np.bincount(ring_link[0], minlength=len(capacity))

    def delays(self, edge_ids: np.ndarray, chunk_bytes: float, latency: RingLatency = PLAIN_RING
               ) -> tuple[np.ndarray, np.ndarray]:
        """(each edge's delay from send to arrival, the time its sender is held): alpha + the
        library's hop latency + chunk x s/byte, and the same (plain) or the chunk's time alone
        (pipelined: the sender moves on once its bytes have left)."""
        pace = np.where(self.intra[edge_ids] & self.spans_nodes, latency.intra_pace, latency.pace)
        transfer = chunk_bytes * pace * self.s_per_byte[edge_ids]
        hop_s = np.where(self.intra[edge_ids], latency.intra_hop_s, latency.inter_hop_s)
        arrive = self.alpha_s[edge_ids] + hop_s + transfer
        return arrive, (transfer if latency.pipelined else arrive)


class PeriodicCollectives(Collectives):
    """``Collectives`` whose rings are solved as periodic schedules (see the module docstring);
    everything else (parameter servers) runs message by message on the event network."""

    def __init__(self, env: simpy.Environment, net: ClusterNetwork, traced: int = 0, latency: LatencyOf | None = None):
        super().__init__(env, net, traced, latency)
        self._patterns: dict[tuple[tuple[int, ...], ...], _Pattern] = {}
        self._open: dict[Any, dict[str, Any]] = {}
        self.rings_solved = 0

    def pattern(self, rings: Sequence[Sequence[int]]) -> _Pattern:
        key = tuple(tuple(r) for r in rings)
        found = self._patterns.get(key)
        if found is None:
            found = self._patterns[key] = _Pattern(self.net, rings)
        return found

    def ring(self, members: Sequence[int], pos: int, steps: int, chunk_bytes: float, tag: Any,
             sum_steps: int = 0, step_sum_s: float = 0.0, concurrent: Sequence[Sequence[int]] | None = None,
             latency: RingLatency = PLAIN_RING) -> simpy.Event:
        state = self._open.get(tag)
        if state is None:
            m = len(members)
            state = self._open[tag] = {"members": tuple(members), "start": np.zeros(m), "events": [None] * m,
                                       "waiting": m, "rings": concurrent or (members,)}
        event = self.env.event()
        state["start"][pos] = self.env.now
        state["events"][pos] = event
        state["waiting"] -= 1
        if state["waiting"] == 0:
            del self._open[tag]
            self._solve(state, steps, chunk_bytes, sum_steps, step_sum_s, latency)
        return event

    def _solve(self, state: dict[str, Any], steps: int, chunk_bytes: float, sum_steps: int, step_sum_s: float,
               latency: RingLatency) -> None:
        ends = self._ends(self.pattern(state["rings"]), state, steps, chunk_bytes, sum_steps, step_sum_s, latency)
        now = self.env.now
        for pos, event in enumerate(state["events"]):
            timeout = self.env.timeout(max(0.0, float(ends[pos]) - now))
            timeout.callbacks.append(_succeed(event))

    def _ends(self, pattern: _Pattern, state: dict[str, Any], steps: int, chunk_bytes: float, sum_steps: int,
              step_sum_s: float, latency: RingLatency, book: bool = True) -> np.ndarray:
        """Every member's finish of the ring ``state`` with its flows' rates from ``pattern``; with
        ``book``, the ring's bytes and busy time on the links, its local sums and what paced the
        traced members are recorded (once per ring)."""
        members = state["members"]
        m = len(members)
        edge_ids = np.asarray([pattern.index[(members[i], members[(i + 1) % m])] for i in range(m)])
        arrive, hold = pattern.delays(edge_ids, chunk_bytes, latency)
        sums_s = min(steps, sum_steps) * step_sum_s
        # the library's base latency holds every member before its first step (as _RingPart's)
        ends, pace = ring_ends(state["start"] + latency.base_s, arrive, steps, sums_s, hold)
        if not book:
            return ends
        if sums_s > 0:
            for r in members:
                self.sum_busy_s[r] += sums_s
        self.rings_solved += 1
        self._book(pattern, edge_ids, members, steps, chunk_bytes, latency)
        for pos, rank in enumerate(members):
            if rank < self.traced:
                e = edge_ids[pace[pos]]
                flow = pattern.slowest_flow[e]
                neck = pattern.neck[flow]
                src, dst = pattern.edges[e]
                self.delays[rank] = Delay(src, dst, self.net.flows.link_names[neck] if neck >= 0 else "own cap",
                                          float(pattern.rate[flow]))
        return ends

    def _book(self, pattern: _Pattern, edge_ids: np.ndarray, members: Sequence[int], steps: int,
              chunk_bytes: float, latency: RingLatency = PLAIN_RING) -> None:
        """Bytes per endpoint and per link, and each link's busy time: ``steps`` sends of the chunk
        over every edge (at its class's pace); a link shared by flows in phase is busy for the longest of
        them per step."""
        m = len(members)
        for i in range(m):
            e = edge_ids[i]
            self.net.count(members[i], members[(i + 1) % m], steps * chunk_bytes, pattern.link_class[e])
        flows = self.net.flows
        used = np.isin(pattern.owner, edge_ids)
        lengths = np.diff(pattern.flow_ptr)
        flow_of = np.repeat(np.arange(len(lengths)), lengths)
        mask = used[flow_of]
        links = pattern.flow_links[mask]
        link_bytes = np.zeros(len(flows.capacity_Bps))
        np.add.at(link_bytes, links, steps * chunk_bytes / pattern.subflows[pattern.owner[flow_of[mask]]])
        touched = np.unique(links)
        inside = np.asarray([flows.link_tiers[link] == "gpu" for link in touched.tolist()], dtype=bool)
        pace = np.where(inside & pattern.spans_nodes, latency.intra_pace, latency.pace)  # a GPU port: intra-node
        busy = steps * chunk_bytes * pace * pattern.link_per_byte[touched] / pattern.rings_on_link[touched]
        flows.flows_started += int(used.sum()) * steps
        for link, b in zip(touched.tolist(), busy.tolist(), strict=True):
            flows.link_bytes[link] += float(link_bytes[link])
            flows.busy_s[link] += b


def _succeed(event: simpy.Event):
    def fire(_timeout: simpy.Event) -> None:
        event.succeed()
    return fire
