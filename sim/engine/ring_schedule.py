"""A ring without a barrier, solved in closed form: when does every member finish?

Member i (ring position) starts step 0 at a_i; step k+1 when its own send of step k is done and
step k from member i-1 has arrived, plus a local sum of sigma after each of the first ``sum_steps``
steps (sim.engine.detailed_collectives._RingPart). When every send over edge i -> i+1 takes a
constant d_i from its start to its arrival, and holds its sender w_i (w = d when a send is done on
delivery; w_i = t_i, the bytes' time without the latency a_i = d_i - t_i, when a pipelined library
sends on once its bytes have left), the start times obey the max-plus recurrence

    s(i, k+1) = max(s(i, k) + w_i, s(i-1, k) + d_{i-1}) + sigma_k

(Baccelli, Cohen, Olsder and Quadrat, *Synchronization and Linearity*, 1992: timed event graphs).
s(i, 0) = a_i, and member i's finish is s(i, K): its last send gone, the last step from i-1 in.
Unrolled over positions x (member x mod m), a path from (j, 0) to (i, K) advances i - j times,
crossing each edge j .. i-1 once (weight d), and stays K - (i - j) times, each at a member of
[j, i] (weight w); its best weight stays at the one that holds longest, M(j, i) = max w over [j, i]:

    end_i = a_j + P(i) - P(j) + (K - (i - j)) M(j, i),   maximised over i - K <= j <= i,

plus the sums (P: prefix sums of d). Split by the value v = M: for each distinct hold v,
end_i >= P(i) + (K - i) v + max over j in [i - K, q_v(i)] of (a_j - P(j) + j v), q_v(i) the last
position <= i whose hold is >= v; the maximum over v is end_i (a smaller v only lowers a path).
With w = d every step costs the slowest edge's d; with w = t a ring whose latencies alternate
(a_s inside nodes, a_b between) and equal t pays K t + the latencies of the K consecutive edges
before i: (m - 1)(a_s + a_b) for an allreduce's K = 2(m - 1), each hop's latency once per step
along the ring, as NCCL's tuning model sums them, not K a_b.
Range maxima come from a sparse table: O(V (K + m) log(K + m)) for V distinct delays, against
O(K m) for stepping the recurrence (kept for small rings and as the test's reference).
"""

from __future__ import annotations

import numpy as np

DIRECT_LIMIT = 64
"""Step the recurrence directly while steps x members stays below this (the closed form is as
fast from 8 members x 14 steps, 150 against 180 us, and 20x faster at 128 x 254)."""


def ring_ends_direct(a: np.ndarray, d: np.ndarray, steps: int, sums_s: float = 0.0,
                     hold: np.ndarray | None = None) -> np.ndarray:
    """The recurrence, step by step: member i's finish after ``steps`` steps (``sums_s`` in all);
    ``hold``: w (default d)."""
    s = np.asarray(a, dtype=float).copy()
    d = np.asarray(d, dtype=float)
    w = d if hold is None else np.asarray(hold, dtype=float)
    for _ in range(steps):
        s = np.maximum(s + w, np.roll(s + d, 1))
    return s + sums_s


def _sparse_table(c: np.ndarray) -> list[np.ndarray]:
    table = [c]
    span = 1
    while 2 * span <= len(c):
        prev = table[-1]
        table.append(np.maximum(prev[:len(prev) - span], prev[span:]))
        span *= 2
    return table


def _range_max(table: list[np.ndarray], lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """max c[lo..hi] per query (hi >= lo)."""
    length = hi - lo + 1
    level = np.floor(np.log2(length)).astype(np.int64)
    out = np.empty(len(lo))
    for j in np.unique(level):
        sel = level == j
        row = table[j]
        out[sel] = np.maximum(row[lo[sel]], row[hi[sel] - (1 << j) + 1])
    return out


def ring_ends(a: np.ndarray, d: np.ndarray, steps: int, sums_s: float = 0.0,
              hold: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(finish time per member, the edge that paced it): the closed form above.

    ``a``: start of each ring position; ``d``: delay of the send from position i to i+1, start to
    arrival; ``hold``: how long that send holds its sender (w; default d); ``sums_s``: the local
    sums every member adds over the ring (the same for all).
    """
    a = np.asarray(a, dtype=float)
    d = np.asarray(d, dtype=float)
    w = d if hold is None else np.asarray(hold, dtype=float)
    m = len(a)
    if steps == 0 or m == 1:
        return a + sums_s, np.arange(m)
    if steps * m <= DIRECT_LIMIT:
        ends = ring_ends_direct(a, d, steps, sums_s, w)
        return ends, _pacing_edges(w, m)
    base = -(-steps // m) * m
    length = base + m
    x = np.arange(length)
    dd = d[x % m]
    ww = w[x % m]
    aa = a[x % m]
    prefix = np.concatenate(([0.0], np.cumsum(dd)))[:length]
    targets = base + np.arange(m)
    lo = targets - steps
    best = np.full(m, -np.inf)
    pace = np.full(m, -1, dtype=np.int64)
    for v in np.unique(w):
        last = np.maximum.accumulate(np.where(ww >= v, x, -1))
        hi = last[targets]
        ok = hi >= lo
        if not ok.any():
            continue
        table = _sparse_table(aa - prefix + x * v)
        value = np.full(m, -np.inf)
        value[ok] = prefix[targets[ok]] + (steps - targets[ok]) * v + _range_max(table, lo[ok], hi[ok])
        better = value > best
        best[better] = value[better]
        pace[better] = hi[better] % m
    return best + sums_s, pace


def _pacing_edges(d: np.ndarray, m: int) -> np.ndarray:
    """For small rings: the slowest edge at or before each member (cyclically)."""
    order = [(i - k) % m for i in range(m) for k in range(m)]
    ring = np.asarray(order).reshape(m, m)
    return ring[np.arange(m), np.argmax(d[ring], axis=1)]
