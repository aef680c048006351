"""CPU steal accounting and the relaunch of a measurement that lost too much CPU (real/steal.py)."""

from __future__ import annotations

import itertools
import math
import os
import signal
import time

import pytest

from real import steal
from real.steal import cpu_counters, least_stolen, steal_columns, steal_fraction


def test_cpu_counters_reads_the_cpu_line(tmp_path):
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 5 20 900 3 1 2 12 0 0\ncpu0 50 2 10 450 1 0 1 6 0 0\n")
    assert cpu_counters(stat) == (12, 100 + 5 + 20 + 1 + 2 + 12)


@pytest.mark.parametrize("text", ["", "intr 1 2 3\n", "cpu 1 2 3\n"])
def test_cpu_counters_none_without_a_steal_column(tmp_path, text):
    stat = tmp_path / "stat"
    stat.write_text(text)
    assert cpu_counters(stat) is None
    assert cpu_counters(tmp_path / "missing") is None


def test_steal_fraction_is_of_the_cpu_wanted():
    assert steal_fraction((10, 1000), (30, 1200)) == pytest.approx(0.1)  # 20 of 200 ticks
    assert steal_fraction(None, (1, 2)) is None
    assert steal_fraction((5, 100), (5, 100)) is None  # idle between the readings


def _fake_counters(monkeypatch, fractions):
    """Each run() between two readings loses the next fraction of 1000 wanted ticks."""
    state = {"steal": 0, "wanted": 0}
    it = iter(fractions)
    readings = itertools.count()

    def counters():
        if next(readings) % 2:  # the reading after a run
            f = next(it)
            state["steal"] += round(1000 * f)
            state["wanted"] += 1000
        return state["steal"], state["wanted"]

    monkeypatch.setattr(steal, "cpu_counters", counters)


def test_a_quiet_launch_runs_once(monkeypatch):
    _fake_counters(monkeypatch, [0.02])
    calls = []
    result, fraction, n = least_stolen(lambda: calls.append(1) or len(calls), limit=0.1, attempts=3)
    assert (result, n, len(calls)) == (1, 1, 1)
    assert fraction == pytest.approx(0.02)


def test_a_stolen_launch_is_repeated_until_quiet(monkeypatch):
    _fake_counters(monkeypatch, [0.4, 0.05])
    calls = []
    result, fraction, n = least_stolen(lambda: calls.append(1) or len(calls), limit=0.1, attempts=3)
    assert (result, n) == (2, 2)
    assert fraction == pytest.approx(0.05)


def test_after_the_last_attempt_the_least_stolen_is_kept(monkeypatch):
    _fake_counters(monkeypatch, [0.3, 0.15, 0.4])
    calls = []
    messages = []
    result, fraction, n = least_stolen(lambda: calls.append(1) or len(calls), limit=0.1, attempts=3,
                                       progress=messages.append)
    assert (result, n) == (2, 3)
    assert fraction == pytest.approx(0.15)
    assert len(messages) == 2 and "30%" in messages[0]


def test_unknown_steal_runs_once(monkeypatch):
    monkeypatch.setattr(steal, "cpu_counters", lambda: None)
    assert least_stolen(lambda: "x") == ("x", None, 1)
    with pytest.raises(ValueError, match="attempts"):
        least_stolen(lambda: "x", attempts=0)


def test_steal_columns():
    assert steal_columns({"cpu_steal_fraction": 0.0312, "launches": 2}) == {"cpu_steal_percent": 3.12, "launches": 2}
    cols = steal_columns({})
    assert cols["launches"] == 1 and cols["cpu_steal_percent"] != cols["cpu_steal_percent"]  # NaN


# -- other processes' share of the CPU (real/load.py) --------------------------------------------

def test_others_share_is_busy_time_minus_our_own_over_wall_time_and_cores(tmp_path):
    from real.load import CLK_TCK, busy_ticks, fraction

    stat = tmp_path / "stat"
    stat.write_text("cpu  1000 50 450 9000 10 20 30 5 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
    assert busy_ticks(stat) == 1000 + 50 + 450  # user + nice + system: irq and softirq are not a neighbour's
    # 2 cores for 2 s; 3 s of busy CPU in all, 1 s of it ours: others used 2 s of 4 -> 50 %
    assert fraction(0, 3 * CLK_TCK, own_s=1.0, wall_s=2.0, cpus=2) == pytest.approx(0.5)
    assert fraction(0, CLK_TCK // 2, own_s=1.0, wall_s=2.0, cpus=2) == 0.0  # tick rounding never goes negative
    assert math.isnan(fraction(None, 10, own_s=0.0, wall_s=1.0, cpus=2))


def test_a_load_sample_counts_a_busy_neighbour_and_names_it():
    import subprocess
    import sys

    from real.load import LoadSample

    # a grandchild, so that it is not one of "our" children: `sh` starts it and waits
    busy = subprocess.Popen(["sh", "-c", f"{sys.executable} -c 'while True: pass' & echo $!; wait"],
                            stdout=subprocess.PIPE, text=True)
    looping = int(busy.stdout.readline())
    try:
        time.sleep(0.3)
        with LoadSample() as sample:
            time.sleep(1.5)
    finally:
        os.kill(looping, signal.SIGKILL)
        busy.wait()
    got = sample.as_dict()
    assert 0.0 <= got["others_cpu_fraction"] <= 1.05 and got["loadavg_1m"] > 0
    assert "python" in got["others_top"] or got["others_cpu_fraction"] > 0  # on a busy machine it may be outranked
