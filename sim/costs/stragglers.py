"""Waiting for the slowest rank: the expected maximum of N ranks' compute times (pure; no SimPy).

A synchronous step cannot finish before its slowest rank has produced its gradients: DDP's
last bucket, Horovod's last fused batch, a pipeline's flush all wait for every rank. If rank i's
compute takes ``T x X_i`` with X_i a random factor of mean 1, the step's compute before that
synchronisation point takes ``T x max_i X_i``, whose expectation grows with N. The factor has
two parts, both lognormal with mean 1 (``sim.faults.lognormal_jitter``'s convention):

- per GPU, persistent: identical GPUs of one SKU run the same work at different speeds
  (manufacturing variability under power management). Sinha et al., "Not All GPUs Are Created
  Equal: Characterizing Variability in Large-Scale, Accelerator-Rich Systems" (SC'22, arXiv
  2208.11035 v3) measured over 90 % of the GPUs of Summit, Vortex and Longhorn (V100), Frontera
  (RTX 5000) and Corona (MI60) running SGEMM, ResNet-50, BERT, LAMMPS and PageRank: **8 %
  average performance variation (at most 22 %)**, "regardless of the application, cluster, GPU
  vendor, and cooling method", outliers up to 1.5x slower than the median GPU. Their variation is
  the box plot's whisker-to-whisker range over the median (the paper's artifact,
  hal-uw/gpu_variability_sc22_artifact plot_script/plot_aggregated.py: (Q3 + 1.5 IQR) - (Q1 - 1.5
  IQR) over Q2), which for a normal spread over thousands of GPUs is 4 IQR = 4 x 1.349 sigma =
  5.40 sigma, so sigma = 8 % / 5.40 = 1.48 % (``GPU_CV``). The outliers beyond the whiskers are
  left out (a job that draws a 1.5x GPU is a straggler of another kind: ``heterogeneity:``).
- per iteration: jitter of one rank's step (data loading, host noise). No published figure
  separates it from the persistent part for GPU clusters, so it is 0 unless given
  (``variability.iteration_cv``; ``heterogeneity.jitter_cv`` adds more in multi-iteration runs).

With both, X_i = P_i x J_i is lognormal with sigma^2 = ln(1 + cv_gpu^2) + ln(1 + cv_iter^2), and
the expectation of the maximum of N of them is one integral over the standard normal z,
E[max] = integral of exp(mu + s z) N phi(z) Phi(z)^(N-1) dz (mu = -s^2/2), evaluated by a fixed
trapezoid grid: O(1) in N (no draw per rank), deterministic. The multi-iteration runner
(sim/run.py) draws the same factors per rank and iteration; the two agree (tests/test_stragglers.py).

Only compute is scaled: communication is the same for every rank (one collective), and a rank
that waits inside a collective for the slowest adds nothing beyond the slowest's own time.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

SINHA_SC22_VARIATION = 0.08
"""Average whisker-to-whisker performance variation over the median GPU, Sinha et al. SC'22 (abstract)."""
WHISKER_RANGE_SIGMAS = 4 * 1.3489795
"""(Q3 + 1.5 IQR) - (Q1 - 1.5 IQR) = 4 IQR, and a normal distribution's IQR is 1.349 sigma."""
GPU_CV = SINHA_SC22_VARIATION / WHISKER_RANGE_SIGMAS
"""Per-GPU persistent performance spread (coefficient of variation): 1.48 %."""
GPU_CV_SOURCE = "Sinha et al. SC'22, 'Not All GPUs Are Created Equal': same-SKU GPUs spread 8 % whisker to whisker"
"""One line for the outputs that say where the straggler term comes from."""

_GRID = np.linspace(-12.0, 12.0, 6001)
_LOG_PHI = -0.5 * _GRID**2 - 0.5 * math.log(2 * math.pi)
_LOG_CDF = np.array([math.log(0.5 * math.erfc(-z / math.sqrt(2))) if z > -37 else -700.0 for z in _GRID])


@lru_cache(maxsize=4096)
def expected_max_lognormal(n: int, cv: float) -> float:
    """E[max of ``n`` iid lognormal factors of mean 1 and coefficient of variation ``cv``]:
    integral of exp(mu + s z) n phi(z) Phi(z)^(n-1) dz on a fixed grid of z (step 0.004 on
    [-12, 12]; the density of the maximum's z, normalised on the same grid). 1 for n = 1 or cv = 0."""
    if n <= 1 or cv <= 0:
        return 1.0
    s2 = math.log1p(cv * cv)
    s = math.sqrt(s2)
    log_density = math.log(n) + _LOG_PHI + (n - 1) * _LOG_CDF
    density = np.exp(log_density - log_density.max())
    values = np.exp(-s2 / 2 + s * _GRID)
    return float(np.trapezoid(values * density, _GRID) / np.trapezoid(density, _GRID))


def combined_cv(gpu_cv: float, iteration_cv: float) -> float:
    """The CV of P x J for independent lognormal P and J of mean 1: sqrt((1 + a^2)(1 + b^2) - 1)."""
    return math.sqrt((1 + gpu_cv**2) * (1 + iteration_cv**2) - 1)


def straggler_scale(ranks: int, gpu_cv: float, iteration_cv: float) -> float:
    """The slowest of ``ranks`` ranks' compute factor, expected: E[max of N (P x J)]."""
    return expected_max_lognormal(int(ranks), round(combined_cv(gpu_cv, iteration_cv), 12))
