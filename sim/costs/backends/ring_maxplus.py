"""A pipelined library ring over identical nodes, in closed form (the fast path's ring schedule).

The ring's members sit g to a node in node-major order; every node is the same, so the ring is
periodic with period g: position x (mod g) has the same figures on every node. A member starts
step k+1 when its own send of step k no longer holds it and step k from its predecessor has
arrived far enough to be passed on:

    s(x, k+1) = max(s(x, k) + w_x, s(x-1, k) + d_{x-1}),    s(x, 0) = 0,

a timed event graph (Baccelli, Cohen, Olsder and Quadrat, *Synchronization and Linearity*, 1992;
sim.engine.ring_schedule solves it for any ring, member by member, as the detailed mode runs it).
Its solution is a longest path: member p's time after K steps is the best, over windows of
L + 1 consecutive members p-L .. p (0 <= L <= K), of

    F(p, L) = sum of d over the L edges p-L .. p-1 + (K - L) x max of w over the window.

A window of g or more members holds every position, so its max w is fixed, and
F(p, L + g) - F(p, L) = (sum of d over a period) - g max w for L >= g - 1: along each residue of
L mod g, F is linear, and its maximum lies at the smallest L >= g - 1 or the largest L <= K of
the residue. The candidates are L in [0, 2g - 2] and L in [K - g + 1, K], per end position p:
O(g^2) work for a ring of any size, where stepping the recurrence costs O(K m).

Two regimes fall out: throughput (stay at the slowest sender: K x max w, plus one crossing) and
the data's chain (cross every edge: K x the mean d), and everything between.
"""

from __future__ import annotations

from collections.abc import Sequence


def periodic_ring_ends(steps: int, holds_s: Sequence[float], delays_s: Sequence[float]) -> list[float]:
    """s(p, ``steps``) for each position p of the period, every member starting at 0.

    ``holds_s[p]`` (w): how long member p's send holds it; ``delays_s[p]`` (d): from the start of
    member p's send to when its successor may go on. Both repeat with period ``len(holds_s)``.
    """
    g, K = len(holds_s), steps
    if g != len(delays_s) or g == 0:
        raise ValueError("holds_s and delays_s: one figure per position of the period")
    if K <= 0:
        return [0.0] * g
    period_d, w_max = sum(delays_s), max(holds_s)
    lengths = sorted(set(range(min(K, 2 * g - 2) + 1)) | set(range(max(0, K - g + 1), K + 1)))
    ends = []
    for p in range(g):
        back_d = [0.0]  # d over the r edges before p, r < g
        back_w = [holds_s[p]]  # max w over the r + 1 members ending at p, r < g
        for r in range(1, g):
            back_d.append(back_d[-1] + delays_s[(p - r) % g])
            back_w.append(max(back_w[-1], holds_s[(p - r) % g]))
        best = 0.0
        for L in lengths:
            q, r = divmod(L, g)
            value = q * period_d + back_d[r] + (K - L) * (w_max if g - 1 <= L else back_w[L])
            if value > best:
                best = value
        ends.append(best)
    return ends


def cut_through_ring_s(steps: int, transfer_s: Sequence[float], granule_s: Sequence[float],
                       latency_s: Sequence[float]) -> float:
    """When the last member of a periodic ring finishes ``steps`` steps of a library that passes
    data on in granules (NCCL's buffer slots) rather than whole steps.

    Member x's step takes ``transfer_s[x]`` (t) on its edge; its first granule ``granule_s[x]``
    (u <= t); the edge's latency ``latency_s[x]`` (l: the link's, the library's hop). The send of
    step k+1 may start once the first granule of step k from x-1 is in (s(x-1, k) + u + l) and
    cannot end before the last one is in and passed on (e(x-1, k) + l + u_x, e = s + t): in start
    times, w_x = t_x and d_{x-1} = l_{x-1} + max(u_{x-1}, t_{x-1} - t_x + u_x) (with u = t a step
    is forwarded whole: d = l + t). A member finishes when its last send is done and the last
    granule of its predecessor's last step is in: max over p of s(p, K - 1) + t_p + l_p."""
    g = len(transfer_s)
    if steps <= 0:
        return 0.0
    t, u, lat = transfer_s, granule_s, latency_s
    delays = [lat[x] + max(u[x], t[x] - t[(x + 1) % g] + u[(x + 1) % g]) for x in range(g)]
    ends = periodic_ring_ends(steps - 1, t, delays)
    return max(ends[p] + t[p] + lat[p] for p in range(g))
