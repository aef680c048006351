"""A series of the extrapolate suite (validation/extrapolate.py): a devset scenario and its
measured runs by GPU count, with each run's uncertainty from its source."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sim.catalog import Catalog
from sim.runs_io import Run

MAX_CALIBRATION_NODES = 2
"""What a user can measure before booking the cluster: runs on at most two nodes."""
HOROVOD_BAR_SD = 75.0
"""validation/devset/README.md: each Horovod bar top is digitized to about +-75 images/s."""
CHAINERMN_SD_FRACTION = 0.03
"""validation/devset/README.md (second tranche): the ChainerMN plot is digitized to about +-3 %."""


@dataclass(frozen=True)
class Series:
    name: str
    spec: Any
    """The scenario a user writes (the cluster's size is the run's), or (GPUs, GPUs per node) -> it
    where more than the size changes (sim.runs_fit.SpecBuilder)."""
    batch: int
    gpus_per_node: int
    throughput: dict[int, float]
    """Measured samples/s by GPU count; the one-GPU run included."""
    sd: dict[int, float]
    """Uncertainty of each throughput (samples/s)."""
    ideal: dict[int, float]
    """The throughput that defines efficiency at each size (N x one GPU, or the source's reference)."""
    zero_shot: Callable[[int], float]
    """The devset suite's own predicted throughput at a size."""
    catalog: Catalog | None = None
    notes: tuple[str, ...] = field(default=())

    def nodes(self, gpus: int) -> int:
        return max(1, gpus // self.gpus_per_node)

    def run(self, gpus: int) -> Run:
        t = self.batch * gpus / self.throughput[gpus]
        return Run(gpus, min(self.gpus_per_node, gpus), t, t * self.sd[gpus] / self.throughput[gpus],
                   where=f"{self.name}: {gpus} GPUs")


