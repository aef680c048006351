"""``cluster.topology`` and ``cluster.placement``: reading, checking, building the fabric.

```yaml
cluster:
  topology: {kind: fat_tree, tiers: 3, radix: 32, oversubscription: [2, 1], link: ib_hdr,
             hop_latency_us: 0.3, routing: ecmp}
  placement: contiguous            # or random (seeded by simulation.seed), or a list of host slots
```
- ``single_switch`` (the default): one core switch; ``cluster.oversubscription`` as before.
- ``fat_tree``: ``tiers`` 2 or 3 of radix-``radix`` switches; ``oversubscription`` per tier below the
  top (a number: the leaf tier's); ``link``/``links`` (per tier) name catalog links (default: the
  cluster's inter_link); ``hop_latency_us`` what one more switch hop adds; ``routing`` ecmp or d-mod-k;
  ``pods`` (3 tiers) or ``leaves`` (2 tiers): how many subtrees to build (default: as few as hold the job).
- ``rail_optimized``: NIC j of every node in a group on rail switch j, spines above; ``radix``,
  ``oversubscription`` (rail switches' down:up), ``link``, ``hop_latency_us``, ``routing`` (ecmp or first).
- ``file``: ``{kind: file, path: fabric.yaml}`` (or the path alone): switches, cables, host slots.
Every error names its field and what is allowed (sim.errors.ConfigError).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.catalog import Catalog, Link
from sim.errors import ConfigError, reject_unknown_keys, require_choice, require_positive
from sim.topology.fabric import (
    CableKind,
    Fabric,
    disconnected_switches,
    fat_tree_params,
    from_parts,
    pgft,
    rail_optimized,
    single_switch,
    split_radix,
)
from sim.yamlio import read_yaml

KINDS = ("single_switch", "fat_tree", "rail_optimized", "file")
PLACEMENTS = ("contiguous", "random")
DEFAULT_HOP_LATENCY_US = 0.3
"""What one more switch on a path adds: about a Quantum-2 InfiniBand switch's port-to-port latency
(sources give under 150 ns to about 330 ns: router-switch.com's QM9700 vs SN5400 FAQ; yobitel's
Quantum-2 knowledge base); the catalog link's own latency_us already holds the NICs and the first
switch. Set your fabric's figure with hop_latency_us."""
_KEYS = {
    "single_switch": ("kind",),
    "fat_tree": ("kind", "tiers", "radix", "oversubscription", "link", "links", "hop_latency_us", "routing",
                 "pods", "leaves"),
    "rail_optimized": ("kind", "radix", "oversubscription", "link", "hop_latency_us", "routing"),
    "file": ("kind", "path"),
}
_ROUTINGS = {"fat_tree": ("ecmp", "d-mod-k"), "rail_optimized": ("ecmp", "first"), "file": ("ecmp", "first")}
_FILE_KEYS = ("switches", "cables", "hosts", "routing", "description")


@dataclass(frozen=True, eq=False)
class Topology:
    """A cluster's fabric and where the job's nodes sit on it."""

    fabric: Fabric
    slot_order: tuple[int, ...]
    """Host slots in placement order: job node k on slot_order[k], parameter server p on
    slot_order[nodes + p]."""
    spec: dict[str, Any]
    """The ``cluster.topology`` mapping it was built from (to rebuild it for another world size)."""
    placement: Any
    seed: int
    host_link: Link
    """The cluster's inter_link as given: the NICs' link (the cluster's own inter_link also holds
    the fabric's extra latency on the ring's longest path, for the fast path)."""
    catalog: Catalog | None = None
    """Where the spec's link names resolve (to rebuild the fabric for another world size)."""
    ring_extra_latency_s: float = 0.0
    ring_load: float = 1.0
    """What ``sim.costs.tiers.ring_view`` found: folded into the cluster's inter_link latency and
    oversubscription, which the fast path reads."""
    ring_mean_extra_latency_s: float = 0.0
    """The mean over the ring's edges of their switch hops' latency: what a pipelined library's
    ring pays per edge (sim.costs.backends.nccl), where a plain ring pays the longest at every step."""

    def slot_of_node(self, node: int) -> int:
        return self.slot_order[node]

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Topology) and other.fabric == self.fabric and other.slot_order == self.slot_order
                and other.host_link == self.host_link)

    def __hash__(self) -> int:
        return hash((self.fabric.key, len(self.slot_order)))


def _links(where: str, value: Any, tiers: int, catalog: Catalog, default: Link) -> list[Link]:
    if value is None:
        return [default] * tiers
    if isinstance(value, str):
        return [catalog.link(value, where)] * tiers
    if isinstance(value, list) and len(value) == tiers and all(isinstance(v, str) for v in value):
        return [catalog.link(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise ConfigError(where, value, f"a catalog link name or a list of {tiers} (one per tier of cables)")


def _per_tier(where: str, value: Any, tiers: int, default: float, minimum: float) -> list[float]:
    values = [value] + [default] * (tiers - 1) if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    if value is None:
        values = [default] * tiers
    if not isinstance(values, list) or len(values) != tiers:
        raise ConfigError(where, value, f"a number or a list of {tiers} numbers (one per tier below the top)")
    for i, v in enumerate(values):
        require_positive(f"{where}[{i}]" if isinstance(value, list) else where, v, allow_zero=minimum == 0)
        if v < minimum:
            raise ConfigError(f"{where}[{i}]" if isinstance(value, list) else where, v, f"a number >= {minimum:g}")
    return [float(v) for v in values]


def _hop_latencies(where: str, value: Any, tiers: int) -> list[float]:
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        v = DEFAULT_HOP_LATENCY_US if value is None else require_positive(where, value, allow_zero=True)
        return [v * 1e-6] * tiers
    return [v * 1e-6 for v in _per_tier(where, value, tiers, DEFAULT_HOP_LATENCY_US, 0.0)]


def build_fabric(spec: dict[str, Any], *, host_slots_needed: int, nics: int, inter_link: Link, catalog: Catalog,
                 where: str = "cluster.topology") -> Fabric:
    """The fabric ``spec`` describes, with at least ``host_slots_needed`` host slots where it is sized
    to the job (fat trees, rail groups); a fixed fabric (a file) that is too small is refused."""
    kind = spec["kind"]
    if kind == "single_switch":
        return single_switch(host_slots_needed, nics)
    if kind == "file":
        fabric = fabric_from_file(spec["path"], nics=nics, catalog=catalog, where=f"{where}.path")
    elif kind == "fat_tree":
        fabric = _fat_tree(spec, host_slots_needed, nics, inter_link, catalog, where)
    else:
        fabric = _rail(spec, host_slots_needed, nics, inter_link, catalog, where)
    if fabric.host_slots < host_slots_needed:
        raise ConfigError(where, spec.get("path", kind),
                          f"a topology with at least {host_slots_needed} host slots for the cluster's nodes "
                          f"(this one has {fabric.host_slots})")
    return fabric


def _fat_tree(spec: dict[str, Any], slots: int, nics: int, inter_link: Link, catalog: Catalog, where: str) -> Fabric:
    tiers = spec.get("tiers", 2)
    if tiers not in (2, 3) or isinstance(tiers, bool):
        raise ConfigError(f"{where}.tiers", tiers, "2 or 3")
    radix = require_positive(f"{where}.radix", spec.get("radix", 32), integer=True)
    over = _per_tier(f"{where}.oversubscription", spec.get("oversubscription"), tiers - 1, 1.0, 1.0)
    links = _links(f"{where}.links" if "links" in spec else f"{where}.link", spec.get("links", spec.get("link")),
                   tiers - 1, catalog, inter_link)
    hops = _hop_latencies(f"{where}.hop_latency_us", spec.get("hop_latency_us"), tiers - 1)
    routing = require_choice(f"{where}.routing", spec.get("routing", "ecmp"), _ROUTINGS["fat_tree"])
    sub_key, other = ("pods", "leaves") if tiers == 3 else ("leaves", "pods")
    if other in spec:
        raise ConfigError(f"{where}.{other}", spec[other], f"{sub_key} with tiers {tiers}")
    subtrees = spec.get(sub_key)
    if subtrees is not None:
        require_positive(f"{where}.{sub_key}", subtrees, integer=True)
    for i, o in enumerate(over):
        if split_radix(radix, o) is None:
            field = f"{where}.oversubscription" + (f"[{i}]" if isinstance(spec.get("oversubscription"), list) else "")
            raise ConfigError(f"{where}.radix", radix, f"a radix whose ports split into whole down:up = {o:g}:1 "
                              f"(down + up = radix; {field})")
    try:
        m, w, p = fat_tree_params(tiers, radix, tuple(over), slots * nics, subtrees)
    except ValueError as err:
        raise ConfigError(f"{where}.radix", radix, f"a fat tree that holds {slots} nodes x {nics} NICs ({err})") from None
    if m[0] % nics:
        raise ConfigError("cluster.nics_per_node", nics, f"a divisor of the {m[0]} host ports of a leaf")
    names = ("leaf-spine", "spine-core") if tiers == 3 else ("leaf-spine",)
    kinds = tuple(CableKind(links[i], hops[i], names[i]) for i in range(tiers - 1))
    desc = (f"{tiers}-tier fat tree, radix {radix}, oversubscription {':'.join(f'{o:g}' for o in over)}, "
            f"{m[-1]} {sub_key}, routing {routing}")
    return pgft(m, w, p, kinds, nics, routing, desc)


def _rail(spec: dict[str, Any], slots: int, nics: int, inter_link: Link, catalog: Catalog, where: str) -> Fabric:
    radix = require_positive(f"{where}.radix", spec.get("radix", 32), integer=True)
    (over,) = _per_tier(f"{where}.oversubscription", spec.get("oversubscription"), 1, 1.0, 1.0)
    split = split_radix(radix, over)
    if split is None:
        raise ConfigError(f"{where}.radix", radix, f"a radix whose ports split into whole down:up = {over:g}:1")
    down, up = split
    (link,) = _links(f"{where}.link", spec.get("link"), 1, catalog, inter_link)
    (hop,) = _hop_latencies(f"{where}.hop_latency_us", spec.get("hop_latency_us"), 1)
    routing = require_choice(f"{where}.routing", spec.get("routing", "ecmp"), _ROUTINGS["rail_optimized"])
    groups = -(-slots // down)
    if groups * nics > radix:
        raise ConfigError(f"{where}.radix", radix, f"spines with {groups * nics} ports for {groups} rail groups "
                          f"x {nics} rails (at most {radix // nics} groups of {down} nodes)")
    desc = f"rail-optimized, {nics} rails, {groups} groups of {down} nodes, {up} spines, routing {routing}"
    return rail_optimized(down, nics, groups, up, (CableKind(link, hop, "rail-spine"),), routing, desc)


def fabric_from_file(path: Any, *, nics: int, catalog: Catalog, where: str) -> Fabric:
    """A fabric listed in YAML::

        switches: [{name: leaf0, tier: leaf}, {name: spine0, tier: spine}, ...]
        cables:   [{a: leaf0, b: spine0, link: ib_hdr, count: 1, hop_latency_us: 0.3}, ...]
        hosts:    [{switch: leaf0, count: 16}, {switches: [rail0, rail1], count: 8}, ...]
        routing:  ecmp            # or first
    Tiers are ranked by first appearance (the first one is where hosts plug in)."""
    if not isinstance(path, str):
        raise ConfigError(where, path, "the path of a YAML file listing switches, cables and hosts")
    doc = read_yaml(path)
    if not isinstance(doc, dict):
        raise ConfigError(path, type(doc).__name__, "a mapping with keys " + ", ".join(_FILE_KEYS))
    reject_unknown_keys(path, doc, _FILE_KEYS)
    switches = doc.get("switches")
    if not isinstance(switches, list) or not switches:
        raise ConfigError(f"{path}.switches", switches, "a list of {name, tier}")
    names: list[str] = []
    levels: list[int] = []
    tiers: dict[str, int] = {}
    index: dict[str, int] = {}
    for i, s in enumerate(switches):
        if not isinstance(s, dict) or not isinstance(s.get("name"), str):
            raise ConfigError(f"{path}.switches[{i}]", s, "a mapping {name: <text>, tier: <text>}")
        reject_unknown_keys(f"{path}.switches[{i}]", s, ("name", "tier"))
        if s["name"] in index:
            raise ConfigError(f"{path}.switches[{i}].name", s["name"], "a name not used by another switch")
        tier = str(s.get("tier", "switch"))
        index[s["name"]] = len(names)
        names.append(s["name"])
        levels.append(tiers.setdefault(tier, len(tiers) + 1))
    tier_name = {v: k for k, v in tiers.items()}

    def switch(field: str, name: Any) -> int:
        if name not in index:
            raise ConfigError(field, name, "a switch named in switches")
        return index[name]

    cables: list[tuple[int, int, int]] = []
    kinds: list[CableKind] = []
    kind_index: dict[tuple[str, float, str], int] = {}
    for i, c in enumerate(doc.get("cables") or []):
        field = f"{path}.cables[{i}]"
        if not isinstance(c, dict):
            raise ConfigError(field, c, "a mapping {a, b, link, count, hop_latency_us}")
        reject_unknown_keys(field, c, ("a", "b", "link", "count", "hop_latency_us"))
        a, b = switch(f"{field}.a", c.get("a")), switch(f"{field}.b", c.get("b"))
        if a == b:
            raise ConfigError(f"{field}.b", c.get("b"), "a switch other than a")
        if not isinstance(c.get("link"), str):
            raise ConfigError(f"{field}.link", c.get("link"), "a catalog link name")
        link = catalog.link(c["link"], f"{field}.link")
        hop = require_positive(f"{field}.hop_latency_us", c.get("hop_latency_us", DEFAULT_HOP_LATENCY_US), allow_zero=True)
        count = require_positive(f"{field}.count", c.get("count", 1), integer=True)
        if levels[a] > levels[b]:
            a, b = b, a
        tier = f"{tier_name[levels[a]]}-{tier_name[levels[b]]}"
        k = kind_index.setdefault((link.name, hop, tier), len(kinds))
        if k == len(kinds):
            kinds.append(CableKind(link, hop * 1e-6, tier))
        cables.extend((a, b, k) for _ in range(count))
    lost = disconnected_switches(len(names), tuple(cables))
    if lost:
        raise ConfigError(f"{path}.cables", f"{len(cables)} cables",
                          f"cables that connect every switch ({names[lost[0]]} is not reachable from {names[0]})")
    hosts: list[tuple[int, ...]] = []
    for i, h in enumerate(doc.get("hosts") or []):
        field = f"{path}.hosts[{i}]"
        if not isinstance(h, dict):
            raise ConfigError(field, h, "a mapping {switch: name, count: n} or {switches: [one per NIC], count: n}")
        reject_unknown_keys(field, h, ("switch", "switches", "count"))
        if "switches" in h:
            if not isinstance(h["switches"], list) or len(h["switches"]) != nics:
                raise ConfigError(f"{field}.switches", h["switches"], f"a list of {nics} switch names (one per NIC)")
            ports = tuple(switch(f"{field}.switches[{j}]", s) for j, s in enumerate(h["switches"]))
        else:
            ports = (switch(f"{field}.switch", h.get("switch")),) * nics
        hosts.extend([ports] * require_positive(f"{field}.count", h.get("count", 1), integer=True))
    if not hosts:
        raise ConfigError(f"{path}.hosts", doc.get("hosts"), "at least one {switch, count} entry")
    routing = require_choice(f"{path}.routing", doc.get("routing", "ecmp"), _ROUTINGS["file"])
    desc = str(doc.get("description", f"{Path(path).name}: {len(names)} switches, {len(cables)} cables"))
    return from_parts(names, levels, cables, kinds, hosts, routing, desc)


def check_topology_spec(value: Any, where: str = "cluster.topology") -> dict[str, Any]:
    """``value`` as a mapping with a known kind and known keys (a bare kind or file path allowed)."""
    if isinstance(value, str):
        value = {"kind": value} if value in KINDS and value != "file" else {"kind": "file", "path": value}
    if not isinstance(value, dict):
        raise ConfigError(where, value, "one of " + ", ".join(KINDS[:3]) + ", a YAML file's path, or a mapping with kind")
    kind = require_choice(f"{where}.kind", value.get("kind", "single_switch"), KINDS)
    reject_unknown_keys(where, value, _KEYS[kind])
    if kind == "file" and "path" not in value:
        raise ConfigError(f"{where}.path", None, "the path of a YAML file listing switches, cables and hosts")
    return {**value, "kind": kind}


def check_placement(value: Any, host_slots: int, nodes: int, where: str = "cluster.placement") -> Any:
    if isinstance(value, str):
        return require_choice(where, value, PLACEMENTS)
    if isinstance(value, list) and len(value) == nodes:
        for i, s in enumerate(value):
            if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < host_slots:
                raise ConfigError(f"{where}[{i}]", s, f"a host slot 0..{host_slots - 1}")
        if len(set(value)) != nodes:
            raise ConfigError(where, value, "host slots used once each")
        return tuple(value)
    raise ConfigError(where, value if not isinstance(value, list) else f"a list of {len(value)}",
                      f"contiguous, random, or a list of {nodes} host slots (one per node)")
