"""Rings of groups that start at different moments share links while they overlap
(sim/engine/periodic_groups.py), by hand on two 2-member rings through the same NICs."""

from __future__ import annotations

import pytest
import simpy

from sim.catalog import Link
from sim.config import scenario_from_dict
from sim.engine.flows import ClusterNetwork
from sim.engine.periodic import PeriodicCollectives
from sim.engine.periodic_groups import GroupSharingCollectives

B = 1e9  # bytes/s of every NIC
ALPHA = 1e-6
S = 4e6  # bytes per allreduce


def network(env: simpy.Environment) -> ClusterNetwork:
    """2 nodes x 2 GPUs, one NIC each of B, alpha-beta links (a plain ring: a send is done on delivery)."""
    cluster = scenario_from_dict({"workload": {"model": "mlp"},
                                  "cluster": {"nodes": 2, "gpus_per_node": 2, "intra_link": "x", "inter_link": "y"},
                                  "catalog": {"links": {"x": {"kind": "custom", "bandwidth_Gbps": 8000, "latency_us": 0},
                                                        "y": {"kind": "custom", "bandwidth_Gbps": 8, "latency_us": 1}}}}
                                 ).cluster
    assert isinstance(cluster.inter_link, Link) and cluster.inter_link.effective_Bps == pytest.approx(B)
    return ClusterNetwork(env, cluster)


RING_A, RING_B = [0, 2], [1, 3]  # each across both nodes, both through node 0's and node 1's NIC
ALONE = 2 * (ALPHA + S / 2 / B)  # 2 steps of S/2 at B
SHARED = 2 * (ALPHA + S / 2 / (B / 2))  # the NICs shared by two flows in each direction


def run(engine, b_starts_at: float) -> dict[str, float]:
    env = simpy.Environment()
    coll = engine(env, network(env))
    ends: dict[str, float] = {}

    def member(name: str, ring: list[int], pos: int, delay: float):
        if delay:
            yield env.timeout(delay)
        yield from coll.ring_allreduce(ring, pos, S, name, 0.0, [ring])
        ends[name] = max(ends.get(name, 0.0), env.now)

    for pos in (0, 1):
        env.process(member("a", RING_A, pos, 0.0))
        env.process(member("b", RING_B, pos, b_starts_at))
    env.run()
    return ends


def test_a_ring_slows_while_another_group_shares_its_links_and_speeds_up_after():
    """A starts at 0; B at half of A's time alone. A has half left, at the shared pace: it ends at
    t1 + SHARED / 2. B, solved shared, has run half of its ring by then and does the rest alone:
    it ends at t1 + SHARED / 2 + ALONE / 2."""
    t1 = ALONE / 2
    ends = run(GroupSharingCollectives, t1)
    assert ends["a"] == pytest.approx(t1 + SHARED / 2, rel=1e-12)
    assert ends["b"] == pytest.approx(t1 + SHARED / 2 + ALONE / 2, rel=1e-12)


def test_groups_that_never_overlap_or_always_do_are_the_periodic_engines():
    """Apart: each its own time alone (as PeriodicCollectives gives it). Together from the start:
    both at the shared pace, as PeriodicCollectives over their union would give them."""
    apart = run(GroupSharingCollectives, 2 * ALONE)
    assert apart == pytest.approx({"a": ALONE, "b": 3 * ALONE}, rel=1e-12)
    assert run(PeriodicCollectives, 2 * ALONE) == pytest.approx(apart, rel=1e-12)
    together = run(GroupSharingCollectives, 0.0)
    assert together == pytest.approx({"a": SHARED, "b": SHARED}, rel=1e-12)
