"""The fast path's ring schedule in closed form (sim.costs.backends.ring_maxplus) against the
recurrences it solves, stepped one step at a time (exact to 1e-12), and a case by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.costs.backends.ring_maxplus import cut_through_ring_s, periodic_ring_ends

figures = st.lists(st.floats(0.0, 5.0), min_size=1, max_size=9)


@settings(max_examples=200, deadline=None)
@given(holds=figures, extra=st.lists(st.floats(0.0, 5.0), min_size=9, max_size=9), nodes=st.integers(1, 6),
       steps=st.integers(0, 60))
def test_the_closed_form_is_the_recurrence_stepped(holds, extra, nodes, steps):
    """s(x, k+1) = max(s(x, k) + w_x, s(x-1, k) + d_{x-1}) over ``nodes`` periods, from s = 0."""
    g = len(holds)
    w = np.tile(holds, nodes)
    d = w + np.tile(extra[:g], nodes)
    s = np.zeros(g * nodes)
    for _ in range(steps):
        s = np.maximum(s + w, np.roll(s + d, 1))
    got = periodic_ring_ends(steps, holds, list(d[:g]))
    assert got == pytest.approx([s[p::g].max() for p in range(g)], rel=1e-12, abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(t=st.lists(st.floats(0.01, 5.0), min_size=1, max_size=6), share=st.floats(0.0, 1.0),
       lat=st.lists(st.floats(0.0, 5.0), min_size=6, max_size=6), nodes=st.integers(1, 5), steps=st.integers(1, 40))
def test_cut_through_is_its_send_end_recurrence(t, share, lat, nodes, steps):
    """In send ends e: e(x, 0) = t_x; e(x, k+1) = max(e(x, k) + t_x, e(x-1, k) + l_{x-1} +
    max(u_{x-1} - t_{x-1} + t_x, u_x)); a member is done when its last send is and the last of
    its predecessor's has arrived: max(e(x, K-1), e(x-1, K-1) + l_{x-1})."""
    g = len(t)
    T = np.tile(t, nodes)
    U = T * share
    L = np.tile(lat[:g], nodes)
    e = T.copy()
    for _ in range(steps - 1):
        e = np.maximum(e + T, np.roll(e + L, 1) + np.maximum(np.roll(U - T, 1) + T, U))
    want = np.maximum(e, np.roll(e + L, 1)).max()
    assert cut_through_ring_s(steps, t, [share * x for x in t], lat[:g]) == pytest.approx(want, rel=1e-12)


def test_a_whole_step_is_store_and_forward_and_two_ranks_by_hand():
    """u = t: the detailed mode's recurrence (d = l + t). Two ranks, 2 steps (an allreduce), t = 3,
    l = 1: the second send ends at max(2t, t + l + t) = 7, its data is in l later: 8. With a
    granule u = 1 it may start once the first granule is in, and ends at max(2t, t + l + u) = 6:
    done at 7 (the latency once more, not a whole step)."""
    assert cut_through_ring_s(2, [3.0], [3.0], [1.0]) == pytest.approx(8.0)
    assert cut_through_ring_s(2, [3.0], [1.0], [1.0]) == pytest.approx(7.0)
    # latency-bound, 1 GPU per node: every one of K steps waits for l + u
    assert cut_through_ring_s(10, [1.0], [0.5], [4.0]) == pytest.approx(9 * 4.5 + 1.0 + 4.0)
