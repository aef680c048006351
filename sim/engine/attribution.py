"""Exposed communication by term: which part of each reduction the compute stream waited for.

Pure (no SimPy): the event layer records when its compute stream waited for the communication
stream and when each bucket's reduction ran; each waited stretch is covered by the reductions
running in it (split as their cost splits: ``IterationPlan.bucket_terms``) or by nothing running
(a bucket held back, e.g. until Horovod's next cycle tick: ``waiting for release``).
"""

from __future__ import annotations

from collections.abc import Sequence

IDLE_TERM = "waiting for release"
"""A waited stretch in which no reduction ran: the next bucket was held back (Horovod's cycle)."""


def exposed_terms(waits: Sequence[tuple[float, float]], runs: Sequence[tuple[float, float]],
                  terms: Sequence[dict[str, float]]) -> dict[str, float]:
    """Seconds of ``waits`` by term. ``runs[i]``: when bucket i's reduction ran; ``terms[i]``: its
    time by term (summing to its duration). The result sums to the total waited time."""
    out: dict[str, float] = {}
    for w0, w1 in waits:
        covered = 0.0
        for (r0, r1), split in zip(runs, terms, strict=True):
            overlap = min(w1, r1) - max(w0, r0)
            if overlap <= 0:
                continue
            covered += overlap
            total = sum(split.values())
            for name, seconds in split.items():
                if total > 0:
                    out[name] = out.get(name, 0.0) + overlap * seconds / total
            if total <= 0:
                out["bandwidth"] = out.get("bandwidth", 0.0) + overlap
        idle = (w1 - w0) - covered
        if idle > 1e-15:
            out[IDLE_TERM] = out.get(IDLE_TERM, 0.0) + idle
    return out
