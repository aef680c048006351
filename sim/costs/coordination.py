"""Coordination: what a framework spends deciding, every cycle, which tensors all ranks may reduce.

Horovod's background thread runs a cycle every HOROVOD_CYCLE_TIME; before any allreduce it must
learn that every rank has requested the tensor (its *negotiation*). How it learns that changed
twice, and the cost grows with the number of ranks N and of tensors T (one registry entry per
protocol, ``NEGOTIATIONS``):

- ``horovod_p2p`` (Horovod 0.9.0 - 0.13.2; horovod/tensorflow/mpi_ops.cc of v0.11.2 and
  horovod/common/operations.cc of v0.12.1, ``BackgroundThreadLoop``): every worker MPI_Sends one
  serialized MPIRequest per ready tensor to rank 0, then an empty DONE message; rank 0 takes them
  one at a time (MPI_Probe(MPI_ANY_SOURCE), MPI_Get_count, MPI_Recv into a new buffer, parse,
  IncrementTensorCount into its message table) until all N-1 workers said DONE; then, for each
  fused response, it MPI_Sends the response to each of the N-1 workers before performing it, and
  a DONE to each at the end of the cycle. So a cycle in which T tensors became ready costs rank 0
      t = (N-1)(T+1) o_req + (N-1)(R+1) o_resp      (R responses: the fused batches)
  and batch b (0-based) is performed after the receipt and the sends of responses 0..b.
- ``horovod_cached`` (Horovod >= 0.16.2, 'Enable faster worker coordination via response
  caching', horovod/horovod#902, commit 15a0bd8a; horovod/common/response_cache.cc): once a
  tensor's response is cached, the ranks agree on what is ready with one MPI_Allreduce of a bit
  vector per cycle (a bit per cached tensor; CacheCoordinator::sync), no per-tensor messages:
      t = ceil(log2 N) (alpha + o_resp)              (recursive doubling of a few words)
  The collective control plane of 0.13.3 (horovod/horovod#276: MPI_Gather + MPI_Bcast instead of
  point-to-point) sits between the two; it is not modelled separately.

The per-message costs are measured, not assumed: ``scripts/measure_horovod_coordinator.py``
reproduces 0.11's coordinator loop with Open MPI 4.1.4 over its TCP transport (Horovod's docs
ran ``mpirun -mca btl ^openib``, the control plane over TCP even on RoCE): rank 0 spent
1.05-1.22 us per received request (medians of 30 repeats of 300 requests per worker with 1, 2
and 3 workers) and 7.3-12.8 us per response message sent (responses naming ~37 tensors).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

OPENMPI_TCP_REQUEST_S = 1.2e-6
"""Rank 0's time per received negotiation request (Open MPI 4.1.4, TCP BTL; measured here:
scripts/measure_horovod_coordinator.py, 1.05 / 1.22 / 1.22 us with 3 / 1 / 2 workers)."""
OPENMPI_TCP_RESPONSE_S = 8.7e-6
"""Rank 0's time per response message sent to one worker (same script: 7.3 / 8.7 / 12.8 us with
3 / 2 / 1 workers; the median)."""


@dataclass(frozen=True)
class Negotiation:
    """One cycle's negotiation on the coordinator: ``before_s`` before the first batch can be
    performed, then ``per_batch_s`` before each batch (the response sent to every worker), and
    ``after_s`` closing the cycle (its DONE messages)."""

    before_s: float
    per_batch_s: float
    after_s: float

    def total_s(self, batches: int) -> float:
        return self.before_s + batches * self.per_batch_s + self.after_s

    def release_offsets_s(self, batches: int) -> list[float]:
        """When each batch may start after the cycle began (the negotiation's own share)."""
        return [self.before_s + (b + 1) * self.per_batch_s for b in range(batches)]


def horovod_p2p(ranks: int, tensors: int, latency_s: float) -> Negotiation:
    """Horovod 0.9-0.13.2: (N-1)(T+1) requests received one by one, then (N-1) sends per
    response and (N-1) DONE messages (module docstring)."""
    if ranks <= 1:
        return Negotiation(0.0, 0.0, 0.0)
    workers = ranks - 1
    return Negotiation(workers * (tensors + 1) * OPENMPI_TCP_REQUEST_S + latency_s,
                       workers * OPENMPI_TCP_RESPONSE_S, workers * OPENMPI_TCP_RESPONSE_S)


def horovod_cached(ranks: int, tensors: int, latency_s: float) -> Negotiation:
    """Horovod >= 0.16.2: one bit-vector allreduce per cycle, ceil(log2 N) exchanges."""
    del tensors  # the bit vector is a few words whatever T is
    if ranks <= 1:
        return Negotiation(0.0, 0.0, 0.0)
    return Negotiation(math.ceil(math.log2(ranks)) * (latency_s + OPENMPI_TCP_RESPONSE_S), 0.0, 0.0)


NEGOTIATIONS: dict[str, Callable[[int, int, float], Negotiation]] = {
    "horovod_p2p": horovod_p2p,
    "horovod_cached": horovod_cached,
}
"""``strategy.negotiation``: how the framework's ranks agree on ready tensors each cycle."""
