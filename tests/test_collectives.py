"""The cost layer against its closed forms, and its invariants."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.catalog import Link
from sim.cluster import Cluster
from sim.costs.backends import BUSBW_FACTOR
from sim.costs.collectives import (
    ALLREDUCE,
    bytes_by_link,
    collective_time_s,
    hierarchical_allreduce,
    hierarchical_allreduce_time,
    ps_push_pull,
    ps_push_pull_time,
    ring_allreduce,
    ring_allreduce_time,
    tree_allreduce,
    tree_allreduce_time,
)
from tests.conftest import make_gpu, make_link

MIB = 1024**2


def cluster(nodes: int, g: int, intra: Link | None = None, inter: Link | None = None, nics: int = 1,
            over: float = 1.0) -> Cluster:
    return Cluster(nodes=nodes, gpus_per_node=g, gpu=make_gpu(),
                   intra_link=intra or make_link("intra", 100e9, 1e-6),
                   inter_link=inter or make_link("inter", 10e9, 5e-6), nics_per_node=nics, oversubscription=over)


@pytest.mark.parametrize("n", [2, 3, 8, 64, 1024])
@pytest.mark.parametrize("size", [1024, 25 * MIB, 1e9])
def test_ring_matches_closed_form_on_one_link_class(n, size):
    """Ring over n ranks, one per node, uncontended: 2(n-1)a + 2(n-1)/n S/B within 0.5%."""
    inter = make_link("inter", 12.5e9, 3e-6)
    c = cluster(n, 1, inter=inter)
    got = collective_time_s(ring_allreduce(size, c), c)
    want = ring_allreduce_time(n, size, inter.alpha_s, inter.effective_Bps)
    assert got == pytest.approx(want, rel=0.005)


def test_ring_single_node_uses_intra_link():
    intra = make_link("intra", 150e9, 0.6e-6)
    c = cluster(1, 8, intra=intra)
    got = collective_time_s(ring_allreduce(100 * MIB, c), c)
    assert got == pytest.approx(ring_allreduce_time(8, 100 * MIB, intra.alpha_s, intra.effective_Bps), rel=1e-12)


def test_ring_across_nodes_is_bound_by_the_slower_link_per_step():
    c = cluster(4, 8)
    step = max(c.intra_link.alpha_s + (64 * MIB / 32) / c.intra_link.effective_Bps,
               c.inter_link.alpha_s + (64 * MIB / 32) / c.inter_link.effective_Bps)
    assert collective_time_s(ring_allreduce(64 * MIB, c), c) == pytest.approx(2 * 31 * step, rel=1e-12)


def test_more_nics_split_the_inter_node_load():
    one, two = cluster(4, 8, nics=1), cluster(4, 8, nics=2)
    t1 = collective_time_s(ring_allreduce(256 * MIB, one), one)
    t2 = collective_time_s(ring_allreduce(256 * MIB, two), two)
    assert t2 < t1
    bw_part = 2 * 31 * (256 * MIB / 32) / one.inter_link.effective_Bps
    assert t1 - t2 == pytest.approx(bw_part / 2, rel=1e-9)


def test_oversubscription_slows_inter_node_steps():
    c1, c2 = cluster(4, 1, over=1.0), cluster(4, 1, over=2.0)
    size = 100 * MIB
    t1, t2 = (collective_time_s(ring_allreduce(size, c), c) for c in (c1, c2))
    assert t2 - t1 == pytest.approx(2 * 3 * (size / 4) / c1.inter_link.effective_Bps, rel=1e-9)


@pytest.mark.parametrize("nodes,g", [(2, 1), (4, 8), (16, 4), (1, 8), (3, 2)])
def test_tree_matches_closed_form(nodes, g):
    c = cluster(nodes, g)
    size = 32 * MIB
    slower = min(c.inter_link.effective_Bps if nodes > 1 else math.inf, c.intra_link.effective_Bps if g > 1 else math.inf)
    want = tree_allreduce_time(nodes, g, size, c.inter_link.alpha_s, c.intra_link.alpha_s, slower)
    assert collective_time_s(tree_allreduce(size, c), c) == pytest.approx(want, rel=0.005)


def test_tree_latency_grows_with_log2_nodes():
    small = 8  # bytes: latency-bound
    times = [collective_time_s(tree_allreduce(small, cluster(n, 1)), cluster(n, 1)) for n in (2, 4, 16, 256)]
    alpha = cluster(2, 1).inter_link.alpha_s
    assert [round(t / alpha) for t in times] == [2, 4, 8, 16]


@pytest.mark.parametrize("nodes,g,nics", [(2, 4, 1), (4, 8, 1), (8, 8, 2), (32, 4, 1)])
def test_hierarchical_matches_closed_form(nodes, g, nics):
    c = cluster(nodes, g, nics=nics)
    size = 100 * MIB
    want = hierarchical_allreduce_time(nodes, g, size, c.intra_link, c.inter_link, nics)
    assert collective_time_s(hierarchical_allreduce(size, c), c) == pytest.approx(want, rel=0.005)


def test_hierarchical_beats_flat_ring_latency_across_many_nodes():
    c = cluster(64, 8)
    small = 64 * 1024
    assert collective_time_s(hierarchical_allreduce(small, c), c) < collective_time_s(ring_allreduce(small, c), c)


@pytest.mark.parametrize("n,servers,g", [(2, 1, 1), (8, 1, 1), (8, 2, 1), (64, 4, 1), (32, 4, 8), (16, 16, 1)])
def test_ps_matches_closed_form(n, servers, g):
    c = cluster(n // g, g)
    size = 50 * MIB
    want = ps_push_pull_time(n, size, servers, c.inter_link.alpha_s, c.inter_link.effective_Bps, g)
    assert collective_time_s(ps_push_pull(size, c, servers=servers), c) == pytest.approx(want, rel=0.005)


def test_single_ps_server_is_the_bottleneck_2nSB():
    """One server: T = 2(a + n S / B) (DESIGN.md)."""
    c = cluster(16, 1)
    size = 10 * MIB
    got = collective_time_s(ps_push_pull(size, c, servers=1), c)
    assert got == pytest.approx(2 * (c.inter_link.alpha_s + 16 * size / c.inter_link.effective_Bps), rel=1e-12)


@pytest.mark.parametrize("name", sorted(ALLREDUCE))
def test_one_rank_communicates_nothing(name):
    c = cluster(1, 1)
    steps = ALLREDUCE[name](MIB, c)
    assert collective_time_s(steps, c) == 0.0
    assert bytes_by_link(steps) == {"intra": 0.0, "inter": 0.0}


def test_ring_bytes_per_link_class():
    """Each rank sends 2(n-1)/n S; a ring over 2 nodes x 4 has 2 inter-node flows per step."""
    c = cluster(2, 4)
    size = 8 * MIB
    b = bytes_by_link(ring_allreduce(size, c))
    per_step_chunk = size / 8
    assert b["inter"] == pytest.approx(2 * 7 * 2 * per_step_chunk)
    assert b["intra"] == pytest.approx(2 * 7 * 6 * per_step_chunk)
    assert b["inter"] + b["intra"] == pytest.approx(8 * 2 * 7 / 8 * size)


def test_busbw_factors_follow_nccl_tests():
    assert BUSBW_FACTOR["allreduce"](8) == pytest.approx(2 * 7 / 8)
    assert BUSBW_FACTOR["allgather"](4) == pytest.approx(3 / 4)
    assert BUSBW_FACTOR["broadcast"](64) == 1.0


links = st.builds(lambda bw, lat: make_link("x", bw, lat),
                  st.floats(1e8, 1e12), st.floats(0, 1e-3))


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(ALLREDUCE)),
    nodes=st.integers(1, 64), g=st.integers(1, 8), nics=st.integers(1, 4),
    size=st.floats(1, 1e10), intra=links, inter=links, factor=st.floats(1.0, 100.0),
)
def test_more_bandwidth_is_never_slower(name, nodes, g, nics, size, intra, inter, factor):
    from dataclasses import replace

    slow = cluster(nodes, g, intra, inter, nics)
    fast = cluster(nodes, g, replace(intra, bandwidth_Bps=intra.bandwidth_Bps * factor),
                   replace(inter, bandwidth_Bps=inter.bandwidth_Bps * factor), nics)
    t_slow = collective_time_s(ALLREDUCE[name](size, slow), slow)
    t_fast = collective_time_s(ALLREDUCE[name](size, fast), fast)
    assert t_fast <= t_slow * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 512), size=st.floats(1, 1e10))
def test_ring_time_is_monotone_in_size(n, size):
    c = cluster(n, 1)
    assert collective_time_s(ring_allreduce(size, c), c) <= collective_time_s(ring_allreduce(size * 2, c), c)
