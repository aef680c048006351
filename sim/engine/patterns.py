"""Communication patterns between a fabric's NIC ports on the event engine: ring, tree, all-to-all.

The ports are the hosts of the fabric (port s x nics + j is NIC j of host slot s: a PGFT's host
position); each has a tx and an rx link of ``host_link``'s payload rate, and a message pays
``host_link``'s alpha plus the hop latencies of its path. This is the flow network without GPUs
or collective libraries: what closed forms (bisection bandwidth, rail-local and cross-rail
traffic) and another flow-level simulator (SimGrid, validation/simgrid_check.py) are checked against.
- ring: port i sends ``chunk_bytes`` to port i+1 at each of ``steps`` steps, starting step k+1 when
  its own send of step k is done and step k from i-1 has arrived (the detailed mode's ring).
- tree: a binary tree over the ports in order (children of i: 2i+1, 2i+2): a reduce (a node sends
  its ``n_bytes`` to its parent once all its children's have arrived), then a broadcast (a node
  sends to its children once its parent's message is in).
- alltoall: every port sends ``n_bytes`` to every other at once (NCCL's grouped sends).
- alltoall_pairwise: n-1 rounds; in round k port i sends to i+k and receives from i-k, and starts
  round k+1 when both are done (MPI's pairwise exchange for long messages: Thakur, Rabenseifner
  and Gropp, "Optimization of collective communication operations in MPICH", IJHPCA 2005).
- pairs: the given (src, dst) messages at once.
Each returns the time the last port finishes.
"""

from __future__ import annotations

from collections.abc import Sequence

import simpy

from sim.catalog import Link
from sim.engine.detailed_collectives import Collectives
from sim.engine.fabric_paths import add_cables
from sim.engine.flows import FlowNetwork
from sim.topology.fabric import Fabric
from sim.topology.routing import Router, flow_key


class PortNetwork:
    """A fabric's NIC ports and cables as a flow network (duck-types ClusterNetwork for rings)."""

    def __init__(self, fabric: Fabric, host_link: Link, seed: int = 0, env: simpy.Environment | None = None):
        self.env = env or simpy.Environment()
        self.fabric = fabric
        self.flows = FlowNetwork(self.env)
        self.router = Router(fabric, seed)
        self.nics = len(fabric.host_ports[0])
        ports = fabric.host_slots * self.nics
        self.world_size = ports
        add = self.flows.add_link
        self.tx = [add(f"port{p}.tx", host_link.effective_Bps, "nic") for p in range(ports)]
        self.rx = [add(f"port{p}.rx", host_link.effective_Bps, "nic") for p in range(ports)]
        self.cable_link = add_cables(self.flows, fabric)
        self.alpha_s = host_link.alpha_s
        self._routes: dict[tuple[int, int], tuple[tuple[int, ...], float]] = {}

    def switch_of(self, port: int) -> int:
        return self.fabric.host_ports[port // self.nics][port % self.nics]

    def route(self, src: int, dst: int) -> tuple[tuple[int, ...], float]:
        """(links, alpha) from port ``src`` to port ``dst``."""
        found = self._routes.get((src, dst))
        if found is None:
            hops = self.router.path(self.switch_of(src), self.switch_of(dst), flow_key(src, dst), src, dst)
            links = (self.tx[src], *(self.cable_link[h // 2] + h % 2 for h in hops), self.rx[dst])
            found = self._routes[(src, dst)] = (links, self.alpha_s + self.router.path_latency_s(hops))
        return found

    def fabric_hops(self, src: int, dst: int) -> list[int]:
        """The router's directed links (2c + d) from port ``src`` to port ``dst``."""
        return self.router.path(self.switch_of(src), self.switch_of(dst), flow_key(src, dst), src, dst)

    def node_of(self, endpoint: int) -> int:
        return endpoint

    def transfer(self, src: int, dst: int, n_bytes: float, done: simpy.Event | None = None,
                 extra_alpha_s: float = 0.0) -> simpy.Event:
        links, alpha_s = self.route(src, dst)
        return self.flows.start([links], n_bytes, alpha_s + extra_alpha_s, done)


def _finish(net: PortNetwork, events: Sequence[simpy.Event]) -> float:
    ends = [0.0]
    for event in events:
        event.callbacks.append(lambda _e: ends.append(net.env.now))
    net.env.run()
    if not all(e.processed for e in events):
        raise RuntimeError("a pattern never finished")
    return max(ends)


def ring(net: PortNetwork, ports: Sequence[int], steps: int, chunk_bytes: float) -> float:
    coll = Collectives(net.env, net)  # type: ignore[arg-type]
    members = list(ports)
    return _finish(net, [coll.ring(members, pos, steps, chunk_bytes, "ring") for pos in range(len(members))])


def tree(net: PortNetwork, ports: Sequence[int], n_bytes: float) -> float:
    env, n = net.env, len(ports)
    up = {i: env.event() for i in range(n)}       # i's reduce message has reached its parent
    down = {i: env.event() for i in range(n)}     # i holds the broadcast result
    done = []

    def node(i: int):
        children = [c for c in (2 * i + 1, 2 * i + 2) if c < n]
        for c in children:
            yield up[c]
        if i == 0:
            down[0].succeed()
        else:
            net.transfer(ports[i], ports[(i - 1) // 2], n_bytes, up[i])
            yield down[i]
        for c in children:
            net.transfer(ports[i], ports[c], n_bytes, down[c])

    for i in range(n):
        env.process(node(i))
        done.append(down[i])
    return _finish(net, done)


def pairs(net: PortNetwork, messages: Sequence[tuple[int, int]], n_bytes: float) -> float:
    return _finish(net, [net.transfer(a, b, n_bytes) for a, b in messages])


def alltoall(net: PortNetwork, ports: Sequence[int], n_bytes: float) -> float:
    return pairs(net, [(a, b) for a in ports for b in ports if a != b], n_bytes)


def alltoall_pairwise(net: PortNetwork, ports: Sequence[int], n_bytes: float) -> float:
    env, n = net.env, len(ports)
    arrived = {(i, k): env.event() for i in range(n) for k in range(1, n)}  # round k's message at i
    done = []

    def peer(i: int):
        for k in range(1, n):
            sent = net.transfer(ports[i], ports[(i + k) % n], n_bytes, arrived[((i + k) % n, k)])
            yield env.all_of([sent, arrived[(i, k)]])

    for i in range(n):
        done.append(env.process(peer(i)))
    return _finish(net, done)
