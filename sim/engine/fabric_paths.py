"""The links of a cluster's fabric in the flow network, and the paths of inter-node messages over it.

Per used host slot, each NIC is a tx and an rx link of the cluster's (per-flow) inter_link rate;
every cable of the fabric is two directed links of its catalog link's payload rate (the link's
kind selects its transport: ``effective_Bps`` is line rate x payload efficiency, sim.catalog,
sim.costs.transports). A message between two nodes is one sub-flow per NIC, NIC j to NIC j (NCCL's
channels on their own NICs, rail-aligned), each routed by the fabric (sim.topology.routing) as its
own connection; a worker's message to a parameter server goes from its NIC j to the server's one
NIC. A message's alpha is the NICs' link's alpha, less the ring's extra latency folded into it for
the fast path, plus the hop latencies of its longest sub-flow's path.
"""

from __future__ import annotations

from sim.cluster import Cluster
from sim.errors import ConfigError
from sim.topology.fabric import Fabric
from sim.topology.routing import Router, flow_key


def add_cables(flows, fabric: Fabric) -> list[int]:
    """Two directed links per cable (a -> b, then b -> a) at the cable's payload rate; returns the
    first link of each cable (directed link 2c + d of the router is ``result[c] + d``)."""
    names = fabric.switch_names
    first: list[int] = []
    seen: dict[tuple[int, int], int] = {}
    for a, b, kind in fabric.cables:
        cable = fabric.kinds[kind]
        n = seen[(a, b)] = seen.get((a, b), 0) + 1
        tag = f"#{n}" if n > 1 else ""
        first.append(flows.add_link(f"{names[a]}->{names[b]}{tag}", cable.link.effective_Bps, cable.tier))
        flows.add_link(f"{names[b]}->{names[a]}{tag}", cable.link.effective_Bps, cable.tier)
    return first


class FabricPaths:
    def __init__(self, flows, cluster: Cluster, servers: int, seed: int):
        topology = cluster.topology
        assert topology is not None
        fabric = topology.fabric
        self.cluster = cluster
        self.topology = topology
        self.fabric = fabric
        self.nics = cluster.nics_per_node
        self.router = Router(fabric, seed)
        nodes = cluster.nodes
        if nodes + servers > fabric.host_slots:
            raise ConfigError("cluster.topology", fabric.description,
                              f"a topology with at least {nodes + servers} host slots for {nodes} nodes and {servers} "
                              f"parameter servers (this one has {fabric.host_slots})")
        self.slots = topology.slot_order[:nodes + servers]
        nic_Bps = cluster.inter_link.effective_Bps
        add = flows.add_link
        self.nic_tx: list[list[int]] = []
        self.nic_rx: list[list[int]] = []
        for k in range(len(self.slots)):
            ports = self.nics if k < nodes else 1
            name = f"node{k}" if k < nodes else f"ps{k - nodes}"
            self.nic_tx.append([add(f"{name}.nic{j}.tx", nic_Bps, "nic") for j in range(ports)])
            self.nic_rx.append([add(f"{name}.nic{j}.rx", nic_Bps, "nic") for j in range(ports)])
        self.cable_link = add_cables(flows, fabric)
        self.base_alpha_s = cluster.inter_link.alpha_s - topology.ring_extra_latency_s

    def _host(self, k: int) -> int:
        """Index into self.slots of node k (k >= 0) or server -1 - k."""
        return k if k >= 0 else self.cluster.nodes + (-1 - k)

    def paths(self, a: int, b: int) -> tuple[list[tuple[int, ...]], float]:
        """Sub-flow paths and alpha from node (or server -1 - p) ``a`` to ``b``."""
        ha, hb = self._host(a), self._host(b)
        sa, sb = self.slots[ha], self.slots[hb]
        ports = self.fabric.host_ports
        nics_a, nics_b = len(self.nic_tx[ha]), len(self.nic_rx[hb])
        out, extra = [], 0.0
        for j in range(max(nics_a, nics_b)):
            i, k = min(j, nics_a - 1), min(j, nics_b - 1)
            hops = self.router.path(ports[sa][i], ports[sb][k], flow_key(sa, i, sb, k),
                                    src_port=sa * self.nics + i, dst_port=sb * self.nics + k)
            extra = max(extra, self.router.path_latency_s(hops))
            fabric_links = tuple(self.cable_link[h // 2] + (h % 2) for h in hops)
            out.append((self.nic_tx[ha][i], *fabric_links, self.nic_rx[hb][k]))
        return out, self.base_alpha_s + extra
