"""The flow-level network: max-min fair sharing, latency then bandwidth, exact completion times.

Hand-computed cases are checked to 1e-12 relative; the max-min property (every flow has a
saturated bottleneck link on which no flow gets more) is checked on random topologies.
"""

from __future__ import annotations

import math

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cluster import Cluster
from sim.engine.flows import ClusterNetwork, FlowNetwork
from tests.conftest import make_gpu, make_link

RTOL = 1e-12


def finish_times(net: FlowNetwork, flows: list[tuple[list[int], float, float]]) -> list[float]:
    """Start every (path, bytes, alpha) at t=0 and return when each one completes."""
    env = net.env
    done = [net.start([path], n_bytes, alpha) for path, n_bytes, alpha in flows]
    ends = [math.nan] * len(done)
    for i, event in enumerate(done):
        event.callbacks.append(lambda _e, i=i: ends.__setitem__(i, env.now))
    env.run()
    return ends


def test_two_flows_on_one_link_get_half_each():
    net = FlowNetwork(simpy.Environment())
    link = net.add_link("l", 1e9)
    # each alone would take 1 s; sharing B/2 each, both end at 2 s
    assert finish_times(net, [([link], 1e9, 0.0), ([link], 1e9, 0.0)]) == pytest.approx([2.0, 2.0], rel=RTOL)


def test_rates_are_max_min_fair_by_hand():
    """L1 = 10 B/s carries A and B; L2 = 4 B/s carries B and C.

    L2 is tighter (4/2 = 2 < 10/2 = 5): B = C = 2; A takes the rest of L1: 10 - 2 = 8.
    """
    env = simpy.Environment()
    net = FlowNetwork(env)
    l1, l2 = net.add_link("L1", 10.0), net.add_link("L2", 4.0)
    net.start([[l1]], 100.0, 0.0)
    net.start([[l1, l2]], 100.0, 0.0)
    net.start([[l2]], 100.0, 0.0)
    env.run(until=1e-9)
    assert list(net.rates_Bps().values()) == pytest.approx([8.0, 2.0, 2.0], rel=RTOL)


def test_spare_capacity_moves_to_others_as_flows_end():
    """The same links, A = 16 B, B = 8 B, C = 2 B (rates as in the previous test).

    t = 1: C is done (2 B at 2 B/s); A has 8 left, B 6. Now B is alone on L2: B = 4, A = 6.
    t = 1 + 8/6 = 7/3: A is done; B has 6 - 4 x 4/3 = 2/3 left at 4 B/s: done at 7/3 + 1/6 = 2.5.
    """
    net = FlowNetwork(simpy.Environment())
    l1, l2 = net.add_link("L1", 10.0), net.add_link("L2", 4.0)
    ends = finish_times(net, [([l1], 16.0, 0.0), ([l1, l2], 8.0, 0.0), ([l2], 2.0, 0.0)])
    assert ends == pytest.approx([7 / 3, 2.5, 1.0], rel=RTOL)


def test_latency_then_bandwidth_and_a_late_arrival():
    """X: 2 GB, no latency; Y: 0.5 GB after alpha = 0.5 s; Z: 1 MB alone after 1 ms, another link.

    X runs alone at 1 GB/s for 0.5 s, then X and Y share 0.5 GB/s each: Y ends at 0.5 + 1 = 1.5,
    X has 1.5 - 0.5 = 1 GB left, alone again: 2.5. Z: alpha + S/B = 1e-3 + 1e6/1e9 = 2e-3.
    """
    net = FlowNetwork(simpy.Environment())
    link, other = net.add_link("l", 1e9), net.add_link("m", 1e9)
    ends = finish_times(net, [([link], 2e9, 0.0), ([link], 0.5e9, 0.5), ([other], 1e6, 1e-3)])
    assert ends == pytest.approx([2.5, 1.5, 2e-3], rel=RTOL)


def test_a_message_split_into_subflows_ends_with_its_last_subflow():
    env = simpy.Environment()
    net = FlowNetwork(env)
    fast, slow = net.add_link("fast", 2e9), net.add_link("slow", 1e9)
    done = net.start([[fast], [slow]], 1e9, 1e-6)  # 2 GB in all, 1 GB per path
    env.run()
    assert done.processed and env.now == pytest.approx(1e-6 + 1.0, rel=RTOL)


def test_zero_bytes_cost_only_latency():
    env = simpy.Environment()
    net = FlowNetwork(env)
    net.start([[net.add_link("l", 1e9)]], 0.0, 3e-6)
    env.run()
    assert env.now == pytest.approx(3e-6, rel=RTOL)


def test_a_ring_step_of_256_flows_on_disjoint_links_ends_together_in_one_wakeup():
    env = simpy.Environment()
    net = FlowNetwork(env)
    links = [net.add_link(f"l{i}", 1e9) for i in range(512)]
    flows = [([links[i], links[256 + (i + 1) % 256]], 1e6, 1e-5) for i in range(256)]
    ends = finish_times(net, flows)
    assert ends == pytest.approx([1e-5 + 1e-3] * 256, rel=RTOL)
    assert net.recomputations == 2  # one for the 256 arrivals, one for the 256 departures


@st.composite
def topologies(draw):
    n_links = draw(st.integers(1, 6))
    capacities = draw(st.lists(st.floats(1.0, 100.0), min_size=n_links, max_size=n_links))
    paths = draw(st.lists(st.lists(st.integers(0, n_links - 1), min_size=1, max_size=3, unique=True),
                          min_size=1, max_size=8))
    return capacities, paths


@settings(max_examples=150, deadline=None)
@given(topologies())
def test_max_min_fairness_every_flow_has_a_bottleneck(topology):
    """Max-min fair <=> feasible and every flow crosses a saturated link where no flow gets more."""
    capacities, paths = topology
    env = simpy.Environment()
    net = FlowNetwork(env)
    for i, c in enumerate(capacities):
        net.add_link(f"l{i}", c)
    for path in paths:
        net.start([path], 1e9, 0.0)
    env.run(until=1e-9)
    rates = net.rates_Bps()
    rate_of_path = [rates[i] for i in range(len(paths))]
    load = [0.0] * len(capacities)
    for path, rate in zip(paths, rate_of_path, strict=True):
        for link in path:
            load[link] += rate
    for link, c in enumerate(capacities):
        assert load[link] <= c * (1 + 1e-9)
    for path, rate in zip(paths, rate_of_path, strict=True):
        assert rate > 0
        assert any(
            load[link] >= capacities[link] * (1 - 1e-9)
            and all(r <= rate * (1 + 1e-9) for p, r in zip(paths, rate_of_path, strict=True) if link in p)
            for link in path
        )


# -- the cluster's links ------------------------------------------------------------------

def cluster(nodes: int, g: int, nics: int = 1, over: float = 1.0, intra_Bps: float = 100e9,
            inter_Bps: float = 10e9) -> Cluster:
    return Cluster(nodes=nodes, gpus_per_node=g, gpu=make_gpu(),
                   intra_link=make_link("intra", intra_Bps, 1e-6), inter_link=make_link("inter", inter_Bps, 5e-6),
                   nics_per_node=nics, oversubscription=over)


def run_transfers(c: Cluster, pairs: list[tuple[int, int]], n_bytes: float, servers: int = 0):
    env = simpy.Environment()
    net = ClusterNetwork(env, c, servers=servers)
    done = [net.transfer(a, b, n_bytes) for a, b in pairs]
    ends = [math.nan] * len(done)
    for i, event in enumerate(done):
        event.callbacks.append(lambda _e, i=i: ends.__setitem__(i, env.now))
    env.run()
    return ends, net


def test_intra_and_inter_messages_pay_their_own_alpha_and_bandwidth():
    ends, net = run_transfers(cluster(2, 2), [(0, 1), (1, 2)], 1e9)
    assert ends == pytest.approx([1e-6 + 1e9 / 100e9, 5e-6 + 1e9 / 10e9], rel=RTOL)
    assert net.bytes_by_link == {"intra": 1e9, "inter": 1e9}
    assert net.sent_bytes[1] == net.received_bytes[1] == 1e9


def test_an_inter_node_message_is_split_over_the_nics():
    ends, _ = run_transfers(cluster(2, 1, nics=4), [(0, 1)], 1e9)
    assert ends == pytest.approx([5e-6 + 1e9 / (4 * 10e9)], rel=RTOL)


def test_oversubscribed_core_gives_b_over_o_only_when_every_nic_is_busy():
    # alone: 2 nodes x 1 NIC x 10 GB/s / 2 = 10 GB/s of core for one flow: the NIC's full rate
    alone, _ = run_transfers(cluster(2, 1, over=2.0), [(0, 1)], 1e9)
    assert alone == pytest.approx([5e-6 + 0.1], rel=RTOL)
    # both NICs sending: each gets B/o = 5 GB/s
    busy, _ = run_transfers(cluster(2, 1, over=2.0), [(0, 1), (1, 0)], 1e9)
    assert busy == pytest.approx([5e-6 + 0.2] * 2, rel=RTOL)


def test_a_parameter_server_nic_is_shared_by_all_workers():
    # 4 workers on 2 nodes push 1 GB each to one server: 4 flows share its 10 GB/s NIC
    ends, net = run_transfers(cluster(2, 2), [(r, 4) for r in range(4)], 1e9, servers=1)
    assert ends == pytest.approx([5e-6 + 0.4] * 4, rel=RTOL)
    assert net.received_bytes[4] == 4e9


def test_a_parameter_server_port_into_an_oversubscribed_core_carries_b_over_o():
    """The fast path's server load n x o: a server's traffic crossing the core gets B/o.

    One worker alone pushing to the server: its NIC (10 GB/s) and the worker core (2 nodes x
    10 GB/s / 2) would allow 10 GB/s; the server's port into the core allows 5 GB/s.
    """
    ends, _ = run_transfers(cluster(2, 1, over=2.0), [(0, 2)], 1e9, servers=1)
    assert ends == pytest.approx([5e-6 + 0.2], rel=RTOL)
