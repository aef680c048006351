"""Emulated links: rate parsing everywhere; namespaces, cleanup and shaped rates where root and tc exist."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from real.netem import Namespace, availability, parse_rate
from sim.errors import ConfigError

AVAILABLE, WHY = availability()
needs_netns = pytest.mark.skipif(not AVAILABLE, reason=WHY or "netns available")


@pytest.mark.parametrize("text, bps", [("100mbit", 1e8), ("1gbit", 1e9), ("10gbit", 1e10), ("2.5gbit", 2.5e9)])
def test_parse_rate(text, bps):
    assert parse_rate(text) == bps


@pytest.mark.parametrize("text", ["fast", "1gbps", "", "-1gbit"])
def test_bad_rate_is_a_config_error(text):
    with pytest.raises(ConfigError, match="--link"):
        parse_rate(text)


def _namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


@pytest.mark.netns
@needs_netns
@pytest.mark.parametrize("topology, qdisc", [("shared", "tbf"), ("per_link", "htb")])
def test_namespace_is_shaped_and_removed_on_error(topology, qdisc):
    with pytest.raises(RuntimeError, match="boom"), Namespace("1gbit", topology) as ns:
        assert ns.name in _namespaces()
        shown = subprocess.run(["ip", "netns", "exec", ns.name, "tc", "qdisc", "show", "dev", "lo"],
                               capture_output=True, text=True).stdout
        assert qdisc in shown
        if qdisc == "tbf":
            assert "rate 1Gbit" in shown
        raise RuntimeError("boom")
    assert ns.name not in _namespaces()


@pytest.mark.netns
@needs_netns
def test_namespace_removed_on_sigterm():
    code = ("import time; from real.netem import Namespace\n"
            "with Namespace('100mbit') as ns:\n    print(ns.name, flush=True); time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    name = proc.stdout.readline().strip()
    assert name in _namespaces()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    time.sleep(0.2)
    assert name not in _namespaces()


@pytest.mark.netns
@needs_netns
def test_shared_medium_rate_is_held():
    """tbf at 1 Gbit/s: 2-rank allreduce moves 2 x S per operation through the one qdisc
    (each rank sends S), so n x busbw is the medium's load; it must reach >= 85 % of the
    rate and never exceed it by more than the 2 ms bucket allows (5 %)."""
    pytest.importorskip("torch")
    from real.bench_comm import measure_collectives

    rows = measure_collectives(2, ["allreduce"], min_bytes=4 * 2**20, max_bytes=4 * 2**20, iterations=4,
                               warmup=1, link="1gbit", timeout_s=60)
    aggregate_Bps = 2 * rows[0]["busbw_GBps"] * 1e9
    assert rows[0]["wrong"] == 0
    assert 0.85 * 125e6 <= aggregate_Bps <= 1.05 * 125e6
    assert rows[0]["link"] == "1gbit" and "no added latency" in rows[0]["link_note"]
