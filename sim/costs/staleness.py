"""Statistical efficiency of a stale update: the fraction of a fresh update's progress it makes.

inverse: the staleness-dependent learning rate of Zhang, Gupta, Lian & Liu, "Staleness-aware
Async-SGD for Distributed Deep Learning" (IJCAI 2016): an update of staleness tau is applied with
the learning rate divided by tau, so it counts 1/max(1, tau). none: every update counts fully.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

STALENESS_PENALTIES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "none": lambda tau: np.ones(len(tau)),
    "inverse": lambda tau: 1.0 / np.maximum(1, tau),
}
