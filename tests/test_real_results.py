"""How the harness reduces repeated timings to one figure (real/results.py): the mean, so that
phases add up, with the median kept beside it. No torch needed."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from real.results import mean_iqr, slowest_per_iteration, step_summary

FAST_S, SLOW_S = 0.5e-3, 3.5e-3
"""The two modes of a 0.25 MiB gloo allreduce on 2 shared cores (docs/validation.md)."""


def test_a_bimodal_phase_is_its_mean_not_its_fast_mode():
    times = [FAST_S] * 6 + [SLOW_S] * 4  # the slow mode in 40% of repetitions
    t, iqr = mean_iqr(times)
    assert statistics.median(times) == FAST_S  # what the median would have said
    assert t == pytest.approx(0.6 * FAST_S + 0.4 * SLOW_S)
    assert iqr == pytest.approx(SLOW_S - FAST_S)  # inclusive quartiles: p25 fast, p75 slow


@given(st.lists(st.lists(st.floats(1e-5, 1e-2), min_size=12, max_size=12), min_size=1, max_size=8))
def test_k_ops_in_a_row_take_k_times_the_mean_of_one(blocks):
    """A phase of k ops lasts their sum; its mean over repetitions is the sum of the ops' means
    (linearity), which no quantile of one op gives in general."""
    k_op_phases = [sum(block) for block in blocks]
    per_op = [[block[i] for block in blocks] for i in range(12)]
    assert mean_iqr(k_op_phases)[0] == pytest.approx(sum(mean_iqr(op)[0] for op in per_op), rel=1e-9)


def test_step_summary_parts_add_up_when_one_rank_is_slowest_throughout():
    slow = [[0.010, 0.020, 0.002], [0.012, 0.030, 0.002], [0.011, 0.022, 0.003]]
    fast = [[x * 0.5 for x in row] for row in slow]
    out = step_summary([fast, slow])
    assert out["total_s"] == pytest.approx(out["fwd_s"] + out["bwd_s"] + out["opt_s"])
    assert out["total_s"] == pytest.approx(statistics.fmean(sum(row) for row in slow))


def test_empty_and_single_repetitions():
    t, iqr = mean_iqr([])
    assert t != t and iqr != iqr  # NaN, NaN
    assert mean_iqr([2e-3]) == (2e-3, 0.0)
    assert slowest_per_iteration([[1.0, 2.0], [1.5, 1.0]]) == [1.5, 2.0]
