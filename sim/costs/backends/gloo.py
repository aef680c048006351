"""gloo: rings over one TCP connection per neighbour, reduced on the CPU, two segments in flight.

gloo's allreduce (gloo/allreduce.cc ``ring``, the default algorithm) splits the buffer into
segments of at most ``kMaxSegmentSize`` = 1 MiB (gloo/allreduce.h; at least two per rank) and
runs a reduce-scatter and then an allgather ring over them. "Two [I/O operations] are in flight
at all times": iteration i posts a receive and a send of segment i, then iteration i+2 first
waits for both and reduces the received segment on the CPU. A send over gloo's TCP transport
moves only once the receiver has posted its receive (the receiver announces it:
gloo/transport/tcp/pair.cc, ``sendNotifyRecvReady``), and that announcement shares the
receiver's outgoing connection with the receiver's own data. PyTorch's ProcessGroupGloo runs it
for CPU tensors (torch/csrc/distributed/c10d/ProcessGroupGloo.cpp, ``gloo::allreduce``).

So the time of one ring phase is a recurrence over segments, computed here as a small
deterministic simulation of one rank (every rank does the same at the same time): the rank's
outgoing link is a FIFO of announcements and data at the connection's rate, and iteration i
starts once segment i-2 has arrived and been reduced. Where the link is a measurement of gloo
itself (``loopback``/``custom`` links, what ``scalebench calibrate`` fits), the recurrence is
already inside the figures and the ring is 2(n-1) alpha + 2(n-1)/n S / B.

The other operations follow gloo's own ring or chain: allgather and reduce_scatter are one phase
of the ring, broadcast and reduce a pipelined chain of the same segments, sendrecv one message.
"""

from __future__ import annotations

import heapq
import math

from sim.catalog import host_of
from sim.cluster import Cluster
from sim.costs.backends.common import (
    Backend,
    CommCost,
    CommOptions,
    alltoall_bytes_by_link,
    alltoall_s,
    library_ops,
    ring_bytes_by_link,
    ring_hop_link,
    ring_rate_Bps,
    ring_steps,
    ring_volume_bytes,
    zero_cost,
)
from sim.costs.transports import cold_start_s, connection_Bps

MAX_SEGMENT_BYTES = 2**20
"""gloo/allreduce.h: AllreduceOptionsImpl::kMaxSegmentSize = 1024 * 1024."""
IN_FLIGHT_SEGMENTS = 2
"""gloo/allreduce.cc: sends and receives are posted two iterations ahead of their waits."""
NOTIFY_BYTES = 6 * 8
"""A receive-ready announcement: one Op preamble on the pair, six size_t fields (nbytes, opcode,
slot, offset, length, roffset: gloo/transport/tcp/pair.h struct Op, facebookincubator/gloo at
cc441984), 48 bytes on a 64-bit host, and no payload (NOTIFY_RECV_READY)."""
EXTRAPOLATE_AFTER = 256
"""Iterations simulated exactly; beyond them the steady period is extrapolated."""


def segments(n_bytes: float, n: int) -> tuple[int, float]:
    """(number of segments, bytes per segment): max(ceil(S / 1 MiB), 2n), rounded up to a multiple
    of n (gloo/allreduce.cc)."""
    count = max(math.ceil(n_bytes / MAX_SEGMENT_BYTES), 2 * n)
    count = math.ceil(count / n) * n
    return count, n_bytes / count


def ring_phase_s(iterations: int, segment_bytes: float, rate_Bps: float, delay_s: float, reduce_s: float,
                 start_s: float = 0.0, link_free_s: float = 0.0) -> tuple[float, float]:
    """One phase of gloo's ring on one rank: (end time, time the outgoing link frees).

    Iteration i (at T_i) posts a receive, whose announcement goes out on the rank's link, and a
    send, whose data goes out once the neighbour's announcement (symmetric: sent at T_i too)
    has arrived; T_i = max(T_(i-1), arrival of segment i-2 + reduce) for i >= 2. The link is a
    FIFO at ``rate_Bps`` followed by ``delay_s`` of propagation."""
    if iterations <= 0:
        return start_s, link_free_s
    free = link_free_s
    heap: list[tuple[float, int, int, int]] = []  # (time, order, kind 0 notify / 1 data, iteration)
    seq = 0
    start = [math.nan] * (iterations + 2)
    arrival = [math.nan] * iterations
    start[0] = start[1] = start_s
    posted = 0
    exact = min(iterations, EXTRAPOLATE_AFTER)

    def post(i: int) -> None:
        nonlocal seq
        heapq.heappush(heap, (start[i], seq, 0, i))
        seq += 1

    post(0)
    if exact > 1:
        post(1)
    posted = min(2, exact)
    while heap:
        t, _, kind, i = heapq.heappop(heap)
        size = NOTIFY_BYTES if kind == 0 else segment_bytes
        done = max(t, free) + size / rate_Bps
        free = done
        if kind == 0:
            heapq.heappush(heap, (done + delay_s, seq, 1, i))
            seq += 1
            continue
        arrival[i] = done + delay_s
        nxt = i + 2
        if nxt < exact:
            start[nxt] = max(start[nxt - 1], arrival[i] + reduce_s)
            post(nxt)
            posted += 1
    end = max(arrival[exact - 1], arrival[exact - 2] if exact > 1 else 0.0) + reduce_s
    if exact == iterations:
        return end, free
    half = exact // 2
    period = (start[exact - 1] - start[half - 1]) / (exact - half)
    extra = (iterations - exact) * period
    return end + extra, free + extra


def allreduce_wire_s(n_bytes: float, n: int, rate_Bps: float, delay_s: float, reduce_Bps: float) -> float:
    """Both phases of the segmented ring: reduce-scatter (each received segment summed: two
    reads and a write of it) then allgather."""
    count, seg = segments(n_bytes, n)
    iterations = count - count // n
    reduce_s = 3 * seg / reduce_Bps
    end, free = ring_phase_s(iterations, seg, rate_Bps, delay_s, reduce_s)
    end, _ = ring_phase_s(iterations, seg, rate_Bps, delay_s, 0.0, end, free)
    return end


def _reduce_Bps(group: Cluster) -> float:
    """One CPU core summing float32 segments (two reads and a write per element): the cluster's
    host's measured rate (sim/data/hosts.yaml reduce_GBps); the device's own memory bandwidth
    where the 'GPU' is the CPU itself (kind cpu, whose figure a calibration measures)."""
    return group.gpu.memory_bandwidth_Bps if group.gpu.kind == "cpu" else host_of(group).reduce_Bps


def _ring(op: str, n_bytes: float, group: Cluster, options: CommOptions) -> CommCost:
    n = group.world_size
    if n == 1 or n_bytes <= 0:
        return zero_cost("ring")
    hop = ring_hop_link(group)
    steps = ring_steps(op, n)
    volume = ring_volume_bytes(op, n_bytes, n)
    rate = ring_rate_Bps(group, 1)
    serial = steps * hop.software_latency_s
    count, seg = segments(n_bytes, n)
    iterations = count - count // n
    if op == "allreduce":
        wire = allreduce_wire_s(n_bytes, n, rate, hop.latency_s, _reduce_Bps(group))
    elif op in ("allgather", "reduce_scatter"):
        reduce_s = 3 * seg / _reduce_Bps(group) if op == "reduce_scatter" else 0.0
        wire, _ = ring_phase_s(iterations, seg, rate, hop.latency_s, reduce_s)
    else:  # broadcast / reduce: a chain of the same segments, n-1 hops deep
        wire, _ = ring_phase_s(count, seg, rate, hop.latency_s, 0.0)
        wire += (n - 2) * (hop.latency_s + seg / rate)
    cold = cold_start_s(group.inter_link, volume, 1, options.idle_s) if group.nodes > 1 else 0.0
    return CommCost(serial + wire + cold, "ring", "", ring_bytes_by_link(volume, group))


def binary_blocks(p: int) -> list[int]:
    """gloo's binary blocks of p ranks, largest first (44 = 32 + 8 + 4: initBinaryBlocks)."""
    return [1 << b for b in range(p.bit_length() - 1, -1, -1) if p & (1 << b)]


def halving_doubling_allreduce(n_bytes: float, group: Cluster, options: CommOptions) -> CommCost:
    """gloo's allreduce_halving_doubling (gloo/allreduce_halving_doubling.h, as Caffe2 ran it in
    Goyal et al. 2017): the ranks split into binary blocks (initBinaryBlocks: 44 = 32 + 8 + 4);
    inside each, a reduce-scatter by recursive halving (log2 b steps of S/2, S/4, ...), each
    smaller block then hands its reduced chunks to the next larger one and gets the result back
    after an allgather by recursive doubling (Thakur, Rabenseifner and Gropp 2005). Every rank
    exchanges with one peer per step, all at once, over its pair's TCP stream(s):
        T = 2 (log2 B + k - 1) alpha + 2 ((B-1)/B + [k > 1] / b_min) S / R,
    B the largest block, b_min the smallest, k the number of blocks (the hand-offs between blocks
    run down the chain of smaller blocks: the smallest block's S/b_min chunk is the last to
    arrive), R a rank's share of its node's NICs with ``options.concurrent`` allreduces in flight
    on their own connections (each stream at most one stream's rate)."""
    from sim.costs.backends.common import inter_node_Bps

    p = group.world_size
    if p == 1 or n_bytes <= 0:
        return zero_cost("halving_doubling")
    blocks = binary_blocks(p)
    largest, smallest = blocks[0], blocks[-1]
    hop = ring_hop_link(group)
    streams = max(1, options.concurrent)
    if group.nodes > 1:
        rate = inter_node_Bps(group, group.gpus_per_node * streams) / group.gpus_per_node
    else:
        rate = connection_Bps(group.intra_link, streams)
    volume = ring_volume_bytes("allreduce", n_bytes, p)
    steps = 2 * (math.log2(largest) + len(blocks) - 1)
    fraction = (largest - 1) / largest + (1 / smallest if len(blocks) > 1 else 0.0)
    t = steps * hop.alpha_s + 2 * fraction * n_bytes / rate
    if group.nodes > 1:
        t += cold_start_s(group.inter_link, volume, group.gpus_per_node * streams, options.idle_s)
    return CommCost(t, "halving_doubling", "", ring_bytes_by_link(volume, group))


def _collective(op: str, n_bytes: float, group: Cluster, options: CommOptions) -> CommCost:
    if op == "allreduce" and options.algorithm == "halving_doubling":
        return halving_doubling_allreduce(n_bytes, group, options)
    return _ring(op, n_bytes, group, options)


def _sendrecv(n_bytes: float, group: Cluster, options: CommOptions) -> CommCost:
    if group.world_size == 1 or n_bytes <= 0:
        return zero_cost("p2p")
    across = group.nodes > 1
    link = group.inter_link if across else group.intra_link
    rate = connection_Bps(link, 1)
    cold = cold_start_s(link, n_bytes, 1, options.idle_s) if across else 0.0
    # the receiver's announcement crosses first (pair.cc), then the data
    handshake = link.latency_s
    t = link.alpha_s + handshake + n_bytes / rate + cold
    return CommCost(t, "p2p", "", {"intra": 0.0 if across else n_bytes, "inter": n_bytes if across else 0.0})


def _alltoall(n_bytes: float, group: Cluster, options: CommOptions) -> CommCost:
    if group.world_size == 1 or n_bytes <= 0:
        return zero_cost("p2p")
    return CommCost(alltoall_s(n_bytes, group, group.gpus_per_node, ring_hop_link(group).alpha_s), "p2p", "",
                    alltoall_bytes_by_link(n_bytes, group))


BACKEND = Backend(
    name="gloo",
    ops=library_ops(_collective, _alltoall, _sendrecv),
    algorithms=("ring", "halving_doubling"),
    protocols=(),
    description="gloo (PyTorch's CPU backend): segmented rings, one TCP stream per neighbour, CPU reduction",
)
