"""Transports: what a connection over a link achieves, by the link's kind.

A link (``sim.catalog.Link``) is hardware: a line rate, a one-way latency, an MTU. A transport
is the software that moves a collective library's bytes over it, and it decides more than a
slower line rate does (DESIGN.md 'Transports'):
- tcp: a stream moves at most min(line rate x payload efficiency, the network's per-flow cap,
  window / RTT, what one core copies through the kernel) (Mathis et al. 1997's window bound; the
  window is capped by the socket buffers; the copy rate measured here, TcpDefaults),
  and after an idle spell longer than the retransmission timeout it slow-starts again from a
  restart window: Linux halves its window once per RTO of idle, never below the initial window
  (tcp_cwnd_restart, RFC 2861's window validation; ``net.ipv4.tcp_slow_start_after_idle = 1``),
  and doubles it every round trip from there (``restart_window_bytes``). A library opens its own number of streams
  per connection (``streams``): NCCL's socket transport NCCL_NSOCKS_PERTHREAD x
  NCCL_SOCKET_NTHREADS, gloo one.
- roce, infiniband: verbs; no window short of the NIC's, no slow start, no kernel copies.
- nvlink, pcie: load/store or copy engines inside a node.
- loopback, measured, custom: links whose figures are a measurement of the library end to end (what
  ``scalebench calibrate`` fits) or a user's alpha-beta: the line rate and latency as given,
  nothing added (``Transport.end_to_end``: a backend adds no pipeline stalls of its own either).

Each transport is one entry of ``TRANSPORTS``; a new link kind is a new entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sim.catalog import Link
from sim.units import MIB


@dataclass(frozen=True)
class TcpDefaults:
    """Linux's TCP defaults, each from the kernel's documentation or source."""

    window_bytes: float = 3 * MIB
    """Largest window a stream reaches: net.ipv4.tcp_rmem's maximum 6 MiB (6291456) with
    tcp_adv_win_scale = 1, which keeps half of the receive buffer for the window
    (Documentation/networking/ip-sysctl.rst, Linux 4.x-6.5)."""
    initial_window_segments: int = 10
    """Initial window, and the floor of a restart, in segments (RFC 6928; include/net/tcp.h
    TCP_INIT_CWND)."""
    min_rto_s: float = 0.2
    """TCP_RTO_MIN = HZ/5 (include/net/tcp.h): the floor of the RTT variance term of the
    retransmission timeout (``rto_s``)."""
    @property
    def stream_copy_Bps(self) -> float:
        """What one stream moves when one thread sends it and one receives it: the kernel copies
        every byte into and out of the socket on those threads' cores (plus each segment's softirq
        work), so a stream is bound to one core's rate however fast the line: a host's figure
        (sim/data/hosts.yaml ``tcp_stream_Gbps``; a cluster's ``host`` sets it on its TCP links,
        a link's own ``tcp_stream_Gbps`` wins). This default is the catalog's DEFAULT_HOST's:
        our measurement, 20 Gbit/s (results/hosts/epyc_vm_2026.md)."""
        from sim.catalog import DEFAULT_HOST, builtin_catalog

        return builtin_catalog().hosts[DEFAULT_HOST].tcp_stream_Bps


LINUX_TCP = TcpDefaults()


def rtt_s(link: Link) -> float:
    """Round trip: twice the one-way latency (a delay added with tc on each host's egress
    counts in both directions; DESIGN.md)."""
    return 2.0 * link.latency_s


def mss_bytes(link: Link) -> float:
    """TCP payload per segment: MTU - 52 (sim.catalog.TCP_IP_HEADER_BYTES)."""
    from sim.catalog import TCP_IP_HEADER_BYTES

    return float(link.mtu_bytes - TCP_IP_HEADER_BYTES)


def tcp_window_bytes(link: Link) -> float:
    return link.tcp_window_bytes if link.tcp_window_bytes is not None else LINUX_TCP.window_bytes


def tcp_stream_copy_Bps(link: Link) -> float:
    """One core's copy rate for a stream, x the link's measured bandwidth factor (the factor scales
    what the link delivers, whichever bound binds)."""
    rate = link.tcp_stream_Bps if link.tcp_stream_Bps is not None else LINUX_TCP.stream_copy_Bps
    return rate * link.bandwidth_factor


def tcp_stream_Bps(link: Link) -> float:
    """One TCP stream: min(line x payload efficiency, per-flow cap, window / RTT, one core's copy
    rate). NCCL's socket transport without helper threads (any NIC but AWS's and Google's) drives
    its sockets from the GPU's proxy thread, so channels leaving through one GPU share its core:
    a stream per core here is the upper bound of that."""
    rate = min(link.effective_Bps, tcp_stream_copy_Bps(link))
    if link.per_flow_bandwidth_Bps is not None:
        rate = min(rate, link.per_flow_bandwidth_Bps)
    rtt = rtt_s(link)
    if rtt > 0:
        rate = min(rate, tcp_window_bytes(link) / rtt)
    return rate


def line_stream_Bps(link: Link) -> float:
    """RDMA, NVLink, PCIe and measured links: a stream gets the link (and its per-flow cap)."""
    if link.per_flow_bandwidth_Bps is not None:
        return min(link.effective_Bps, link.per_flow_bandwidth_Bps)
    return link.effective_Bps


def slow_start_extra_s(bytes_per_stream: float, stream_Bps: float, rtt: float, initial_window_bytes: float) -> float:
    """Time lost to slow start by a stream that must move ``bytes_per_stream`` at up to
    ``stream_Bps``: it sends its window each round trip, starting from ``initial_window_bytes``
    and doubling until the window carries the full rate (window = rate x RTT), then streams at
    the full rate. Extra = (rounds x RTT) - (bytes sent in those rounds / rate); 0 when the
    initial window already fills the path or there is no round trip (Cardwell, Savage and
    Anderson 2000, 'Modeling TCP latency', slow-start phase)."""
    if rtt <= 0 or bytes_per_stream <= 0 or stream_Bps <= 0:
        return 0.0
    full_window = stream_Bps * rtt
    window, sent, rounds = initial_window_bytes, 0.0, 0
    while window < full_window and sent < bytes_per_stream:
        sent += window
        rounds += 1
        window *= 2
    if sent >= bytes_per_stream:  # done inside slow start: each round carried a whole window
        return max(0.0, rounds * rtt - bytes_per_stream / stream_Bps)
    return max(0.0, rounds * rtt - sent / stream_Bps)


def rto_s(link: Link) -> float:
    """Linux's retransmission timeout on a steady path: RTO = SRTT + RTTVAR with RTTVAR floored at
    TCP_RTO_MIN (net/ipv4/tcp_input.c tcp_rtt_estimator: rttvar_us = max(mdev_max_us,
    tcp_rto_min_us); __tcp_set_rto: srtt + rttvar), so RTT + 200 ms where the RTT does not vary."""
    return rtt_s(link) + LINUX_TCP.min_rto_s


def restart_window_bytes(link: Link, previous_window_bytes: float, idle_s: float) -> float:
    """The window a stream sends with after ``idle_s`` of silence (net/ipv4/tcp_output.c
    tcp_cwnd_restart, called by tcp_event_data_sent when the stream idled longer than its RTO):
    restart = min(initial window, window); 'while ((delta -= rto) > 0 && cwnd > restart) cwnd >>= 1';
    the window becomes max(cwnd, restart). So it halves once per whole RTO of idle after the first,
    never below the initial window (RFC 2861 halves per RTO; RFC 5681 sec. 4.1 would restart at the
    initial window itself). ssthresh becomes max(ssthresh, 3/4 window) (tcp_current_ssthresh); on a
    path without loss it is still its initial infinity, so the stream slow-starts back to full."""
    mss = mss_bytes(link)
    cwnd = max(1, int(previous_window_bytes // mss))  # segments, as the kernel counts them
    restart = min(LINUX_TCP.initial_window_segments, cwnd)
    delta, rto = idle_s, rto_s(link)
    if delta <= rto:
        return cwnd * mss
    while (delta := delta - rto) > 0 and cwnd > restart:
        cwnd >>= 1
    return max(cwnd, restart) * mss


def tcp_cold_start_s(link: Link, bytes_per_stream: float, stream_Bps: float, idle_s: float) -> float:
    """Slow start again when the connection sat idle longer than the RTO: from Linux's restart
    window (``restart_window_bytes``) of the window the stream had, back to the one that fills its
    path; a warm connection keeps its window. The window before the idle spell is taken as the one
    that fills the stream's path, rate x RTT, at most the socket buffers' and at least the initial
    window, below which a stream's window does not fall without loss (assumed: the previous call
    reached it and queueing let it grow no further)."""
    rtt = rtt_s(link)
    if idle_s <= rto_s(link) or rtt <= 0:
        return 0.0
    initial = LINUX_TCP.initial_window_segments * mss_bytes(link)
    previous = max(initial, min(stream_Bps * rtt, tcp_window_bytes(link)))
    return slow_start_extra_s(bytes_per_stream, stream_Bps, rtt, restart_window_bytes(link, previous, idle_s))


def _no_cold_start(link: Link, bytes_per_stream: float, stream_Bps: float, idle_s: float) -> float:
    return 0.0


@dataclass(frozen=True)
class Transport:
    name: str
    stream_Bps: Callable[[Link], float]
    """Sustained rate of one stream (one flow) over the link."""
    cold_start_s: Callable[[Link, float, float, float], float]
    """(link, bytes per stream, stream rate, idle seconds before) -> seconds lost ramping up."""
    end_to_end: bool = False
    """The link's figures are measured end to end through the library (or a user's plain
    alpha-beta): backends add no pipeline stalls of their own."""
    host_staged: bool = False
    """Data passes through host memory and the kernel (sockets): the library copies it there."""
    description: str = ""


TRANSPORTS: dict[str, Transport] = {
    "tcp": Transport("tcp", tcp_stream_Bps, tcp_cold_start_s, host_staged=True,
                     description="kernel TCP: streams capped by window / RTT and per-flow limits; slow start after idle"),
    "roce": Transport("roce", line_stream_Bps, _no_cold_start,
                      description="RDMA over Converged Ethernet (verbs): line rate, no window, no slow start"),
    "infiniband": Transport("infiniband", line_stream_Bps, _no_cold_start,
                            description="InfiniBand verbs: line rate, no window, no slow start"),
    "nvlink": Transport("nvlink", line_stream_Bps, _no_cold_start, description="NVLink inside a node"),
    "pcie": Transport("pcie", line_stream_Bps, _no_cold_start, description="PCIe peer to peer inside a node"),
    "loopback": Transport("loopback", line_stream_Bps, _no_cold_start, end_to_end=True,
                          description="a measured link (scalebench calibrate): its fitted figures, nothing added"),
    "measured": Transport("measured", line_stream_Bps, _no_cold_start, end_to_end=True,
                          description="a link fitted to a library's own collectives (calibrate --from-nccl-tests)"),
    "custom": Transport("custom", line_stream_Bps, _no_cold_start, end_to_end=True,
                        description="a user's alpha-beta link: its figures, nothing added"),
}


def transport_of(link: Link) -> Transport:
    return TRANSPORTS[link.kind]


def connection_Bps(link: Link, streams: int, threads: int | None = None) -> float:
    """A connection of ``streams`` parallel streams: min(line x efficiency, streams x one stream),
    and, where ``threads`` (fewer than the streams) copy all of them through the kernel, at most
    threads x one core's copy rate (host-staged transports only: sockets)."""
    rate = min(link.effective_Bps, max(1, streams) * transport_of(link).stream_Bps(link))
    if threads is not None and transport_of(link).host_staged:
        rate = min(rate, max(1, threads) * tcp_stream_copy_Bps(link))
    return rate


def cold_start_s(link: Link, bytes_per_connection: float, streams: int, idle_s: float,
                 threads: int | None = None) -> float:
    """Ramp-up of a connection whose ``streams`` share ``bytes_per_connection`` equally."""
    streams = max(1, streams)
    rate = connection_Bps(link, streams, threads) / streams
    return transport_of(link).cold_start_s(link, bytes_per_connection / streams, rate, idle_s)
