"""Flow-level network for SimPy: links are capacities, flows share them max-min fairly.

A flow crosses a path of links. It first pays a start-up latency alpha (the per-message cost
of the alpha-beta model), then its bytes flow at the rate max-min fairness gives it
(progressive filling: sim.engine.maxmin). Rates are recomputed whenever flows start or end, but
only inside the connected components of links and flows that the change touches (a flow alone on
its links just gets its narrowest capacity); flows whose latency ends at the same instant start in
one recomputation, and flows that end together (within ``TIME_RTOL``) end in one. Completion
times live in a heap (stale entries skipped by version) and one SimPy wake-up is scheduled for the
earliest, so a step of a 256-rank ring costs two recomputations and a handful of events, not one
per rate change.

Every link counts the bytes that crossed it and the time it carried at least one flow
(``link_bytes``, ``busy_s``); every flow remembers the link that held it to its lowest rate (its
bottleneck), and a message's done event carries ``MessageInfo`` of its slowest sub-flow: which
link delayed which flow.

``ClusterNetwork`` builds the links of a ``Cluster`` (see its docstring) and offers
``yield net.transfer(src, dst, n_bytes)``.
"""

from __future__ import annotations

import gc
import heapq
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import simpy

from sim.catalog import Link
from sim.cluster import Cluster
from sim.engine.maxmin import max_min_arrays, max_min_rates

TIME_RTOL = 1e-13
"""Flows whose completion times differ by less than this (relative) complete in one event."""
ARRAY_SOLVER_FLOWS = 64
"""Components with more flows than this are shared by numpy (same rates, fewer Python loops)."""


@dataclass(frozen=True)
class MessageInfo:
    """What a finished message reports (the value of its done event): its slowest sub-flow's
    lowest rate and the link that held it there."""

    bottleneck: int
    rate_Bps: float
    start_s: float
    end_s: float


class _Message:
    """One transfer, possibly split into sub-flows; ``done`` fires when the last one ends."""

    __slots__ = ("done", "open_subflows", "start_s", "slowest")

    def __init__(self, done: simpy.Event, subflows: int, start_s: float):
        self.done = done
        self.open_subflows = subflows
        self.start_s = start_s
        self.slowest: _Flow | None = None


class _Flow:
    __slots__ = ("fid", "path", "remaining", "rate", "updated_s", "version", "message", "min_rate", "neck")

    def __init__(self, fid: int, path: tuple[int, ...], n_bytes: float, message: _Message):
        self.fid = fid
        self.path = path
        self.remaining = n_bytes
        self.rate = 0.0
        self.updated_s = 0.0
        self.version = 0
        self.message = message
        self.min_rate = float("inf")
        self.neck = path[0] if path else -1


class FlowNetwork:
    """Links with capacities (bytes/s) and flows sharing them max-min fairly."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.capacity_Bps: list[float] = []
        self.link_names: list[str] = []
        self.link_tiers: list[str] = []
        self.link_bytes: list[float] = []
        self.busy_s: list[float] = []
        self._busy_since: list[float] = []
        self._on_link: list[dict[int, _Flow]] = []
        self._heap: list[tuple[float, int, int, _Flow]] = []
        self._wakeups: list[float] = []
        self._activations: dict[float, list[_Flow]] = {}
        self._next_fid = 0
        self.flows_started = 0
        self.recomputations = 0

    def add_link(self, name: str, capacity_Bps: float, tier: str = "") -> int:
        if not capacity_Bps > 0:
            raise ValueError(f"link {name}: capacity must be positive, got {capacity_Bps}")
        self.capacity_Bps.append(float(capacity_Bps))
        self.link_names.append(name)
        self.link_tiers.append(tier)
        self.link_bytes.append(0.0)
        self.busy_s.append(0.0)
        self._busy_since.append(0.0)
        self._on_link.append({})
        return len(self.capacity_Bps) - 1

    def _iter_active(self):
        seen: set[int] = set()
        for flows in self._on_link:
            for fid, f in flows.items():
                if fid not in seen:
                    seen.add(fid)
                    yield f

    def rates_Bps(self) -> dict[int, float]:
        """Current rate of every active flow by flow id (for tests and traces)."""
        return {f.fid: f.rate for f in self._iter_active()}

    def bottlenecks(self) -> dict[int, int]:
        """The link that holds each active flow to its current rate (for tests and traces)."""
        return {f.fid: f.neck for f in self._iter_active()}

    # -- starting flows ---------------------------------------------------------------------

    def start(self, paths: Sequence[Sequence[int]], bytes_per_path: float, alpha_s: float,
              done: simpy.Event | None = None, pace: float = 1.0) -> simpy.Event:
        """One message of ``len(paths) x bytes_per_path`` bytes, one sub-flow per path.

        The sub-flows wait ``alpha_s`` and then share the links; the returned event (``done``
        if given) succeeds when the last sub-flow has delivered its bytes, with a ``MessageInfo``.
        ``pace`` >= 1: each sub-flow occupies the links as ``pace`` x its bytes would (a
        protocol's overhead); the links count the bytes themselves.
        """
        done = done if done is not None else self.env.event()
        if bytes_per_path <= 0 or not paths:
            start = self.env.now
            self._after(alpha_s, lambda _: done.succeed(MessageInfo(-1, float("inf"), start, self.env.now)))
            return done
        message = _Message(done, len(paths), self.env.now)
        at = self.env.now + max(0.0, alpha_s)
        batch = self._activations.get(at)
        if batch is None:  # the first message to start at this instant: one wake-up for all
            batch = self._activations[at] = []
            self._after(alpha_s, lambda _: self._activate(at))
        fid = self._next_fid
        link_bytes = self.link_bytes
        for path in paths:
            batch.append(_Flow(fid, tuple(path), float(bytes_per_path) * pace, message))
            for link in path:
                link_bytes[link] += bytes_per_path
            fid += 1
        self._next_fid = fid
        self.flows_started += len(paths)
        return done

    def _after(self, delay_s: float, callback) -> None:
        timeout = self.env.timeout(max(0.0, delay_s))
        timeout.callbacks.append(callback)

    def _activate(self, at: float) -> None:
        """Put the flows whose latency ends now on their links and re-share."""
        now = self.env.now
        dirty: dict[int, None] = {}
        on_link, since = self._on_link, self._busy_since
        for f in self._activations.pop(at):
            f.updated_s = now
            for link in f.path:
                flows = on_link[link]
                if not flows:
                    since[link] = now
                flows[f.fid] = f
                dirty[link] = None
        self._reshare(dirty)

    # -- completing flows -------------------------------------------------------------------

    def _wake(self, _event) -> None:
        heapq.heappop(self._wakeups)
        now = self.env.now
        horizon = now + TIME_RTOL * max(now, 1e-30)
        dirty: dict[int, None] = {}
        finished = []
        on_link, busy, since = self._on_link, self.busy_s, self._busy_since
        while self._heap and self._heap[0][0] <= horizon:
            _, _, version, f = heapq.heappop(self._heap)
            if version != f.version:
                continue
            f.version = -1
            for link in f.path:
                flows = on_link[link]
                del flows[f.fid]
                if not flows:
                    busy[link] += now - since[link]
                dirty[link] = None
            finished.append(f)
        for f in finished:
            message = f.message
            if message.slowest is None or f.min_rate < message.slowest.min_rate:
                message.slowest = f
            message.open_subflows -= 1
            if message.open_subflows == 0:
                s = message.slowest
                message.done.succeed(MessageInfo(s.neck, s.min_rate, message.start_s, now))
        if dirty:
            self._reshare(dirty)
        else:
            self._schedule_wakeup()

    def _schedule_wakeup(self) -> None:
        heap = self._heap
        while heap and heap[0][2] != heap[0][3].version:
            heapq.heappop(heap)
        if not heap:
            return
        at = heap[0][0]
        if self._wakeups and self._wakeups[0] <= at:
            return
        heapq.heappush(self._wakeups, at)
        self._after(at - self.env.now, self._wake)

    # -- max-min fair sharing ---------------------------------------------------------------

    def _reshare(self, dirty_links: dict[int, None]) -> None:
        """Recompute the max-min fair rates of the components reachable from ``dirty_links``.

        A flow alone on every link of its path is a component of its own: its rate is its
        narrowest link's capacity (the common case inside a node). The others are collected
        with the links and flows they are connected to and shared by progressive filling.
        """
        self.recomputations += 1
        on_link, capacity = self._on_link, self.capacity_Bps
        now = self.env.now
        links: dict[int, None] = {}
        flows: dict[int, _Flow] = {}
        stack: list[int] = []
        alone: set[int] = set()
        for dirty in dirty_links:
            for fid, f in on_link[dirty].items():
                if fid in flows or fid in alone:
                    continue
                path = f.path
                if all(len(on_link[link]) == 1 for link in path):
                    alone.add(fid)
                    neck = min(path, key=capacity.__getitem__)
                    self._set_rate(f, capacity[neck], neck, now)
                    continue
                flows[fid] = f
                for link in path:
                    if link not in links:
                        links[link] = None
                        stack.append(link)
        while stack:
            link = stack.pop()
            for fid, f in on_link[link].items():
                if fid in flows:
                    continue
                flows[fid] = f
                for other in f.path:
                    if other not in links:
                        links[other] = None
                        stack.append(other)
        if len(flows) > ARRAY_SOLVER_FLOWS:
            self._reshare_arrays(list(flows.values()), now)
        elif flows:
            for fid, (rate, neck) in max_min_rates(flows, capacity, on_link, links).items():
                self._set_rate(flows[fid], rate, neck, now)
        self._schedule_wakeup()

    def _reshare_arrays(self, flows: list[_Flow], now: float) -> None:
        """The same sharing by numpy (sim.engine.maxmin.max_min_arrays) for big components."""
        lengths = [len(f.path) for f in flows]
        ptr = np.zeros(len(flows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=ptr[1:])
        links = np.fromiter((link for f in flows for link in f.path), dtype=np.int64, count=int(ptr[-1]))
        used, local = np.unique(links, return_inverse=True)
        capacity = np.asarray(self.capacity_Bps)[used]
        rates, necks = max_min_arrays(ptr, local.astype(np.int64), capacity)
        necks = np.where(necks >= 0, used[np.maximum(necks, 0)], -1)
        for f, rate, neck in zip(flows, rates.tolist(), necks.tolist(), strict=True):
            self._set_rate(f, rate, neck, now)

    def _set_rate(self, f: _Flow, rate: float, neck: int, now: float) -> None:
        """Advance ``f`` to ``now`` at its old rate, then give it ``rate`` and a new finish time
        (a flow whose rate did not change keeps its finish time and its heap entry)."""
        if rate == f.rate and f.version > 0:
            return
        remaining = f.remaining - f.rate * (now - f.updated_s)
        f.remaining = remaining
        f.updated_s = now
        f.rate = rate
        if rate < f.min_rate:
            f.min_rate, f.neck = rate, neck
        f.version += 1
        heapq.heappush(self._heap, (now + max(remaining, 0.0) / rate, f.fid, f.version, f))


class ClusterNetwork:
    """The links of a cluster, and transfers between its endpoints.

    Endpoints are the ranks 0..n-1 in node-major order (rank = node x gpus_per_node + local)
    and then the parameter-server hosts n..n+servers-1.
    - Each GPU has an intra-node port, tx and rx, of ``intra_link.effective_Bps`` each.
    - Each node has ``nics_per_node`` NICs, tx and rx, of ``inter_link.effective_Bps``. An
      inter-node message is split into one equal sub-flow per NIC, NIC j to NIC j (NCCL spreads
      its channels over the NICs; the fast path divides the load by nics_per_node).
    On a single switch (no ``cluster.topology``, or ``single_switch``):
    - With oversubscription o > 1, traffic leaving (entering) the worker nodes crosses a core
      uplink (downlink) of nodes x nics x B / o per direction: when every NIC is busy each
      gets B / o, the fast path's load o / nics. (With o = 1 the core can never bind, as the
      NICs feeding it add up to its capacity, so it is left out.)
    - A parameter-server host has one NIC of the inter link; with o > 1 its port into the
      core carries B / o, as the cluster's definition of oversubscription ("flows that cross
      the core get 1/oversubscription of a NIC") and the fast path's server load n x o say.
    The alpha a message pays is that of the slowest link class on its path.
    On a fabric (``sim.engine.fabric_paths``): job node k sits on host slot ``slot_order[k]``,
    server p on ``slot_order[nodes + p]`` (one NIC); between the NICs' switches a sub-flow crosses
    the fabric's cables as the fabric routes it (ECMP seeded by ``seed``, or deterministic), each
    cable a link of its catalog link's payload rate, each hop adding its latency to the alpha.
    """

    def __init__(self, env: simpy.Environment, cluster: Cluster, servers: int = 0, seed: int = 0):
        self.env = env
        self.cluster = cluster
        self.flows = FlowNetwork(env)
        self.world_size = cluster.world_size
        self.servers = servers
        g, nodes, nics = cluster.gpus_per_node, cluster.nodes, cluster.nics_per_node
        intra_Bps, inter_Bps = cluster.intra_link.effective_Bps, cluster.inter_link.effective_Bps
        add = self.flows.add_link
        self._gpu_tx = [add(f"gpu{r}.tx", intra_Bps, "gpu") for r in range(self.world_size)] if g > 1 else []
        self._gpu_rx = [add(f"gpu{r}.rx", intra_Bps, "gpu") for r in range(self.world_size)] if g > 1 else []
        self.bytes_by_link: dict[str, float] = {"intra": 0.0, "inter": 0.0}
        self.sent_bytes: dict[int, float] = defaultdict(float)
        self.received_bytes: dict[int, float] = defaultdict(float)
        self.replica_ranks, self.replicas = 0, 1
        """Set by an engine that simulates one replica for ``replicas`` identical ones: a message
        between two of the first ``replica_ranks`` ranks counts ``replicas`` times in
        ``bytes_by_link`` (each replica sends its own); per-endpoint counts stay the rank's."""
        self._routes: dict[tuple[int, int], tuple[list[tuple[int, ...]], str, float]] = {}
        self._arrivals: dict[float, list[tuple[simpy.Event, object]]] = {}
        topology = cluster.topology
        self.fabric = None
        if topology is not None and topology.fabric.kind != "single_switch":
            from sim.engine.fabric_paths import FabricPaths

            self.fabric = FabricPaths(self.flows, cluster, servers, seed)
            return
        over = cluster.oversubscription
        self._nic_tx = [[add(f"node{d}.nic{j}.tx", inter_Bps, "nic") for j in range(nics)] for d in range(nodes)]
        self._nic_rx = [[add(f"node{d}.nic{j}.rx", inter_Bps, "nic") for j in range(nics)] for d in range(nodes)]
        self._core_up: tuple[int, ...] = ()
        self._core_down: tuple[int, ...] = ()
        self._server_up: list[tuple[int, ...]] = [()] * servers
        self._server_down: list[tuple[int, ...]] = [()] * servers
        if over > 1:
            self._core_up = (add("core.up", nodes * nics * inter_Bps / over, "core"),)
            self._core_down = (add("core.down", nodes * nics * inter_Bps / over, "core"),)
            self._server_up = [(add(f"ps{p}.core.up", inter_Bps / over, "core"),) for p in range(servers)]
            self._server_down = [(add(f"ps{p}.core.down", inter_Bps / over, "core"),) for p in range(servers)]
        self._server_tx = [add(f"ps{p}.nic.tx", inter_Bps, "nic") for p in range(servers)]
        self._server_rx = [add(f"ps{p}.nic.rx", inter_Bps, "nic") for p in range(servers)]

    def node_of(self, endpoint: int) -> int:
        """The node of a rank; -1 - p for parameter-server host p."""
        if endpoint >= self.world_size:
            return -1 - (endpoint - self.world_size)
        return endpoint // self.cluster.gpus_per_node

    def link_class(self, src: int, dst: int) -> str:
        return "intra" if self.node_of(src) == self.node_of(dst) else "inter"

    def paths(self, src: int, dst: int) -> list[tuple[int, ...]]:
        """The sub-flow paths of a message from ``src`` to ``dst``."""
        return self.route(src, dst)[0]

    def route(self, src: int, dst: int) -> tuple[list[tuple[int, ...]], str, float]:
        """(sub-flow paths, link class, alpha) of a message from ``src`` to ``dst`` (cached)."""
        route = self._routes.get((src, dst))
        if route is None:
            route = self._routes[(src, dst)] = self._route(src, dst)
        return route

    def _route(self, src: int, dst: int) -> tuple[list[tuple[int, ...]], str, float]:
        if src == dst:
            raise ValueError(f"a transfer from endpoint {src} to itself")
        a, b = self.node_of(src), self.node_of(dst)
        if a == b:
            return [(self._gpu_tx[src], self._gpu_rx[dst])], "intra", self.cluster.intra_link.alpha_s
        if a < 0 and b < 0:
            raise ValueError("transfers between parameter servers are not modelled")
        if self.fabric is not None:
            paths, alpha_s = self.fabric.paths(a, b)
            return paths, "inter", alpha_s
        nics = self.cluster.nics_per_node
        if a >= 0 and b >= 0:
            paths = [(self._nic_tx[a][j], *self._core_up, *self._core_down, self._nic_rx[b][j]) for j in range(nics)]
        elif a >= 0:  # worker -> server
            p = -1 - b
            paths = [(self._nic_tx[a][j], *self._core_up, *self._server_down[p], self._server_rx[p]) for j in range(nics)]
        else:  # server -> worker
            p = -1 - a
            paths = [(self._server_tx[p], *self._server_up[p], *self._core_down, self._nic_rx[b][j]) for j in range(nics)]
        return paths, "inter", self.cluster.inter_link.alpha_s

    def link_for(self, link_class: str) -> Link:
        return self.cluster.intra_link if link_class == "intra" else self.cluster.inter_link

    def count(self, src: int, dst: int, n_bytes: float, link_class: str) -> None:
        """Book ``n_bytes`` sent from ``src`` to ``dst`` (by ``transfer``, or by an engine that
        costs the message itself: sim.engine.periodic)."""
        copies = self.replicas if src < self.replica_ranks and dst < self.replica_ranks else 1
        self.bytes_by_link[link_class] += n_bytes * copies
        self.sent_bytes[src] += n_bytes
        self.received_bytes[dst] += n_bytes

    def transfer(self, src: int, dst: int, n_bytes: float, done: simpy.Event | None = None,
                 extra_alpha_s: float = 0.0) -> simpy.Event:
        """Send ``n_bytes`` from ``src`` to ``dst`` after the route's alpha (and ``extra_alpha_s``);
        the event succeeds on delivery."""
        paths, link_class, alpha_s = self.route(src, dst)
        self.count(src, dst, n_bytes, link_class)
        return self.flows.start(paths, n_bytes / len(paths), alpha_s + extra_alpha_s, done)

    def transfer_pipelined(self, src: int, dst: int, n_bytes: float, left: simpy.Event, arrived: simpy.Event,
                           extra_alpha_s: float = 0.0, pace: float = 1.0) -> None:
        """Send ``n_bytes`` from ``src`` to ``dst`` as a library with slots in flight does: the
        bytes flow at once (occupying the links as ``pace`` x their size would), ``left``
        succeeds when they have left the sender (flow end) and ``arrived`` the route's alpha
        (and ``extra_alpha_s``) later."""
        paths, link_class, alpha_s = self.route(src, dst)
        self.count(src, dst, n_bytes, link_class)
        delay_s = alpha_s + extra_alpha_s

        def deliver(event: simpy.Event) -> None:
            at = self.env.now + delay_s
            batch = self._arrivals.get(at)
            if batch is None:  # the first arrival at this instant: one wake-up for all
                batch = self._arrivals[at] = []
                self.env.timeout(delay_s).callbacks.append(lambda _t: self._arrive(at))
            batch.append((arrived, event.value))

        self.flows.start(paths, n_bytes / len(paths), 0.0, left, pace).callbacks.append(deliver)

    def _arrive(self, at: float) -> None:
        for event, value in self._arrivals.pop(at):
            event.succeed(value)


def run_to_end(env: simpy.Environment) -> int:
    """Step ``env`` until no event is left; the number of events. The cycle collector is off
    meanwhile: a detailed run keeps tens of thousands of live processes, and the collector's
    passes grow with them."""
    events = 0
    collecting = gc.isenabled()
    gc.disable()
    try:
        while env.peek() != float("inf"):
            env.step()
            events += 1
    finally:
        if collecting:
            gc.enable()
    return events
