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
    detail: str = ""
    """What delayed it, where known (the detailed mode: the slowest flow and its bottleneck link)."""

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class LinkStat:
    """One link of the detailed mode's network over an iteration."""

    name: str
    tier: str
    """gpu (intra-node ports), nic, core (a single switch's), or the fabric's cable tier."""
    capacity_Bps: float
    bytes: float
    busy_s: float
    """Time the link carried at least one flow."""

    def utilisation(self, iteration_s: float) -> float:
        """The share of what the link could have carried in the iteration that it carried:
        bytes / (capacity x iteration). A link busy 82.5 % of the time carrying 195 MiB and one
        carrying 974 MiB in the same time differ here, not in ``busy_share``."""
        return self.bytes / (self.capacity_Bps * iteration_s) if iteration_s > 0 and self.capacity_Bps > 0 else 0.0

    def busy_share(self, iteration_s: float) -> float:
        """The share of the iteration the link carried at least one flow (at any rate)."""
        return self.busy_s / iteration_s if iteration_s > 0 else 0.0


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
    """iteration - compute - overlap slowdown - straggler wait (- pipeline bubble): the
    communication that backward did not hide."""
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
    data_parallel: int | None = None
    """Model replicas (dp degree); None: every rank is one (pure data parallelism). The batch
    is per replica: a pipeline of p stages x t tensor ranks processes one batch per iteration."""
    codec_time_s: float = 0.0
    """Encode, decode and local sums of compressed gradients (inside comm_time_s)."""
    coordination_time_s: float = 0.0
    """The framework's coordination per iteration (Horovod's negotiation of ready tensors on its
    coordinator: sim/costs/coordination.py), on its own thread, overlapped or not; where it delays
    a reduction, the delay is part of exposed_comm_time_s."""
    bubble_time_s: float = 0.0
    """Pipeline: time the busiest stage sits idle inside the forward/backward schedule."""
    tp_comm_time_s: float = 0.0
    """Tensor-parallel activation allreduces on the critical path (inside compute_time_s)."""
    pp_comm_time_s: float = 0.0
    """Activation and gradient sends between pipeline stages, per stage."""
    model_comm_time_s: float = 0.0
    """Other model-parallel communication on the critical path (inside compute_time_s): ring
    attention's sends not hidden by attention, MoE all-to-alls, ZeRO-3 gathers not hidden."""
    recompute_time_s: float = 0.0
    """Activation recomputation (inside compute_time_s)."""
    memory_bytes: float = 0.0
    """Peak memory of the fullest rank (sim/memory.py)."""
    links: tuple[LinkStat, ...] = field(default=(), repr=False)
    """Detailed mode: every link that carried bytes (sim.engine.flows)."""
    flow_engine: str = ""
    """Detailed mode: event (every message an event) or periodic (rings as periodic schedules)."""
    data_time_s: float = 0.0
    """Seconds the node's host needs to decode and augment one iteration's real images
    (sim/costs/input_pipeline.py), prepared while the GPUs compute the previous batch; 0 with
    synthetic data."""
    data_wait_time_s: float = 0.0
    """Time the iteration waits for its input beyond the GPUs' own work: max(0, data_time_s - the
    GPU timeline). Above 0 the input pipeline bounds the step."""
    overlap_slowdown_time_s: float = 0.0
    """Compute time added by collectives running beside it on the same GPU (SMs held, memory
    bandwidth taken: sim.costs.contention), on the critical compute stream."""
    straggler_wait_time_s: float = 0.0
    """Time the iteration waits for the slowest of its ranks: the iteration with every compute
    time x the expected slowest rank's factor, minus the iteration without (sim.costs.stragglers)."""
    straggler_scale: float = 1.0
    """The factor of that slowest rank (1: nobody is waited for)."""
    exposed_comm_terms: dict[str, float] = field(default_factory=dict)
    """exposed_comm_time_s by term (latency, bandwidth, codec, fusion copy, waiting for Horovod's
    cycle, ...): each exposed stretch of a bucket's reduction split as its cost splits
    (IterationPlan.bucket_terms; sim.engine.attribution). A framework's coordination costs are
    terms here too (sim.explain.TERM_CATEGORIES says which). Empty where the engine does not
    attribute; otherwise the terms sum to exposed_comm_time_s."""

    def hottest_links(self, count: int = 5) -> list[LinkStat]:
        """The links that carried the largest share of their capacity over the iteration
        (``LinkStat.utilisation``; ties: busy longer first)."""
        return sorted(self.links, key=lambda s: (-s.bytes / s.capacity_Bps if s.capacity_Bps > 0 else 0.0,
                                                 -s.busy_s, s.name))[:count]

    @property
    def replicas(self) -> int:
        return self.world_size if self.data_parallel is None else self.data_parallel

    @property
    def throughput_samples_per_s(self) -> float:
        return self.replicas * self.batch_size / self.iteration_time_s

    @property
    def scaling_efficiency(self) -> float:
        """Weak scaling: T1 / TN for the same per-GPU batch (= T1 / (N TN) x N samples);
        with model parallelism speedup / N."""
        if self.data_parallel is None:
            return self.baseline_time_s / self.iteration_time_s
        return self.speedup / self.world_size

    @property
    def speedup(self) -> float:
        """Throughput on N GPUs over throughput on one: replicas x T1 / TN."""
        if self.data_parallel is None:
            return self.world_size * self.scaling_efficiency
        return self.data_parallel * self.baseline_time_s / self.iteration_time_s

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
            "data_parallel": self.replicas,
            "codec_time_s": self.codec_time_s,
            "coordination_time_s": self.coordination_time_s,
            "bubble_time_s": self.bubble_time_s,
            "tp_comm_time_s": self.tp_comm_time_s,
            "pp_comm_time_s": self.pp_comm_time_s,
            "model_comm_time_s": self.model_comm_time_s,
            "recompute_time_s": self.recompute_time_s,
            "memory_bytes": self.memory_bytes,
            "data_time_s": self.data_time_s,
            "data_wait_time_s": self.data_wait_time_s,
            "overlap_slowdown_time_s": self.overlap_slowdown_time_s,
            "straggler_wait_time_s": self.straggler_wait_time_s,
            "straggler_scale": self.straggler_scale,
            # one synchronous iteration applies fresh gradients; sim.run.RunResult reports runs
            "staleness_mean": 0.0,
        }
