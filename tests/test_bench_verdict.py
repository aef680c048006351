"""`scalebench real --bench` ends in a verdict, as `validate` does: the harness' DDP step against a
bare DDP loop, interleaved in the same processes, judged against its 3 % target with the blocks'
own spread (real/benchmarks.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from real.benchmarks import (
    EXIT_FAIL,
    EXIT_INCONCLUSIVE,
    EXIT_PASS,
    harness_verdict,
    median_interval,
)


def test_median_interval_is_the_sign_tests_order_statistics():
    """By hand from the binomial: n = 10, P(B <= 1) = 11/1024 = 0.0107 <= 0.025 < P(B <= 2) =
    56/1024: the 2nd and 9th values; n = 20: P(B <= 5) = 0.0207, P(B <= 6) = 0.0577: 6th and
    15th; n = 5 cannot reach 95 % (P(B = 0) = 1/32 > 0.025): the extremes."""
    assert median_interval([float(v) for v in range(10, 0, -1)]) == (2.0, 9.0)
    assert median_interval([float(v) for v in range(1, 21)]) == (6.0, 15.0)
    assert median_interval([5.0, 1.0, 3.0, 2.0, 4.0]) == (1.0, 5.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1, 1), min_size=1, max_size=40))
def test_the_interval_holds_the_median(values):
    import statistics

    low, high = median_interval(values)
    assert low <= statistics.median(values) <= high


BARE = [0.050] * 10


@pytest.mark.parametrize(("harness", "others", "status", "code", "fragment"), [
    ([0.0505, 0.0510, 0.0495, 0.0500, 0.0508, 0.0502, 0.0499, 0.0511, 0.0504, 0.0506], 0.02, "PASS", EXIT_PASS,
     "within +-3 %"),
    # +17 %, every block well beyond the target: what used to print '+17.0 % ... target within 3 %' and exit 0
    ([0.0585] * 5 + [0.0580, 0.0590, 0.0586, 0.0584, 0.0588], 0.02, "FAIL", EXIT_FAIL, "beyond +-3 %"),
    ([0.0585] * 10, 0.45, "INCONCLUSIVE", EXIT_INCONCLUSIVE, "other processes used 45 %"),
    # the blocks spread from -2 % to +8 %: the median may or may not be within the target
    ([0.049, 0.0515, 0.053, 0.054, 0.0505, 0.052, 0.0535, 0.051, 0.0525, 0.0540], 0.02, "INCONCLUSIVE",
     EXIT_INCONCLUSIVE, "spread across"),
])
def test_the_verdict(harness, others, status, code, fragment):
    verdict = harness_verdict(harness, BARE, others)
    assert (verdict["status"], verdict["exit_status"]) == (status, code)
    assert fragment in verdict["reason"]
    diffs = sorted(h / 0.050 - 1 for h in harness)
    assert verdict["interval"] == [pytest.approx(diffs[1]), pytest.approx(diffs[8])]  # 10 blocks: 2nd and 9th


def test_bench_detailed_default_scenarios_are_valid_at_every_default_size():
    """`scalebench bench --fidelity detailed` with no flags must accept its own scenarios: the a100's
    node default of 8 rail NICs once made the 16,384-GPU pipeline row 16,384 host ports on a
    radix-32 3-tier fat tree, which holds 32^3 / 4 = 8,192, and the command refused itself."""
    from scalebench.commands import bench

    for gpus in bench.DETAILED_GPUS:
        bench._checked(bench._scenario_spec("resnet50", gpus, 8, "ring", "detailed", bench.DETAILED_FABRIC))
    for gpus in bench.PIPELINE_GPUS:
        bench._checked(bench._pipeline_spec("llama2_7b", gpus, bench.DETAILED_FABRIC))
