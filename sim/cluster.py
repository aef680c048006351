"""The *where*: nodes of GPUs, the links inside and between them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.catalog import GPU, Catalog, Link
from sim.errors import ConfigError, reject_unknown_keys, require_positive

CLUSTER_KEYS = (
    "gpus", "nodes", "gpus_per_node", "gpu", "intra_link", "inter_link", "nics_per_node",
    "oversubscription",
)
MAX_WORLD_SIZE = 2**20
"""1,048,576 GPUs: 64 x the 16,384 H100s of the largest published training run (Llama 3, arXiv:2407.21783,
section 3.3). A sanity bound on input (1e12 GPUs is a typo), not a limit of the fast path."""
_WHY_MAX = "64 x the 16,384 GPUs of the largest published training run; a bound against typos"


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
    """Switch oversubscription: inter-node flows that cross the core get 1/oversubscription of a NIC."""

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    def with_world_size(self, world_size: int) -> Cluster:
        """The same node design with ``world_size`` GPUs (fewer GPUs than a node fills one node)."""
        from dataclasses import replace

        if world_size <= self.gpus_per_node:
            return replace(self, nodes=1, gpus_per_node=world_size)
        if world_size % self.gpus_per_node:
            raise ConfigError("cluster.gpus", world_size, f"a multiple of gpus_per_node={self.gpus_per_node}")
        return replace(self, nodes=world_size // self.gpus_per_node)


def cluster_from_dict(spec: dict[str, Any], catalog: Catalog, where: str = "cluster") -> Cluster:
    """``{gpus: 32, gpus_per_node: 8, gpu: v100, intra_link: nvlink2, inter_link: ib_edr}``.

    Give ``gpus`` (the world size) or ``nodes``; with both, gpus must equal nodes x gpus_per_node.
    A world size smaller than ``gpus_per_node`` is one partly filled node.
    """
    if not isinstance(spec, dict):
        raise ConfigError(where, spec, "a mapping with keys " + ", ".join(CLUSTER_KEYS))
    reject_unknown_keys(where, spec, CLUSTER_KEYS)
    per_node = require_positive(f"{where}.gpus_per_node", spec.get("gpus_per_node", 1), integer=True,
                                maximum=MAX_WORLD_SIZE, why=_WHY_MAX)
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
    return Cluster(
        nodes=nodes,
        gpus_per_node=per_node,
        gpu=catalog.gpu(spec.get("gpu", "v100"), f"{where}.gpu"),
        intra_link=catalog.link(spec.get("intra_link", "nvlink2"), f"{where}.intra_link"),
        inter_link=catalog.link(spec.get("inter_link", "ib_edr"), f"{where}.inter_link"),
        nics_per_node=require_positive(f"{where}.nics_per_node", spec.get("nics_per_node", 1), integer=True),
        oversubscription=float(_at_least_one(f"{where}.oversubscription", spec.get("oversubscription", 1.0))),
    )


def _at_least_one(field_name: str, value: Any) -> float:
    require_positive(field_name, value)
    if value < 1:
        raise ConfigError(field_name, value, "a number >= 1 (1 = non-blocking)")
    return float(value)
