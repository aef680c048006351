"""Collective libraries as cost models: one module per library, one entry per library here.

``comm_cost(backend, op, n_bytes, group, options)`` is the one question the rest of scalebench
asks: how long does this library take for this operation on this group of ranks, and which
algorithm does it run. A new library is a new module with a ``BACKEND`` and a line in
``BACKENDS``; its operations are the keys of its ``ops``.
"""

from __future__ import annotations

from sim.catalog import GPU
from sim.cluster import Cluster
from sim.costs.backends import alpha_beta, gloo, mpi, nccl
from sim.costs.backends.common import (
    BUSBW_FACTOR,
    OPERATIONS,
    Backend,
    CommCost,
    CommOptions,
    end_to_end,
)
from sim.errors import ConfigError

BACKENDS: dict[str, Backend] = {
    "nccl": nccl.BACKEND,
    "gloo": gloo.BACKEND,
    "mpi": mpi.BACKEND,
}

__all__ = ["BACKENDS", "BUSBW_FACTOR", "OPERATIONS", "Backend", "CommCost", "CommOptions", "comm_cost",
           "default_backend"]


def default_backend(gpu: GPU) -> str:
    """NCCL on GPUs, gloo on CPUs (what torch.distributed users pick)."""
    return "gloo" if gpu.kind == "cpu" else "nccl"


def comm_cost(backend: str, op: str, n_bytes: float, group: Cluster, options: CommOptions | None = None) -> CommCost:
    """Time and algorithm of ``op`` on ``n_bytes`` (nccl-tests' size convention) over ``group``."""
    if backend not in BACKENDS:
        raise ConfigError("strategy.backend", backend, BACKENDS)
    if op not in OPERATIONS:
        raise ConfigError("op", op, OPERATIONS)
    options = options or CommOptions()
    if end_to_end(group):  # measured or alpha-beta links: the library's costs are in their figures
        return alpha_beta.cost(op, float(n_bytes), group, options)
    return BACKENDS[backend].ops[op](float(n_bytes), group, options)
