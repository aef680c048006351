"""Transports: what a connection over a link achieves (sim/costs/transports.py), against closed forms."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.catalog import builtin_catalog, link_from_dict, tcp_payload_efficiency
from sim.costs.transports import (
    LINUX_TCP,
    cold_start_s,
    connection_Bps,
    rtt_s,
    slow_start_extra_s,
    tcp_stream_Bps,
)
from sim.errors import ConfigError

CAT = builtin_catalog()


def test_tcp_payload_efficiency_is_mss_over_the_frame():
    assert tcp_payload_efficiency(1500, shaped=False) == pytest.approx(1448 / 1538)
    assert tcp_payload_efficiency(9001, shaped=False) == pytest.approx(8949 / 9039)
    assert tcp_payload_efficiency(9001, shaped=True) == pytest.approx(8949 / 9015)
    assert CAT.links["tcp_10gbe"].efficiency == pytest.approx(1448 / 1538)


def test_a_tc_shaped_link_takes_the_lower_rate_and_adds_the_delay_each_way():
    link = link_from_dict("wan", {"base": "aws_10g", "tc": {"rate_Gbps": 1, "delay_ms": 10}}, links=CAT.links)
    assert link.bandwidth_Bps == pytest.approx(1e9 / 8)
    assert link.latency_s == pytest.approx(CAT.links["aws_10g"].latency_s + 0.010)
    assert rtt_s(link) == pytest.approx(2 * link.latency_s)
    assert link.shaped and link.efficiency == pytest.approx(8949 / 9015)
    assert link.per_flow_bandwidth_Bps == CAT.links["aws_10g"].per_flow_bandwidth_Bps
    faster = link_from_dict("x", {"base": "tcp_1gbe", "tc": {"rate_Gbps": 10}}, links=CAT.links)
    assert faster.bandwidth_Bps == CAT.links["tcp_1gbe"].bandwidth_Bps  # tc cannot raise a line rate


def test_a_stream_is_capped_by_window_over_rtt_and_by_the_per_flow_limit():
    wan = link_from_dict("wan", {"base": "tcp_10gbe", "tc": {"delay_ms": 10}}, links=CAT.links)
    assert tcp_stream_Bps(wan) == pytest.approx(LINUX_TCP.window_bytes / rtt_s(wan))
    aws = CAT.links["aws_10g"]
    assert tcp_stream_Bps(aws) == pytest.approx(5e9 / 8)  # 5 Gbit/s per flow
    assert connection_Bps(aws, 16) == pytest.approx(aws.effective_Bps)  # streams fill the line
    assert connection_Bps(wan, 1000) == pytest.approx(wan.effective_Bps)


def test_slow_start_closed_form_doubles_the_window_every_round_trip():
    # window 10 KB -> 20 -> 40 -> 80 KB covers rate x RTT = 100 KB/s x 1 s? use round numbers:
    rtt, rate, iw = 0.1, 1e6, 10e3  # full window = 100 KB: rounds of 10, 20, 40, 80 KB (4 rounds, 150 KB)
    extra = slow_start_extra_s(1e9, rate, rtt, iw)
    assert extra == pytest.approx(4 * rtt - 150e3 / rate)
    assert slow_start_extra_s(1e9, rate, 0.0, iw) == 0.0
    assert slow_start_extra_s(25e3, rate, rtt, iw) == pytest.approx(2 * rtt - 25e3 / rate)  # done in slow start


def test_cold_start_only_after_the_connection_idled_past_its_rto():
    wan = link_from_dict("wan", {"base": "tcp_10gbe", "tc": {"delay_ms": 10}}, links=CAT.links)
    assert cold_start_s(wan, 64e6, 1, idle_s=0.0) == 0.0
    assert cold_start_s(wan, 64e6, 1, idle_s=0.1) == 0.0  # shorter than TCP_RTO_MIN
    assert cold_start_s(wan, 64e6, 1, idle_s=1.0) > 0.0
    assert cold_start_s(CAT.links["ib_edr"], 64e6, 1, idle_s=1.0) == 0.0  # verbs: no slow start


@settings(max_examples=60, deadline=None)
@given(st.floats(0.1, 100), st.floats(0, 50), st.integers(1, 64))
def test_more_bandwidth_or_less_delay_is_never_slower(gbps, delay_ms, streams):
    base = {"base": "tcp_10gbe", "bandwidth_Gbps": gbps, "tc": {"delay_ms": delay_ms}}
    a = link_from_dict("a", base, links=CAT.links)
    b = link_from_dict("b", {**base, "bandwidth_Gbps": gbps * 2}, links=CAT.links)
    c = link_from_dict("c", {**base, "tc": {"delay_ms": delay_ms / 2}}, links=CAT.links)
    assert connection_Bps(b, streams) >= connection_Bps(a, streams)
    assert connection_Bps(c, streams) >= connection_Bps(a, streams)
    assert connection_Bps(a, streams + 1) >= connection_Bps(a, streams)


@pytest.mark.parametrize("spec, field", [
    ({"base": "no_such_link"}, "x.base"),
    ({"base": "tcp_10gbe", "tc": {"rate_Gbps": 0}}, "x.tc.rate_Gbps"),
    ({"base": "tcp_10gbe", "tc": {"delay": 5}}, "x.tc.delay"),
    ({"base": "tcp_10gbe", "tc": 5}, "x.tc"),
    ({"base": "tcp_10gbe", "mtu_bytes": 40}, "x.mtu_bytes"),
    ({"base": "tcp_10gbe", "per_flow_Gbps": float("inf")}, "x.per_flow_Gbps"),
    ({"base": "tcp_10gbe", "nic_vendor": "azure"}, "x.nic_vendor"),
    ({"bandwidth_Gbps": 10}, "x.latency_us"),
])
def test_bad_link_entries_name_the_field(spec, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        link_from_dict("x", spec, "catalog.links", CAT.links)
