"""Ernest (Venkataraman et al., NSDI 2016), the standard baseline for predicting a job at scale
from small runs.

Section 3.2 ('Model'): the time of a job on m machines with input ``scale`` is fitted as

    t(m) = theta0 + theta1 x (scale / m) + theta2 x log(m) + theta3 x m,   theta >= 0

by non-negative least squares (the paper's section 3.2 uses NNLS; here ``scipy.optimize.nnls``):
theta0 serial work, scale / m the parallel part, log m tree-shaped aggregation, m all-to-one
communication.

What m is under weak scaling: data-parallel training keeps the per-worker batch fixed, so the
unit that holds a fixed share of the input is the data-parallel worker, one GPU: m = GPUs, and
the input of one iteration is scale = m x batch. Then scale / m = batch is the same for every run:
Ernest's parallel term becomes a constant (collinear with theta0), and what is left to extrapolate
is theta0 + theta2 log m + theta3 m, the paper's communication terms. The time fitted is one
iteration's; its prediction at m GPUs gives throughput m x batch / t(m).
"""

from __future__ import annotations

import math


def ernest_features(gpus: int, batch: float) -> list[float]:
    """[1, scale / m, log m, m] with m = GPUs and scale = m x batch (weak scaling)."""
    scale = gpus * batch
    return [1.0, scale / gpus, math.log(gpus), float(gpus)]


def fit_ernest(gpus: list[int], times_s: list[float], batch: float) -> list[float]:
    """theta >= 0 minimising the squared error of t(m) over the runs (scipy.optimize.nnls)."""
    import numpy as np
    from scipy.optimize import nnls

    a = np.array([ernest_features(m, batch) for m in gpus])
    theta, _ = nnls(a, np.asarray(times_s, dtype=float))
    return [float(t) for t in theta]


def ernest_time_s(theta: list[float], gpus: int, batch: float) -> float:
    return sum(t * f for t, f in zip(theta, ernest_features(gpus, batch), strict=True))
