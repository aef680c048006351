"""Fitting measured collective times to the alpha-beta form (calibration, sim/calibration.py).

Measured form, per collective at a fixed world size n:  t(S) = alpha + S / B_alg
(least squares on relative error, so 1 KiB and 256 MiB weigh alike). gloo on a few ranks
does not run NCCL's ring (its allreduce picks among ring, bcube and halving-doubling
variants by size and rank count), so we fit what it does and only then map it onto the
simulator's closed forms at that n:
  allreduce (ring):        T = 2(n-1) a + 2(n-1)/n S / B   -> a = alpha / (2(n-1)), B = B_alg 2(n-1)/n
  allgather/reduce_scatter: T = (n-1) a + (n-1)/n S / B    -> a = alpha / (n-1),    B = B_alg (n-1)/n
  broadcast, sendrecv:     T = a + S / B                  -> a = alpha,            B = B_alg
(Thakur, Rabenseifner & Gropp 2005; the busbw factors of nccl-tests doc/PERFORMANCE.md). The
link entry reproduces the measurement at the n it was fitted at; other n are a prediction.
``two_regime_fit`` stays numpy (a line through the large sizes and a median of the small ones'
residuals: an estimator, not a least-squares problem a library solves).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class AlphaBeta:
    alpha_s: float
    bandwidth_Bps: float
    """B_alg: bytes of the collective's size per second, asymptotically."""
    rms_relative_error: float
    points: int

    def time_s(self, size_bytes: float) -> float:
        return self.alpha_s + size_bytes / self.bandwidth_Bps


BETA_FLOOR_S_PER_B = 1e-18
"""The smallest beta the bounded fit may return (1 EB/s): beta > 0 so that B_alg = 1 / beta exists."""


def fit_alpha_beta(sizes_bytes: list[float], times_s: list[float]) -> AlphaBeta:
    """Minimise sum(((alpha + beta S) - t) / t)^2 with alpha >= 0, beta > 0: a linear least
    squares problem with bounds, solved by scipy.optimize.lsq_linear (judged for issue 29: it
    replaced an unbounded numpy fit followed by a hand-written fallback that refitted the
    bandwidth alone whenever alpha or beta fell outside, which is the bounded optimum only when
    alpha is the bound; with scipy a dependency since the nccl-tests fits, the library's bounded
    solver is shorter and right in every case)."""
    from scipy.optimize import lsq_linear

    s = np.asarray(sizes_bytes, dtype=float)
    t = np.asarray(times_s, dtype=float)
    if len(s) < 2 or np.any(t <= 0):
        raise ValueError("need at least two sizes with positive times")
    a = np.column_stack([1 / t, s / t])
    scale = np.array([1.0, 1.0 / max(float(np.max(s)), 1.0)])  # beta ~ 1e-9 s/B: columns of one size
    solved = lsq_linear(a * scale, np.ones_like(t), bounds=([0.0, BETA_FLOOR_S_PER_B / scale[1]], [np.inf, np.inf]),
                        method="bvls")
    alpha, beta = (float(v) for v in solved.x * scale)
    pred = alpha + beta * s
    rms = float(np.sqrt(np.mean(((pred - t) / t) ** 2)))
    return AlphaBeta(alpha_s=float(alpha), bandwidth_Bps=1 / float(beta), rms_relative_error=rms, points=len(s))


def steps_and_factor(collective: str, n: int) -> tuple[int, float]:
    """(latency terms, busbw factor) of the simulator's closed form of ``collective`` at ``n`` ranks."""
    if collective == "allreduce":
        return 2 * (n - 1), 2 * (n - 1) / n
    if collective in ("allgather", "reduce_scatter"):
        return n - 1, (n - 1) / n
    return 1, 1.0


def link_parameters(fit: AlphaBeta, collective: str, n: int) -> tuple[float, float]:
    """(per-step latency a in s, link bandwidth B in B/s) of the closed form that reproduces ``fit`` at n."""
    steps, factor = steps_and_factor(collective, n)
    return fit.alpha_s / steps, fit.bandwidth_Bps * factor


LATENCY_MAX_BYTES = 16 * 1024
BANDWIDTH_MIN_BYTES = 256 * 1024


def two_regime_fit(sizes_bytes: list[float], times_s: list[float]) -> tuple[float, float] | None:
    """(alpha_s, B_alg in B/s) of t = alpha + S/B_alg, each from the sizes where it dominates
    (Hockney's model calibrated as LogP-style tools do): B_alg from a least-squares line through
    the sizes >= 256 KiB (absolute error: the large sizes carry the bandwidth), alpha = the median
    over sizes <= 16 KiB of t - S/B_alg. One relative-error fit over all sizes lets the noisy
    small sizes (scheduler latency on shared cores) pull the bandwidth off by 30% and more."""
    big = [(s, t) for s, t in zip(sizes_bytes, times_s, strict=True) if s >= BANDWIDTH_MIN_BYTES]
    small = [(s, t) for s, t in zip(sizes_bytes, times_s, strict=True) if s <= LATENCY_MAX_BYTES]
    if len(big) < 2 or not small:
        return None
    slope = float(np.polyfit([s for s, _ in big], [t for _, t in big], 1)[0])
    if slope <= 0:
        s_max, t_max = max(big)
        slope = t_max / s_max
    alpha = float(np.median([t - s * slope for s, t in small]))
    return max(0.0, alpha), 1.0 / slope
