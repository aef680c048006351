"""What a simulation returns: plain data, the same columns as a measured row."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Span:
    """One interval on a timeline lane (for traces and breakdown plots)."""

    lane: str
    """'compute', 'comm', or 'rank<i>/...' in the detailed mode."""
    name: str
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class BucketRecord:
    index: int
    n_bytes: float
    first_layer: str
    last_layer: str
    ready_s: float
    """When backward produced the bucket's last gradient."""
    start_s: float
    end_s: float


@dataclass(frozen=True)
class IterationResult:
    """One simulated iteration of one strategy on one cluster."""

    world_size: int
    batch_size: int
    iteration_time_s: float
    compute_time_s: float
    """Forward + backward + optimizer on one rank, with nothing waiting for the network."""
    exposed_comm_time_s: float
    """iteration - compute: the communication that backward did not hide."""
    comm_time_s: float
    """Time the communication stream was busy (overlapped or not)."""
    forward_time_s: float
    backward_time_s: float
    optimizer_time_s: float
    bytes_by_link: dict[str, float]
    buckets: tuple[BucketRecord, ...]
    spans: tuple[Span, ...]
    events: int
    """SimPy events processed."""
    baseline_time_s: float = float("nan")
    """Iteration time of the same per-GPU work on one GPU (T1)."""
    fidelity: str = "fast"
    log: tuple[tuple[float, str], ...] = field(default=(), repr=False)

    @property
    def throughput_samples_per_s(self) -> float:
        return self.world_size * self.batch_size / self.iteration_time_s

    @property
    def scaling_efficiency(self) -> float:
        """Weak scaling: T1 / TN for the same per-GPU batch (= T1 / (N TN) x N samples)."""
        return self.baseline_time_s / self.iteration_time_s

    @property
    def speedup(self) -> float:
        """N x efficiency: throughput on N GPUs over throughput on one."""
        return self.world_size * self.scaling_efficiency

    def metrics(self) -> dict[str, Any]:
        return {
            "world_size": self.world_size,
            "iteration_time_s": self.iteration_time_s,
            "compute_time_s": self.compute_time_s,
            "exposed_comm_time_s": self.exposed_comm_time_s,
            "comm_time_s": self.comm_time_s,
            "forward_time_s": self.forward_time_s,
            "backward_time_s": self.backward_time_s,
            "optimizer_time_s": self.optimizer_time_s,
            "throughput_samples_per_s": self.throughput_samples_per_s,
            "baseline_time_s": self.baseline_time_s,
            "speedup": self.speedup,
            "scaling_efficiency": self.scaling_efficiency,
            "bytes_intra": self.bytes_by_link.get("intra", 0.0),
            "bytes_inter": self.bytes_by_link.get("inter", 0.0),
            "buckets": len(self.buckets),
            "events": self.events,
            "fidelity": self.fidelity,
        }
