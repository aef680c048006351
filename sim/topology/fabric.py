"""A datacenter fabric as data: switches, the cables between them, and the host slots hanging off them.

A *host slot* is a machine's place in the fabric: its NIC j plugs into switch ``host_ports[slot][j]``
(one NIC port per ``nics_per_node``). A job's nodes are put on slots by a placement
(``sim.topology.routing.placement_order``). Cables join two switches; each cable is full duplex, so the
flow network sees it as two directed links of the cable's capacity. Parallel cables between the same
two switches are separate cables (ECMP spreads over them as over any equal-cost next hop).

Builders (pure, from numbers to a ``Fabric``):
- ``pgft``: the parallel generalized fat tree PGFT(h; m; w; p) of Zahavi et al. ("Optimized InfiniBand
  fat-tree routing for shift all-to-all communication patterns", 2010), labelled exactly as SimGrid's
  ``FAT_TREE`` cluster labels it (src/kernel/routing/FatTreeZone.cpp, generate_labels, are_related,
  connect_node_to_parents) so that D-mod-k routes here are SimGrid's routes and a platform written
  from the same numbers is the same fabric. m_l: children of a level-l switch; w_l: parents of a node
  at level l-1; p_l: parallel cables between a node and each parent. Hosts: prod m; switches at level
  l: prod_{i<=l} w_i x prod_{i>l} m_i.
- ``fat_tree_params``: 2 or 3 tiers of radix-k switches with an oversubscription per tier (down ports /
  up ports of that tier's switches) turned into PGFT numbers, as many top-level subtrees as the job needs.
- ``rail_optimized``: leaf-spine where NIC j of every node in a rail group plugs into that group's
  rail switch j (NVIDIA DGX SuperPOD's design), every rail switch cabled to every spine.
- files: ``sim.topology.spec`` reads switches, cables and host slots from YAML into the same form.
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass, field

from sim.catalog import Link


@dataclass(frozen=True, eq=False)
class CableKind:
    """What one tier's cables are: a catalog link (its kind selects the transport: rate, framing) and
    the latency a hop over it and through the next switch adds."""

    link: Link
    hop_latency_s: float
    tier: str


@dataclass(frozen=True, eq=False)
class Fabric:
    kind: str
    """single_switch, fat_tree, rail_optimized or file."""
    switch_names: tuple[str, ...]
    switch_level: tuple[int, ...]
    """1 for the switches hosts plug into, 2 above them, ... (files: the level their tier implies)."""
    cables: tuple[tuple[int, int, int], ...]
    """(switch a, switch b, index into ``kinds``); in trees a is the lower switch."""
    kinds: tuple[CableKind, ...]
    host_ports: tuple[tuple[int, ...], ...]
    """For each host slot, the switch its NIC j plugs into."""
    routing: str
    """ecmp (a seeded hash per flow and switch), d-mod-k (PGFT only) or first (the first
    equal-cost next hop: deterministic)."""
    description: str
    pgft: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None = None
    """(m, w, p) when the fabric is a PGFT (switch i at level l is ``pgft_switch(l, position)``)."""
    key: str = field(default="")

    @property
    def host_slots(self) -> int:
        return len(self.host_ports)

    @property
    def levels(self) -> int:
        return max(self.switch_level, default=1)

    def adjacency(self) -> list[list[tuple[int, int]]]:
        """For every switch, (neighbour, cable index) of each cable it ends."""
        out: list[list[tuple[int, int]]] = [[] for _ in self.switch_names]
        for c, (a, b, _) in enumerate(self.cables):
            out[a].append((b, c))
            out[b].append((a, c))
        return out

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fabric) and other.key == self.key


def _keyed(fabric: Fabric) -> Fabric:
    """The fabric with a digest of everything that defines it, for equality and caches."""
    text = repr((fabric.kind, fabric.switch_names, fabric.switch_level, fabric.cables,
                 [(k.link, k.hop_latency_s, k.tier) for k in fabric.kinds], fabric.host_ports, fabric.routing,
                 fabric.pgft))
    return Fabric(**{**fabric.__dict__, "key": hashlib.sha1(text.encode()).hexdigest()})


def disconnected_switches(switch_count: int, cables: tuple[tuple[int, int, int], ...]) -> list[int]:
    """Switches not reachable from switch 0 over the cables (empty: connected)."""
    if switch_count == 0:
        return []
    adj: list[list[int]] = [[] for _ in range(switch_count)]
    for a, b, _ in cables:
        adj[a].append(b)
        adj[b].append(a)
    seen = [False] * switch_count
    seen[0] = True
    queue = deque([0])
    while queue:
        u = queue.popleft()
        for v in adj[u]:
            if not seen[v]:
                seen[v] = True
                queue.append(v)
    return [s for s in range(switch_count) if not seen[s]]


# -- single switch --------------------------------------------------------------------------

def single_switch(host_slots: int, nics: int) -> Fabric:
    """One core switch, every NIC on it (today's cluster; its oversubscription stays the cluster's)."""
    return _keyed(Fabric(kind="single_switch", switch_names=("core",), switch_level=(1,), cables=(), kinds=(),
                         host_ports=tuple((0,) * nics for _ in range(host_slots)), routing="first",
                         description=f"one switch, {host_slots} host slots"))


# -- parallel generalized fat trees ---------------------------------------------------------

def pgft_counts(m: tuple[int, ...], w: tuple[int, ...]) -> list[int]:
    """Nodes per level: [hosts, level-1 switches, ..., level-h switches] (FatTreeZone::generate_switches)."""
    h = len(m)
    counts = [1]
    for x in m:
        counts[0] *= x
    for level in range(1, h + 1):
        n = 1
        for j in range(level):
            n *= w[j]
        for j in range(level, h):
            n *= m[j]
        counts.append(n)
    return counts


def pgft_labels(level: int, m: tuple[int, ...], w: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Labels of the nodes at ``level`` in position order: digit j counts w_j (j < level) or m_j
    (j >= level); digit 0 runs fastest (FatTreeZone::generate_labels)."""
    h = len(m)
    radix = [w[j] if j < level else m[j] for j in range(h)]
    total = 1
    for r in radix:
        total *= r
    labels = []
    for pos in range(total):
        digits, x = [], pos
        for r in radix:
            digits.append(x % r)
            x //= r
        labels.append(tuple(digits))
    return labels


def pgft(m: tuple[int, ...], w: tuple[int, ...], p: tuple[int, ...], kinds: tuple[CableKind, ...], nics: int,
         routing: str, description: str) -> Fabric:
    """PGFT(h; m; w; p) with its hosts grouped ``nics`` at a time into host slots (NIC j of slot s is
    PGFT host s x nics + j). ``kinds[l]`` are the cables between levels l+1 and l+2 (kinds[0]: leaf up)."""
    h = len(m)
    counts = pgft_counts(m, w)
    names: list[str] = []
    level_of: list[int] = []
    index: dict[tuple[int, tuple[int, ...]], int] = {}
    for level in range(1, h + 1):
        for pos, label in enumerate(pgft_labels(level, m, w)):
            index[(level, label)] = len(names)
            names.append(f"L{level}s{pos}")
            level_of.append(level)
    cables: list[tuple[int, int, int]] = []
    host_switch: list[int] = []
    for level in range(0, h):  # nodes at ``level`` to their parents at level + 1
        for label in pgft_labels(level, m, w):
            for c in range(w[level]):  # the parent's digit ``level`` is c; every other digit is the child's
                parent = label[:level] + (c,) + label[level + 1:]
                upper = index[(level + 1, parent)]
                if level == 0:
                    host_switch.append(upper)  # hosts: one parent each here (w_1 = 1 is checked by the caller)
                    continue
                lower = index[(level, label)]
                cables.extend((lower, upper, level - 1) for _ in range(p[level]))
    if len(host_switch) != counts[0] or counts[0] % nics:
        raise ValueError("a PGFT for host slots needs w_1 = 1 and hosts divisible by the NICs per node")
    slots = tuple(tuple(host_switch[s * nics + j] for j in range(nics)) for s in range(counts[0] // nics))
    return _keyed(Fabric(kind="fat_tree", switch_names=tuple(names), switch_level=tuple(level_of), cables=tuple(cables),
                         kinds=kinds, host_ports=slots, routing=routing, description=description, pgft=(m, w, p)))


def split_radix(radix: int, oversubscription: float) -> tuple[int, int] | None:
    """(down, up) ports of a radix-k switch with down / up = oversubscription; None if they are not whole."""
    up = radix / (1.0 + oversubscription)
    down = radix - up
    if abs(up - round(up)) > 1e-9 or round(up) < 1 or round(down) < 1:
        return None
    return round(down), round(up)


def fat_tree_params(tiers: int, radix: int, oversubscription: tuple[float, ...], host_ports_needed: int,
                    subtrees: int | None = None) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """PGFT numbers of a ``tiers``-tier fat tree of radix-``radix`` switches.

    Tier 1 (leaf) switches split their ports down:up as oversubscription[0]; with 3 tiers the
    tier-2 switches split as oversubscription[1]; the top tier's ports all point down, one per
    subtree below (a leaf for 2 tiers, a pod for 3). ``subtrees`` subtrees are built (default: as
    few as hold ``host_ports_needed``). Raises ValueError with the reason when the numbers do not tile.
    """
    d1u1 = split_radix(radix, oversubscription[0])
    if d1u1 is None:
        raise ValueError(f"radix {radix} does not split into whole down:up ports at {oversubscription[0]}:1")
    d1, u1 = d1u1
    if tiers == 2:
        per_subtree = d1
        m: tuple[int, ...] = (d1,)
        w: tuple[int, ...] = (1, u1)
    else:
        d2u2 = split_radix(radix, oversubscription[1])
        if d2u2 is None:
            raise ValueError(f"radix {radix} does not split into whole down:up ports at {oversubscription[1]}:1")
        d2, u2 = d2u2
        per_subtree = d1 * d2
        m, w = (d1, d2), (1, u1, u2)
    need = subtrees if subtrees is not None else -(-host_ports_needed // per_subtree)
    if need > radix:
        raise ValueError(f"{need} {'leaves' if tiers == 2 else 'pods'} of {per_subtree} host ports are needed, "
                         f"a radix-{radix} top tier has {radix} ports")
    return (*m, max(1, need)), w, (1,) * tiers


def rail_optimized(nodes_per_group: int, rails: int, groups: int, spines: int, kinds: tuple[CableKind, ...],
                   routing: str, description: str) -> Fabric:
    """``groups`` rail groups of ``nodes_per_group`` nodes; NIC j of each node on rail switch j of its
    group; every rail switch cabled once to each of ``spines`` spines."""
    names = [f"g{g}.rail{r}" for g in range(groups) for r in range(rails)] + [f"spine{s}" for s in range(spines)]
    level = [1] * (groups * rails) + [2] * spines
    cables = tuple((leaf, groups * rails + s, 0) for leaf in range(groups * rails) for s in range(spines))
    slots = tuple(tuple(g * rails + r for r in range(rails)) for g in range(groups) for _ in range(nodes_per_group))
    return _keyed(Fabric(kind="rail_optimized", switch_names=tuple(names), switch_level=tuple(level), cables=cables,
                         kinds=kinds, host_ports=slots, routing=routing, description=description))


def from_parts(names: list[str], levels: list[int], cables: list[tuple[int, int, int]], kinds: list[CableKind],
               host_ports: list[tuple[int, ...]], routing: str, description: str) -> Fabric:
    return _keyed(Fabric(kind="file", switch_names=tuple(names), switch_level=tuple(levels), cables=tuple(cables),
                         kinds=tuple(kinds), host_ports=tuple(host_ports), routing=routing, description=description))
