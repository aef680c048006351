"""Transports: what a connection over a link achieves (sim/costs/transports.py), against closed forms."""

from __future__ import annotations

import os

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


def test_a_stream_is_bound_to_one_cores_copy_rate_however_fast_the_line():
    """One TCP stream moves at most what one core copies through the kernel (20 Gbit/s measured
    here, TcpDefaults.stream_copy_Bps): a 10 GbE stream fills its line, a 100 GbE stream does not,
    and a connection needs ceil(line / copy rate) streams to fill a 100 GbE line; a link's
    tcp_stream_Gbps replaces the figure; RDMA has no such cap."""
    copy = LINUX_TCP.stream_copy_Bps
    assert copy == pytest.approx(20e9 / 8)
    ten, hundred = CAT.links["tcp_10gbe"], CAT.links["tcp_100gbe"]
    assert tcp_stream_Bps(ten) == pytest.approx(ten.effective_Bps)
    assert tcp_stream_Bps(hundred) == pytest.approx(copy)
    assert connection_Bps(hundred, 2) == pytest.approx(2 * copy)
    assert connection_Bps(hundred, 5) == pytest.approx(hundred.effective_Bps)  # 5 x 20 > 94.1 Gbit/s
    host = link_from_dict("fast_host", {"base": "tcp_100gbe", "tcp_stream_Gbps": 40}, links=CAT.links)
    assert tcp_stream_Bps(host) == pytest.approx(40e9 / 8)
    assert link_from_dict("x", {"base": "fast_host"}, links={**CAT.links, "fast_host": host}).tcp_stream_Bps == host.tcp_stream_Bps
    assert connection_Bps(CAT.links["roce_100g"], 1) == pytest.approx(CAT.links["roce_100g"].effective_Bps)
    with pytest.raises(ConfigError, match="tcp_stream_Gbps"):
        link_from_dict("bad", {"base": "tcp_100gbe", "tcp_stream_Gbps": 0}, links=CAT.links)


def test_nccl_sockets_are_copied_by_the_proxy_thread_unless_the_nic_brings_helpers():
    """NCCL's socket transport spawns no helper threads on a generic NIC (net_socket.cc: autoNt 0,
    'progress request using main thread'): the GPU's proxy thread copies its connections, and a
    ring's runtime channels duplicate the search's rings, so they leave each node from the same
    GPUs: graph.channels cores. Over 100 GbE TCP that is one core (20 Gbit/s), over 25 GbE 20 of
    its 23.5 Gbit/s payload; AWS ENA brings 2 helper threads per connection and GCP's gVNIC 4
    (cores enough here); p2p's two channels to a peer share one proxy; gloo's one stream per
    neighbour has its own thread; RDMA copies nothing."""
    from sim.cluster import cluster_from_dict
    from sim.costs.backends import CommOptions, nccl
    from sim.costs.backends.common import ring_rate_Bps

    def cluster(inter, nodes=4, per_node=8, gpu="a100", intra="nvlink3"):
        return cluster_from_dict({"nodes": nodes, "gpus_per_node": per_node, "gpu": gpu, "intra_link": intra,
                                  "inter_link": inter}, CAT)

    copy = LINUX_TCP.stream_copy_Bps
    tcp = cluster("tcp_100gbe")
    graph = nccl.ring_graph(tcp)
    assert (graph.channels, graph.runtime_channels) == (1, 2)
    assert nccl.ring_streams(tcp, graph) == (2, 1)  # 2 sockets, 1 proxy thread
    streams = graph.runtime_channels * nccl.sockets_per_connection(tcp.inter_link)
    assert ring_rate_Bps(tcp, streams) == pytest.approx(2 * copy)  # a thread per stream: 40 Gbit/s
    assert ring_rate_Bps(tcp, *nccl.ring_streams(tcp, graph)) == pytest.approx(copy)
    busbw = 1e9 * nccl._hardware_busbw_GBps("allreduce", "ring", "Simple", tcp, graph)
    assert busbw == pytest.approx(copy)
    p25 = cluster("tcp_25gbe", per_node=4, gpu="p100_pcie", intra="pcie3")
    g25 = nccl.ring_graph(p25)
    assert 1e9 * nccl._hardware_busbw_GBps("allreduce", "ring", "Simple", p25, g25) \
        == pytest.approx(copy)
    assert copy < p25.inter_link.effective_Bps
    aws = link_from_dict("aws_100g", {"base": "tcp_100gbe", "nic_vendor": "aws"}, links=CAT.links)
    assert nccl.socket_threads(aws, 2, 1) == 4 and nccl.socket_threads(tcp.inter_link, 2, 1) == 1
    assert nccl.socket_threads(CAT.links["roce_100g"], 2, 1) is None
    big = 256 * 2**20
    p2p = nccl.BACKEND.ops["sendrecv"](big, cluster("tcp_100gbe", nodes=2, per_node=1), CommOptions())
    assert big / p2p.time_s == pytest.approx(copy, rel=0.02)  # two channels, one proxy thread
    roce = cluster("roce_100g")
    assert ring_rate_Bps(roce, *nccl.ring_streams(roce, nccl.ring_graph(roce))) > 4 * copy


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


def test_nccl_socket_settings_follow_net_socket_cc_and_lift_the_proxy_threads_cap():
    """strategy.nccl_socket_nthreads / nccl_nsocks_perthread as NCCL_SOCKET_NTHREADS /
    NCCL_NSOCKS_PERTHREAD (ncclNetSocketGetNsockNthread): sockets = threads x per thread, none
    without a helper thread (the control socket, the proxy thread); AWS 2 x 8 and GCP 4 x 1 by
    default; past 64 sockets NCCL cuts the per-thread count. With 4 helper threads per connection
    NCCL's ring over 100 GbE TCP reaches the line (2 channels x 4 threads x 20 Gbit/s), in the fast
    path and in the detailed mode's per-flow links alike."""
    from sim.cluster import cluster_from_dict
    from sim.costs.backends import CommOptions, nccl
    from sim.costs.comm import CommSpec, allreduce_cost, per_flow_cluster

    generic, aws = CAT.links["tcp_100gbe"], CAT.links["aws_10g"]
    assert nccl.socket_config(generic) == (1, 0)
    assert nccl.socket_config(generic, CommOptions(socket_nthreads=4)) == (4, 4)
    assert nccl.socket_config(generic, CommOptions(nsocks_perthread=4)) == (1, 0)  # no thread: the main one
    assert nccl.socket_config(aws) == (16, 2)
    assert nccl.socket_config(aws, CommOptions(nsocks_perthread=64)) == (64, 2)  # cut to 64 / 2 per thread
    assert nccl.socket_config(link_from_dict("g", {"base": "tcp_100gbe", "nic_vendor": "gcp"}, links=CAT.links)) == (4, 4)
    cluster = cluster_from_dict({"nodes": 2, "gpus_per_node": 8, "gpu": "a100", "intra_link": "nvlink3",
                                 "inter_link": "tcp_100gbe"}, CAT)
    size = 2**30
    expected = {None: LINUX_TCP.stream_copy_Bps, 4: generic.effective_Bps}  # one proxy thread; 8 helpers
    for threads, rate in expected.items():
        spec = CommSpec("nccl", "ring", socket_nthreads=threads)
        busbw = 2 * 15 / 16 * size / allreduce_cost(size, cluster, spec).time_s
        assert busbw == pytest.approx(rate, rel=0.02)
        assert per_flow_cluster(cluster, spec).inter_link.effective_Bps == pytest.approx(rate)


@pytest.mark.parametrize(("strategy", "field"), [
    ({"nccl_socket_nthreads": 17}, "strategy.nccl_socket_nthreads"),
    ({"nccl_socket_nthreads": 0}, "strategy.nccl_socket_nthreads"),
    ({"nccl_socket_nthreads": 8, "nccl_nsocks_perthread": 9}, "strategy.nccl_nsocks_perthread"),
    ({"nccl_nsocks_perthread": 2.5}, "strategy.nccl_nsocks_perthread"),
    ({"backend": "gloo", "nccl_socket_nthreads": 2}, "strategy.nccl_socket_nthreads"),
])
def test_bad_nccl_socket_settings_are_one_line_errors(strategy, field):
    from sim.config import scenario_from_dict

    with pytest.raises(ConfigError) as err:
        scenario_from_dict({"workload": {"model": "resnet50"},
                            "cluster": {"gpus": 16, "gpus_per_node": 8, "inter_link": "tcp_100gbe"},
                            "strategy": strategy})
    assert str(err.value).startswith(field)


def test_the_copy_rate_measurement_runs_and_prints_its_figures():
    """scripts/measure_tcp_stream.py, the source of TcpDefaults.stream_copy_Bps, stays runnable
    (a tiny run: 32 MiB, one repeat; the MTU 1500 line where this process may make a namespace)
    and prints a rate; the figure itself is this machine's, not checked here."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "measure_tcp_stream.py"
    before = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout if os.geteuid() == 0 else ""
    out = subprocess.run([sys.executable, str(script), "--gib", "0.03125", "--repeats", "1", "--chunk-mib", "1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rates = re.findall(r"one TCP stream, (loopback MTU 65536|MTU 1500): median ([\d.]+) Gbit/s", out.stdout)
    assert rates and rates[0][0] == "loopback MTU 65536" and all(float(r) > 0 for _, r in rates), out.stdout
    if os.geteuid() == 0:  # the namespace it made is gone
        assert subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout == before
