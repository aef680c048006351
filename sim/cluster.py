"""The *where*: nodes of GPUs, the links inside and between them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sim.catalog import GPU, Catalog, Host, Link, usual_host
from sim.errors import ConfigError, reject_unknown_keys, require_positive
from sim.topology.spec import Topology

CLUSTER_KEYS = (
    "gpus", "nodes", "gpus_per_node", "gpu", "intra_link", "inter_link", "nics_per_node",
    "oversubscription", "topology", "placement", "host",
)
MAX_WORLD_SIZE = 2**20
"""1,048,576 GPUs: 64 x the 16,384 H100s of the largest published training run (Llama 3, arXiv:2407.21783,
section 3.3). A sanity bound on input (1e12 GPUs is a typo), not a limit of the fast path."""
_WHY_MAX = "64 x the 16,384 GPUs of the largest published training run; a bound against typos"
MAX_GPUS_PER_NODE = 1024
"""A bound against typos (issue 29: 10^6 GPUs per node passed): the largest NVLink domain announced
holds 576 GPUs (NVIDIA Vera Rubin NVL576, GTC 2025), GB200 NVL72 ships 72; assumed: 1,024 leaves room
for CPU ranks per host."""
MAX_NICS_PER_GPU = 4
"""NICs per GPU of the densest node design published: AWS p5/p5e.48xlarge, 32 EFA devices for 8
H100/H200 (AWS EC2 User Guide, 'EFA configuration for P5 instances'; torchx named_resources_aws.py:
devices EFA 32, gpu 8). More NICs than that per GPU would multiply the model's inter-node rate
(a ring's load is oversubscription / nics_per_node) past what any node has (1,000 NICs on a
4-GPU node was accepted, issue 29)."""


@dataclass(frozen=True, kw_only=True)
class Cluster:
    nodes: int
    gpus_per_node: int
    gpu: GPU
    intra_link: Link
    """Between GPUs of one node (NVLink, PCIe); each GPU has one port of it per direction."""
    inter_link: Link
    """Between nodes: each node has ``nics_per_node`` NICs of this link class."""
    nics_per_node: int = 1
    oversubscription: float = 1.0
    """Switch oversubscription: inter-node flows that cross the core get 1/oversubscription of a NIC.
    With a fabric (``topology``) the bottleneck tier's share for the node-major ring over the
    placement (sim.costs.tiers.ring_view): what the fast path divides a NIC's rate by."""
    host: Host | None = None
    """The nodes' CPU side (sim/data/hosts.yaml): cores, one core's TCP stream, memcpy and
    reduction rates, the GPUs' PCIe link. ``cluster.host`` names it; a cluster that names none gets
    its GPU's usual host (the GPU entry's ``host``: sim.catalog.usual_host); None: the catalog's
    DEFAULT_HOST (sim.catalog.host_of)."""
    topology: Topology | None = None
    """The fabric and the placement of the nodes on it; None: one switch (the figures above).
    With a fabric, ``inter_link`` is the NICs' link with the ring's longest path's extra switch
    hops added to its latency (the fast path's view); ``topology.host_link`` is the link as given."""

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    def with_world_size(self, world_size: int) -> Cluster:
        """The same node design with ``world_size`` GPUs (fewer GPUs than a node fills one node);
        on a fabric, the job's nodes placed again and the tiers' view recomputed."""
        if world_size <= self.gpus_per_node:
            resized = replace(self, nodes=1, gpus_per_node=world_size)
        elif world_size % self.gpus_per_node:
            raise ConfigError("cluster.gpus", world_size, f"a multiple of gpus_per_node={self.gpus_per_node}")
        else:
            resized = replace(self, nodes=world_size // self.gpus_per_node)
        t = self.topology
        if t is None or resized.nodes == self.nodes:
            return resized
        placement = t.placement if isinstance(t.placement, str) else tuple(t.slot_order[:resized.nodes])
        if t.fabric.kind == "single_switch":
            base = replace(resized, topology=None)
        else:
            base = replace(resized, inter_link=t.host_link, oversubscription=1.0, topology=None)
        assert t.catalog is not None
        return attach_topology(base, t.spec, placement, t.seed, t.catalog)


def cluster_from_dict(spec: dict[str, Any], catalog: Catalog, where: str = "cluster", seed: int = 0) -> Cluster:
    """``{gpus: 32, gpus_per_node: 8, gpu: v100, intra_link: nvlink2, inter_link: ib_edr}``.

    Give ``gpus`` (the world size) or ``nodes``; with both, gpus must equal nodes x gpus_per_node.
    A world size smaller than ``gpus_per_node`` is one partly filled node. ``topology`` and
    ``placement``: sim.topology.spec (a random placement draws from ``seed``).
    """
    if not isinstance(spec, dict):
        raise ConfigError(where, spec, "a mapping with keys " + ", ".join(CLUSTER_KEYS))
    reject_unknown_keys(where, spec, CLUSTER_KEYS)
    gpu = catalog.gpu(spec.get("gpu", DEFAULT_GPU), f"{where}.gpu")
    spec = {**node_defaults(spec, gpu), **spec}
    per_node = require_positive(f"{where}.gpus_per_node", spec.get("gpus_per_node", 1), integer=True,
                                maximum=MAX_GPUS_PER_NODE, why="576 GPUs share the largest NVLink domain announced "
                                "(NVL576); a bound against typos")
    nics = require_positive(f"{where}.nics_per_node", spec.get("nics_per_node", 1), integer=True,
                            maximum=MAX_NICS_PER_GPU * per_node, why=f"{MAX_NICS_PER_GPU} per GPU with gpus_per_node="
                            f"{per_node}: AWS p5 has 32 NICs for 8 GPUs, the most per GPU of any published node")
    if "gpus" in spec:
        world = require_positive(f"{where}.gpus", spec["gpus"], integer=True, maximum=MAX_WORLD_SIZE, why=_WHY_MAX)
        if "nodes" in spec:
            nodes = require_positive(f"{where}.nodes", spec["nodes"], integer=True)
            if nodes * per_node != world:
                raise ConfigError(
                    f"{where}.gpus", world,
                    f"nodes x gpus_per_node = {nodes} x {per_node} = {nodes * per_node}",
                )
        elif world < per_node:
            nodes, per_node = 1, world
        elif world % per_node:
            raise ConfigError(f"{where}.gpus", world, f"a multiple of gpus_per_node={per_node} (or fewer than one node)")
        else:
            nodes = world // per_node
    else:
        nodes = require_positive(f"{where}.nodes", spec.get("nodes", 1), integer=True)
    if nodes * per_node > MAX_WORLD_SIZE:
        raise ConfigError(f"{where}.nodes", nodes, f"at most {MAX_WORLD_SIZE // per_node:,} with gpus_per_node={per_node} "
                          f"(at most {MAX_WORLD_SIZE:,} GPUs: {_WHY_MAX})")
    host = catalog.host(spec["host"], f"{where}.host") if "host" in spec else usual_host(gpu, catalog)
    cluster = Cluster(
        nodes=nodes,
        gpus_per_node=per_node,
        gpu=gpu,
        intra_link=_on_host(catalog.link(spec.get("intra_link", DEFAULT_INTRA_LINK), _named(where, spec, "intra_link", gpu)),
                            host),
        inter_link=_on_host(catalog.link(spec.get("inter_link", DEFAULT_INTER_LINK), _named(where, spec, "inter_link", gpu)),
                            host),
        host=host,
        nics_per_node=nics,
        oversubscription=float(_at_least_one(f"{where}.oversubscription", spec.get("oversubscription", 1.0))),
    )
    if "topology" not in spec and "placement" not in spec:
        return cluster
    from sim.topology.spec import check_topology_spec

    topology = check_topology_spec(spec.get("topology", "single_switch"), f"{where}.topology")
    if topology["kind"] != "single_switch" and cluster.oversubscription != 1.0:
        raise ConfigError(f"{where}.oversubscription", spec["oversubscription"],
                          f"1 with topology {topology['kind']} (give each tier's in {where}.topology.oversubscription)")
    return attach_topology(cluster, topology, spec.get("placement", "contiguous"), seed, catalog, where)


DEFAULT_GPU = "v100"
DEFAULT_INTRA_LINK = "nvlink2"
DEFAULT_INTER_LINK = "ib_edr"
"""A cluster's figures where neither it nor its GPU's usual node (``GPU.node``) names them; one GPU
and one NIC per node then."""


def node_defaults(spec: dict[str, Any], gpu: GPU) -> dict[str, Any]:
    """What the GPU's usual node (its catalog ``node``: DGX / HGX) gives a cluster that does not say:
    GPUs per node and the link between them; the inter-node link and the NICs per node too, unless
    the cluster names another inter-node link or another GPU count per node (another server: its
    NICs are then its own, one unless it says), so
    that an A100 cluster that names nothing is a DGX A100's 8 GPUs on NVLink 3 with 8 HDR NICs, each
    GPU's traffic on its own NIC. Keys the cluster gives are not returned (the caller's win)."""
    node = gpu.node
    if node is None:
        return {}
    out: dict[str, Any] = {"gpus_per_node": node.gpus_per_node, "intra_link": node.intra_link}
    if (spec.get("inter_link", node.inter_link) == node.inter_link
            and spec.get("gpus_per_node", node.gpus_per_node) == node.gpus_per_node):
        out.update(inter_link=node.inter_link, nics_per_node=node.nics_per_node)
    return {k: v for k, v in out.items() if k not in spec}


def _named(where: str, spec: dict[str, Any], key: str, gpu: GPU) -> str:
    """The field an unknown link is reported under: the cluster's, or the GPU's node's that supplied it."""
    node = gpu.node
    if node is not None and spec.get(key) == getattr(node, key):
        return f"{where}.{key} (from {gpu.name}'s node)"
    return f"{where}.{key}"


def _on_host(link: Link, host: Host | None) -> Link:
    """A TCP link's streams run on the cluster's host: its one-core stream rate unless the link
    gives its own (``tcp_stream_Gbps``, e.g. a measured IPoIB stream)."""
    if host is None or link.kind != "tcp" or link.tcp_stream_Bps is not None:
        return link
    return replace(link, tcp_stream_Bps=host.tcp_stream_Bps)


def attach_topology(cluster: Cluster, topology: dict[str, Any], placement: Any, seed: int, catalog: Catalog,
                    where: str = "cluster") -> Cluster:
    """``cluster`` on the fabric ``topology`` describes, its nodes placed as ``placement`` says; the
    fast path's view of the tiers (sim.costs.tiers.ring_view) folded into its oversubscription and
    its inter_link's latency."""
    from sim.costs.tiers import ring_view
    from sim.topology.routing import placement_order
    from sim.topology.spec import build_fabric, check_placement

    needed = cluster.nodes
    if isinstance(placement, (list, tuple)) and placement and all(isinstance(s, int) and not isinstance(s, bool)
                                                                  for s in placement):
        needed = max(needed, max(placement) + 1)  # a fabric sized to the job reaches its highest slot
    def build(slots: int):
        return build_fabric(topology, host_slots_needed=slots, nics=cluster.nics_per_node,
                            inter_link=cluster.inter_link, catalog=catalog, where=f"{where}.topology")

    try:
        fabric = build(needed)
    except ConfigError:
        if needed == cluster.nodes:
            raise
        fabric = build(cluster.nodes)  # the placement names a slot no such fabric has: say so below
    placement = check_placement(list(placement) if isinstance(placement, tuple) else placement,
                                fabric.host_slots, cluster.nodes, f"{where}.placement")
    order = placement_order(placement, fabric.host_slots, seed)
    host = cluster.inter_link
    if fabric.kind == "single_switch":
        t = Topology(fabric=fabric, slot_order=order, spec=topology, placement=placement, seed=seed, host_link=host,
                     catalog=catalog)
        return replace(cluster, topology=t)
    view = ring_view(fabric, order[:cluster.nodes], cluster.nics_per_node, host.effective_Bps)
    t = Topology(fabric=fabric, slot_order=order, spec=topology, placement=placement, seed=seed, host_link=host,
                 catalog=catalog, ring_extra_latency_s=view.extra_latency_s, ring_load=view.load_factor,
                 ring_mean_extra_latency_s=view.mean_extra_latency_s)
    seen = replace(host, latency_s=host.latency_s + view.extra_latency_s,
                   source=f"{host.source}; + {view.extra_latency_s * 1e6:.3g} us of switch hops on the ring's "
                          f"longest path over {fabric.description}")
    return replace(cluster, inter_link=seen, oversubscription=view.load_factor, topology=t)


MAX_OVERSUBSCRIPTION = 100.0
"""Switch oversubscription above 100:1 is a typo (assumed: published fabrics run 1:1 to a few to one)."""


def _at_least_one(field_name: str, value: Any) -> float:
    require_positive(field_name, value, maximum=MAX_OVERSUBSCRIPTION, why="a ratio; 1 = non-blocking")
    if value < 1:
        raise ConfigError(field_name, value, "a number >= 1 (1 = non-blocking)")
    return float(value)
