"""What one iteration consists of, costed: per-layer times, buckets and their reductions.

Pure: the event layer only schedules what is computed here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.config import Scenario
from sim.costs.collectives import bytes_by_link, collective_time_s, gradient_sync_steps
from sim.costs.compute import layer_times_s, optimizer_step_time_s
from sim.strategy import DTYPE_BYTES
from sim.units import MIB

DDP_FIRST_BUCKET_BYTES = 1 * MIB
"""DDP caps the first bucket (the last layers' gradients) at 1 MiB so communication starts early
(torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES)."""


@dataclass(frozen=True)
class Bucket:
    index: int
    layers: tuple[int, ...]
    """Layer indices, in the order backward produces them (last layer first)."""
    n_bytes: float


@dataclass(frozen=True)
class IterationPlan:
    layer_names: tuple[str, ...]
    fwd_s: tuple[float, ...]
    bwd_s: tuple[float, ...]
    buckets: tuple[Bucket, ...]
    bucket_comm_s: tuple[float, ...]
    bucket_bytes_by_link: tuple[dict[str, float], ...]
    optimizer_s: float
    overlap: bool

    @property
    def compute_s(self) -> float:
        return sum(self.fwd_s) + sum(self.bwd_s) + self.optimizer_s


def assign_buckets(grad_bytes: Sequence[float], bucket_bytes: float, first_bucket_bytes: float) -> list[list[int]]:
    """Group layers (given in backward order, by their gradient bytes) into buckets.

    A bucket closes once it holds at least its cap; a layer is never split; layers without
    parameters join the current bucket. The first bucket's cap is ``first_bucket_bytes``.
    """
    buckets: list[list[int]] = []
    current: list[int] = []
    filled = 0.0
    cap = min(first_bucket_bytes, bucket_bytes)
    for i, size in enumerate(grad_bytes):
        current.append(i)
        filled += size
        if filled >= cap:
            buckets.append(current)
            current, filled, cap = [], 0.0, bucket_bytes
    if current:
        if buckets and filled == 0:
            buckets[-1].extend(current)
        else:
            buckets.append(current)
    return buckets


def build_plan(scenario: Scenario) -> IterationPlan:
    workload, cluster, strategy = scenario.workload, scenario.cluster, scenario.strategy
    dtype_bytes = DTYPE_BYTES[strategy.precision]
    times = layer_times_s(workload, cluster.gpu, strategy.precision, dtype_bytes)
    n_layers = len(workload.layers)
    backward_order = list(range(n_layers - 1, -1, -1))
    grad_bytes = [workload.layers[i].param_count * strategy.grad_bytes_per_param for i in backward_order]
    groups = assign_buckets(grad_bytes, strategy.bucket_bytes, DDP_FIRST_BUCKET_BYTES)
    buckets = []
    comm_s = []
    link_bytes = []
    for index, positions in enumerate(groups):
        layers = tuple(backward_order[p] for p in positions)
        n_bytes = sum(grad_bytes[p] for p in positions)
        buckets.append(Bucket(index, layers, n_bytes))
        if cluster.world_size > 1 and n_bytes > 0:
            steps = gradient_sync_steps(n_bytes, cluster, strategy.collective, strategy.ps_servers)
            comm_s.append(collective_time_s(steps, cluster))
            link_bytes.append(bytes_by_link(steps))
        else:
            comm_s.append(0.0)
            link_bytes.append({"intra": 0.0, "inter": 0.0})
    return IterationPlan(
        layer_names=tuple(layer.name for layer in workload.layers),
        fwd_s=tuple(t[0] for t in times),
        bwd_s=tuple(t[1] for t in times),
        buckets=tuple(buckets),
        bucket_comm_s=tuple(comm_s),
        bucket_bytes_by_link=tuple(link_bytes),
        optimizer_s=optimizer_step_time_s(workload.param_count, dtype_bytes, workload.optimizer, cluster.gpu),
        overlap=strategy.overlap,
    )
