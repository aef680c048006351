"""Per-rank message schedules of collectives on the flow network (the detailed fidelity's).

Every collective here runs over an explicit list of member ranks (any group: the whole
cluster, a stage's data-parallel group, a tensor-parallel group), as point-to-point messages
on ``sim.engine.flows.ClusterNetwork``:
- ring: at step k rank i sends a chunk to i+1 and starts step k+1 once its own send is done
  and step k from i-1 has arrived (no global barrier). In the reduce-scatter steps of a ring
  that sums, the rank adds the received chunk before it may send it on: that local sum (the
  codec's reduce cost, sim.costs.codecs) delays step k+1 by ``sum_s x chunk / tensor``.
  The library's latency (``sim.costs.comm.ring_latency``, per collective and bucket size): its
  base latency before the first step, its hop latency on every message after the link's alpha.
  A plain ring's send is done on delivery (alpha, then the bytes); a pipelined library's (NCCL,
  whose slots keep several steps in flight) once its bytes have left (they flow at once), the
  receiver getting them alpha + hop latency later, so latency delays the data, not the sender.
- hierarchical: an intra-node ring reduce-scatter of S/g, one inter-node ring allreduce per
  local rank (S/(g nodes) chunks), an intra-node ring allgather; one node or one member per
  node runs the flat ring, as the cost layer does.
- ps: every worker pushes S/P to each of the P servers; a server answers each worker with S/P
  once it holds all n pushes; a worker's reduction is done when all P answers are in.
Messages are matched by key, so a receiver may ask for a message before it is sent.
``concurrent`` names the rings that run together with a ring (a hierarchical allreduce's phases):
the event engine needs no such hint, the periodic one (sim.engine.periodic) shares links by it.
``delays[rank]`` keeps, for the first ``traced`` ranks, what paced the rank's last ring: its
slowest message and the link that held it (sim.engine.flows.MessageInfo).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import simpy

from sim.costs.comm import PLAIN_RING, RingLatency, per_flow_cluster, ring_latency_for
from sim.engine.flows import ClusterNetwork

LatencyOf = Callable[[str, float, int, int], RingLatency]
"""``latency(op, n_bytes, nodes, gpus_per_node)`` of a library ring (sim.costs.comm.ring_latency_for)."""


@dataclass(frozen=True)
class Delay:
    """What paced a rank in a collective: the edge src -> dst, the link that held its slowest
    sub-flow, that sub-flow's rate."""

    src: int
    dst: int
    link: str
    rate_Bps: float


class Messages:
    """Point-to-point messages matched by key.

    ``send`` starts the transfer and returns the event that fires on delivery; ``arrival``
    returns the same event for the receiver, whether or not the send has started yet.
    """

    def __init__(self, env: simpy.Environment, net: ClusterNetwork):
        self.env = env
        self.net = net
        self._slots: dict[Any, simpy.Event] = {}

    def _slot(self, key: Any) -> simpy.Event:
        slot = self._slots.pop(key, None)
        if slot is None:  # first of the two sides to ask: keep it for the other one
            slot = self._slots[key] = self.env.event()
        return slot

    def send(self, key: Any, src: int, dst: int, n_bytes: float, extra_alpha_s: float = 0.0) -> simpy.Event:
        return self.net.transfer(src, dst, n_bytes, done=self._slot(key), extra_alpha_s=extra_alpha_s)

    def send_pipelined(self, key: Any, src: int, dst: int, n_bytes: float, extra_alpha_s: float,
                       pace: float = 1.0) -> simpy.Event:
        """Like ``send``, but the returned event fires when the bytes have left the sender; the
        receiver's (``arrival``) alpha + ``extra_alpha_s`` later (ClusterNetwork.transfer_pipelined)."""
        left = self.env.event()
        self.net.transfer_pipelined(src, dst, n_bytes, left, self._slot(key), extra_alpha_s, pace)
        return left

    def arrival(self, key: Any) -> simpy.Event:
        return self._slot(key)


def _when_done(event: simpy.Event, callback) -> None:
    if event.callbacks is None:  # already processed
        callback(event)
    else:
        event.callbacks.append(callback)


class _RingPart:
    """One rank's steps of a ring, advanced by the callbacks of its messages."""

    __slots__ = ("coll", "me", "succ", "pos", "pred", "steps", "chunk_bytes", "tag", "k", "waiting", "done",
                 "sum_steps", "step_sum_s", "members", "slowest", "sent", "pipelined", "hop_s", "pace")

    def __init__(self, coll: Collectives, members: Sequence[int], pos: int, steps: int, chunk_bytes: float, tag: Any,
                 sum_steps: int, step_sum_s: float, latency: RingLatency):
        m = len(members)
        self.coll = coll
        self.me, self.succ = members[pos], members[(pos + 1) % m]
        self.pos, self.pred = pos, (pos - 1) % m
        self.steps, self.chunk_bytes, self.tag = steps, chunk_bytes, tag
        self.sum_steps, self.step_sum_s = sum_steps, step_sum_s
        self.k = 0
        self.waiting = 0
        self.done = coll.env.event()
        self.members = members if self.me < coll.traced else None
        self.slowest: tuple[float, int, int, Any] | None = None
        self.sent: simpy.Event | None = None
        self.pipelined = latency.pipelined
        net = coll.net
        inside = net.node_of(self.me) == net.node_of(self.succ)
        self.hop_s = latency.intra_hop_s if inside else latency.inter_hop_s
        self.pace = latency.intra_pace if inside and net.cluster.nodes > 1 else latency.pace
        if latency.base_s > 0:
            coll.env.timeout(latency.base_s).callbacks.append(self._step)
        else:
            self._step()

    def _step(self, _event: simpy.Event | None = None) -> None:
        if self.k == self.steps:
            if self.slowest is not None:
                self.coll.note_delay(self.me, *self.slowest)
            self.done.succeed()
            return
        key = (self.tag, self.k)
        messages = self.coll.messages
        if self.pipelined:
            sent = messages.send_pipelined((key, self.pos), self.me, self.succ, self.chunk_bytes, self.hop_s, self.pace)
        else:
            sent = messages.send((key, self.pos), self.me, self.succ, self.chunk_bytes, self.hop_s)
        self.sent = sent
        received = messages.arrival((key, self.pred))
        self.waiting = 2
        _when_done(sent, self._one_done)
        _when_done(received, self._one_done)

    def _one_done(self, event: simpy.Event) -> None:
        if self.members is not None and event.value is not None:
            info = event.value
            if self.slowest is None or info.rate_Bps < self.slowest[0]:
                edge = (self.me, self.succ) if event is self.sent else (self.members[self.pred], self.me)
                self.slowest = (info.rate_Bps, *edge, info)
        self.waiting -= 1
        if self.waiting:
            return
        self.k += 1
        if self.k <= self.sum_steps and self.step_sum_s > 0:
            # add the received chunk into this rank's partial sum before sending it on
            self.coll.sum_busy_s[self.me] += self.step_sum_s
            self.coll.env.timeout(self.step_sum_s).callbacks.append(self._step)
        else:
            self._step()


class Collectives:
    """Collectives over explicit member lists, on one network.

    ``sum_busy_s[rank]`` totals the local-sum time the rank spent inside reducing rings.
    """

    def __init__(self, env: simpy.Environment, net: ClusterNetwork, traced: int = 0, latency: LatencyOf | None = None):
        self.env = env
        self.net = net
        self.latency = latency
        self.messages = Messages(env, net)
        self.sum_busy_s: dict[int, float] = defaultdict(float)
        self.traced = traced
        self.delays: dict[int, Any] = {}
        self._layouts: dict[int, Any] = {}
        self._nodes_in: dict[int, tuple[Sequence[int], int]] = {}

    def note_delay(self, rank: int, rate_Bps: float, src: int, dst: int, info: Any) -> None:
        name = self.net.flows.link_names[info.bottleneck] if info.bottleneck >= 0 else "latency only"
        self.delays[rank] = Delay(src, dst, name, rate_Bps)

    def ring_latency(self, op: str, n_bytes: float, members: Sequence[int]) -> RingLatency:
        """The library's latency of ring ``op`` of ``n_bytes`` over ``members`` (node-major, the same
        count on every node they occupy)."""
        if self.latency is None or len(members) < 2:
            return PLAIN_RING
        found = self._nodes_in.get(id(members))
        if found is None or found[0] is not members:
            found = self._nodes_in[id(members)] = (members, len({self.net.node_of(r) for r in members}))
        nodes = found[1]
        return self.latency(op, float(n_bytes), nodes, len(members) // nodes)

    def ring(self, members: Sequence[int], pos: int, steps: int, chunk_bytes: float, tag: Any,
             sum_steps: int = 0, step_sum_s: float = 0.0, concurrent: Sequence[Sequence[int]] | None = None,
             latency: RingLatency = PLAIN_RING) -> simpy.Event:
        """``members[pos]``'s part of ``steps`` ring steps; the first ``sum_steps`` end with a local
        sum of ``step_sum_s``. Driven by callbacks (no process per step): the returned event
        fires when the rank's last step is complete."""
        return _RingPart(self, members, pos, steps, chunk_bytes, tag, sum_steps, step_sum_s, latency).done

    # -- the building blocks ----------------------------------------------------------------

    def ring_allreduce(self, members: Sequence[int], pos: int, n_bytes: float, tag: Any, sum_s: float = 0.0,
                       concurrent: Sequence[Sequence[int]] | None = None):
        """2(m-1) steps of S/m; the m-1 reduce-scatter steps each sum 1/m of the tensor."""
        m = len(members)
        yield self.ring(members, pos, 2 * (m - 1), n_bytes / m, (tag, "ring"), m - 1, sum_s / m, concurrent,
                        self.ring_latency("allreduce", n_bytes, members))

    def ring_reduce_scatter(self, members: Sequence[int], pos: int, n_bytes: float, tag: Any, sum_s: float = 0.0,
                            concurrent: Sequence[Sequence[int]] | None = None):
        """m-1 steps of S/m (``n_bytes`` is the whole input)."""
        m = len(members)
        yield self.ring(members, pos, m - 1, n_bytes / m, (tag, "reduce_scatter"), m - 1, sum_s / m, concurrent,
                        self.ring_latency("reduce_scatter", n_bytes, members))

    def ring_allgather(self, members: Sequence[int], pos: int, chunk_bytes: float, tag: Any,
                       concurrent: Sequence[Sequence[int]] | None = None):
        """m-1 steps, each forwarding one member's ``chunk_bytes``: every member receives (m-1) chunks."""
        m = len(members)
        yield self.ring(members, pos, m - 1, chunk_bytes, (tag, "allgather"), concurrent=concurrent,
                        latency=self.ring_latency("allgather", chunk_bytes * m, members))

    def hierarchical_allreduce(self, members: Sequence[int], pos: int, n_bytes: float, tag: Any, sum_s: float = 0.0,
                               concurrent: Sequence[Sequence[int]] | None = None):
        """Intra-node reduce-scatter, inter-node allreduce of the S/g shard, intra-node allgather.
        ``members`` are node-major with the same count g on every node they occupy; one member per
        node (or one node) is the flat ring, sharing links with ``concurrent`` as a flat ring does."""
        nodes, g, in_nodes, acrosses = self._layout(members)
        if g == 1 or len(nodes) == 1:
            yield from self.ring_allreduce(members, pos, n_bytes, tag, sum_s, concurrent)
            return
        node_index, local = divmod(pos, g)
        in_node, across = in_nodes[node_index], acrosses[local]
        shard, shard_sum_s = n_bytes / g, sum_s / g
        yield from self.ring_reduce_scatter(in_node, local, n_bytes, (tag, "intra", nodes[node_index]), sum_s, in_nodes)
        yield from self.ring_allreduce(across, node_index, shard, (tag, "inter", local), shard_sum_s, acrosses)
        yield from self.ring_allgather(in_node, local, shard, (tag, "intra-ag", nodes[node_index]), in_nodes)

    def _layout(self, members: Sequence[int]) -> tuple[list[int], int, list[list[int]], list[list[int]]]:
        """(nodes, g, members per node, the g across-node rings) of a node-major member list, once per list."""
        cache = self._layouts
        found = cache.get(id(members))
        if found is None or found[0] is not members:
            node_of = self.net.node_of
            nodes = sorted({node_of(r) for r in members})
            g = len(members) // len(nodes)
            in_nodes = [list(members[i * g:(i + 1) * g]) for i in range(len(nodes))]
            acrosses = [[members[d * g + local] for d in range(len(nodes))] for local in range(g)]
            found = cache[id(members)] = (members, (nodes, g, in_nodes, acrosses))
        return found[1]

    def ps_push_pull(self, rank: int, n_bytes: float, tag: Any, servers: int):
        """A worker's side: push S/P to each server (endpoints n..n+P-1), wait for the P answers."""
        n, shard = self.net.world_size, n_bytes / servers
        pushes = [self.messages.send((tag, "push", rank, p), rank, n + p, shard) for p in range(servers)]
        pulls = [self.messages.arrival((tag, "pull", p, rank)) for p in range(servers)]
        for event in pushes + pulls:  # noqa: UP028 (``yield from`` a list cannot take the events' values)
            yield event

    def ps_server(self, p: int, reductions: Sequence[tuple[Any, float]], servers: int, workers: Sequence[int]):
        """Server p: for each (tag, bytes) in order, wait for every worker's push, then answer all."""
        n = self.net.world_size
        for tag, n_bytes in reductions:
            if n_bytes <= 0:
                continue
            for rank in workers:
                yield self.messages.arrival((tag, "push", rank, p))
            for rank in workers:
                self.messages.send((tag, "pull", p, rank), n + p, rank, n_bytes / servers)


def isolated_ring_allreduce_s(cluster, n_bytes: float, spec, engine: Callable[..., Any] | None = None) -> float:
    """One ring allreduce of ``n_bytes`` over every rank of ``cluster`` (its fabric, if any), alone
    in the detailed mode's flow network, with ``spec``'s library latencies; ``engine``: the
    collectives class (Collectives, the event engine, by default; or sim.engine.periodic's)."""
    env = simpy.Environment()
    net = ClusterNetwork(env, per_flow_cluster(cluster, spec))
    coll = (engine or Collectives)(env, net, latency=ring_latency_for(cluster, spec))
    members = list(range(cluster.world_size))
    ends: list[float] = []

    def rank(pos: int):
        yield from coll.ring_allreduce(members, pos, n_bytes, "bucket")
        ends.append(env.now)

    for pos in members:
        env.process(rank(pos))
    env.run()
    if len(ends) != len(members):
        raise RuntimeError(f"ring deadlocked: {len(ends)} of {len(members)} ranks finished")
    return max(ends)
