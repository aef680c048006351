"""Where a job's nodes sit on a fabric, and which switches a flow crosses.

Placement (``placement_order``): ``contiguous`` puts job node k on host slot k; ``random`` takes the
slots in a permutation drawn from ``numpy.random.default_rng(seed)`` (a scheduler handing out free
machines); a list names the slot of each node. Parameter servers take the next slots in that order.

Routing (``Router.path``), between the switches two NICs plug into:
- ``ecmp``: every switch picks among its equal-cost next hops (the neighbours one hop closer to the
  destination switch, parallel cables included) by a hash of the flow's key, the seed and the switch
  (RFC 2992's hash-threshold next-hop selection; a per-switch seed as switches use against
  polarisation). A flow is one connection (source NIC, destination NIC, channel): all its messages
  take one path, and two flows collide on a cable as independent hashes make them.
- ``d-mod-k``: on a PGFT, up to the nearest common ancestor through parent port
  (dst / prod_{i<l} w_i p_i) mod w_l p_l, and down by the destination's label, parallel cable
  src mod p: SimGrid's FatTreeZone::get_local_route exactly (deterministic, no hash).
- ``first``: the first equal-cost next hop in cable order (deterministic).
Directed link ``2c`` crosses cable c from its first switch to its second, ``2c + 1`` the other way.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from sim.topology.fabric import Fabric, pgft_labels

_M64 = (1 << 64) - 1


def mix64(x: int) -> int:
    """splitmix64's finaliser (Steele, Lea and Flood, 'Fast splittable pseudorandom number
    generators', OOPSLA 2014): a 64-bit integer to a well-mixed 64-bit integer."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def flow_key(*parts: int) -> int:
    """One 64-bit key for a flow's identifying integers (its 5-tuple's stand-in)."""
    h = 0
    for p in parts:
        h = mix64(h ^ (p & _M64))
    return h


def placement_order(placement, host_slots: int, seed: int) -> tuple[int, ...]:
    """Host slots in the order job nodes (then servers) take them."""
    if placement == "contiguous":
        return tuple(range(host_slots))
    if placement == "random":
        return tuple(int(s) for s in np.random.default_rng(seed).permutation(host_slots))
    given = tuple(placement)
    used = set(given)
    return given + tuple(s for s in range(host_slots) if s not in used)


class Router:
    """Paths of flows over one fabric's switches (see the module docstring)."""

    def __init__(self, fabric: Fabric, seed: int = 0):
        self.fabric = fabric
        self.seed = seed
        self.adj = fabric.adjacency()
        self._dist: dict[int, list[int]] = {}
        self._next: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self._pgft = _PgftIndex(fabric) if fabric.routing == "d-mod-k" else None

    def distances_to(self, dst: int) -> list[int]:
        dist = self._dist.get(dst)
        if dist is None:
            dist = [-1] * len(self.adj)
            dist[dst] = 0
            queue = deque([dst])
            while queue:
                u = queue.popleft()
                for v, _ in self.adj[u]:
                    if dist[v] < 0:
                        dist[v] = dist[u] + 1
                        queue.append(v)
            self._dist[dst] = dist
        return dist

    def next_hops(self, u: int, dst: int) -> list[tuple[int, int]]:
        """(neighbour, directed link) of every cable from ``u`` one hop closer to ``dst``."""
        hops = self._next.get((u, dst))
        if hops is None:
            dist = self.distances_to(dst)
            cables = self.fabric.cables
            hops = [(v, 2 * c + (0 if cables[c][0] == u else 1)) for v, c in self.adj[u] if dist[v] == dist[u] - 1]
            self._next[(u, dst)] = hops
        return hops

    def path(self, src_switch: int, dst_switch: int, key: int, src_port: int = 0, dst_port: int = 0) -> list[int]:
        """Directed links from ``src_switch`` to ``dst_switch`` for the flow ``key``; ``src_port`` /
        ``dst_port``: the NICs' host-port indices (PGFT host positions, for d-mod-k)."""
        if src_switch == dst_switch:
            return []
        if self._pgft is not None:
            return self._pgft.path(src_port, dst_port)
        out, u = [], src_switch
        ecmp = self.fabric.routing == "ecmp"
        while u != dst_switch:
            hops = self.next_hops(u, dst_switch)
            if not hops:
                raise ValueError(f"no route from switch {self.fabric.switch_names[u]} to {self.fabric.switch_names[dst_switch]}")
            v, link = hops[mix64(key ^ mix64(self.seed * 0x100000001B3 + u)) % len(hops)] if ecmp and len(hops) > 1 else hops[0]
            out.append(link)
            u = v
        return out

    def spread(self, src_switch: int, dst_switch: int) -> tuple[dict[int, float], float]:
        """Per-hop ECMP as a fluid: the share of a flow's traffic on each directed link when every
        switch splits it equally over its equal-cost next hops (the expectation of ``path`` over
        flow keys, and what collision-free spreading gives), and the largest sum of hop latencies
        over those paths."""
        if src_switch == dst_switch:
            return {}, 0.0
        dist = self.distances_to(dst_switch)
        amount = {src_switch: 1.0}
        latency = {src_switch: 0.0}
        shares: dict[int, float] = {}
        kinds, cables = self.fabric.kinds, self.fabric.cables
        for d in range(dist[src_switch], 0, -1):
            layer = [u for u in amount if dist[u] == d]
            for u in layer:
                hops = self.next_hops(u, dst_switch)
                part = amount.pop(u) / len(hops)
                lat = latency.pop(u)
                for v, link in hops:
                    shares[link] = shares.get(link, 0.0) + part
                    amount[v] = amount.get(v, 0.0) + part
                    hop = lat + kinds[cables[link // 2][2]].hop_latency_s
                    latency[v] = max(latency.get(v, 0.0), hop)
        return shares, latency.get(dst_switch, 0.0)

    def path_latency_s(self, links: list[int]) -> float:
        kinds, cables = self.fabric.kinds, self.fabric.cables
        return sum(kinds[cables[link // 2][2]].hop_latency_s for link in links)

    def equal_cost_paths(self, src_switch: int, dst_switch: int) -> list[tuple[list[int], float]]:
        """Every minimal path as (directed links, the share of traffic per-hop ECMP splitting sends
        along it): the fluid expectation of ``path`` over flow keys."""
        if src_switch == dst_switch:
            return [([], 1.0)]
        out: list[tuple[list[int], float]] = []
        stack: list[tuple[int, list[int], float]] = [(src_switch, [], 1.0)]
        while stack:
            u, links, share = stack.pop()
            hops = self.next_hops(u, dst_switch)
            for v, link in hops:
                if v == dst_switch:
                    out.append(([*links, link], share / len(hops)))
                else:
                    stack.append((v, [*links, link], share / len(hops)))
        return out


class _PgftIndex:
    """Labels and cables of a PGFT for D-mod-k (SimGrid's FatTreeZone rules)."""

    def __init__(self, fabric: Fabric):
        assert fabric.pgft is not None
        m, w, p = fabric.pgft
        self.m, self.w, self.p = m, w, p
        self.h = len(m)
        self.label: list[tuple[int, ...]] = []
        self.level: list[int] = []
        self.by_label: dict[tuple[int, tuple[int, ...]], int] = {}
        for level in range(1, self.h + 1):
            for label in pgft_labels(level, m, w):
                self.by_label[(level, label)] = len(self.label)
                self.label.append(label)
                self.level.append(level)
        self.cables: dict[tuple[int, int], list[int]] = {}
        for c, (a, b, _) in enumerate(fabric.cables):
            self.cables.setdefault((a, b), []).append(c)

    def host_label(self, pos: int) -> tuple[int, ...]:
        digits = []
        for r in self.m:
            digits.append(pos % r)
            pos //= r
        return tuple(digits)

    def path(self, src: int, dst: int) -> list[int]:
        w, p, h = self.w, self.p, self.h
        hl = self.host_label(dst)
        sl = self.host_label(src)
        leaf = self.by_label[(1, (0,) + sl[1:])]
        if leaf == self.by_label[(1, (0,) + hl[1:])]:
            return []
        out, u = [], leaf
        while any(self.label[u][j] != hl[j] for j in range(self.level[u], h)):  # not above dst: go up
            level = self.level[u]
            d = dst
            for i in range(level):
                d //= w[i] * p[i]
            d %= w[level] * p[level]
            c, j = d % w[level], d // w[level]
            lab = self.label[u]
            parent = self.by_label[(level + 1, lab[:level] + (c,) + lab[level + 1:])]
            out.append(2 * self.cables[(u, parent)][j])
            u = parent
        while self.level[u] > 1:  # down by the destination's label; parallel cable src mod p
            level = self.level[u]
            lab = self.label[u]
            child = self.by_label[(level - 1, lab[:level - 1] + (hl[level - 1],) + lab[level:])]
            out.append(2 * self.cables[(child, u)][src % p[level - 1]] + 1)
            u = child
        return out
