"""What one iteration consists of, costed: per-layer times, buckets and their reductions.

Pure: the event layer only schedules what is computed here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sim.catalog import GPU
from sim.cluster import Cluster
from sim.codecs import CODECS
from sim.costs.codecs import CompressedSync, compressed_sync
from sim.costs.collectives import bytes_by_link, collective_time_s
from sim.costs.comm import allreduce_cost, op_cost, spec_of
from sim.costs.compute import layer_times_s, pass_loads, workload_optimizer_time_s
from sim.costs.contention import MEMORY_ONLY, Footprint, PassLoad, comm_footprint
from sim.costs.coordination import NEGOTIATIONS
from sim.costs.elementwise import elementwise_times_s
from sim.costs.fusion import fusion_copy_s, horovod_fusion_batches
from sim.costs.passes import layer_passes, pass_options
from sim.costs.ps import (
    mxnet_key_placement,
    ps_placed_push_pull,
    round_robin_placement,
    server_bytes,
)
from sim.scenario import Scenario
from sim.strategy import DTYPE_BYTES, Strategy
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
    bucket_codec_s: tuple[float, ...] = ()
    """Encode/decode/local-sum time of each bucket (0 without a codec): the encode part in
    ``bucket_encode_s``, the rest inside ``bucket_comm_s``."""
    bucket_encode_s: tuple[float, ...] = ()
    """Codec work each bucket needs before its collective starts, done on the compute stream
    when the bucket is handed over (DDP calls a communication hook from its autograd hook, on
    the backward thread); not part of ``bucket_comm_s``. Empty: none."""
    bucket_release_s: tuple[float, ...] = ()
    """Horovod's cycle: a fused batch starts no earlier than this many seconds after backward
    began (the first cycle tick after its gradients are ready). Empty: as soon as it is full."""
    layer_loads: tuple[tuple[PassLoad, PassLoad], ...] = ()
    """(forward, backward) roofline terms and GEMM grids of each layer (sim.costs.compute.pass_loads):
    what a collective in flight slows. Empty: nothing is slowed."""
    optimizer_load: PassLoad = MEMORY_ONLY
    bucket_footprints: tuple[Footprint | None, ...] = ()
    """What each bucket's reduction takes from the GPU while it runs (sim.costs.contention.comm_footprint);
    None or empty: nothing (no overlap setting, no GPU kernels)."""
    iteration_overhead_s: float = 0.0
    """A fixed cost per iteration after the optimizer step (strategy.iteration_overhead_s)."""
    double_buffering: bool = False
    """The gradients are reduced during the next iteration's compute (ChainerMN)."""
    coordination_s: float = 0.0
    """The framework's coordination per iteration on its own thread (Horovod's negotiation:
    sim.costs.coordination), overlapped or not; what it delays shows in the release times."""
    param_gather_s: float = 0.0
    """ZeRO-1/2: the allgather of the updated parameter shards after the optimizer step (DeepSpeed
    stage 1/2's all_gather of the partitions after step; not overlapped)."""
    recompute_s: float = 0.0
    """Of sum(bwd_s): activation recomputation."""
    bucket_terms: tuple[dict[str, float], ...] = ()
    """Each bucket's comm-stream time by term (``comm_terms``: latency, bandwidth, codec, fusion
    copy), summing to its ``bucket_comm_s``: how exposed communication is attributed."""

    @property
    def compute_s(self) -> float:
        return sum(self.fwd_s) + sum(self.bwd_s) + self.optimizer_s

    def footprint(self, bucket_index: int) -> Footprint | None:
        return self.bucket_footprints[bucket_index] if self.bucket_footprints else None

    def scaled(self, scale: float) -> IterationPlan:
        """Every compute time x ``scale`` (the slowest rank's: sim.costs.stragglers); communication unchanged."""
        if scale == 1.0:
            return self
        from dataclasses import replace

        return replace(self, fwd_s=tuple(t * scale for t in self.fwd_s), bwd_s=tuple(t * scale for t in self.bwd_s),
                       optimizer_s=self.optimizer_s * scale, recompute_s=self.recompute_s * scale)


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


def fusion_batches(grad_bytes: Sequence[float], fusion_bytes: float, cycle_s: float) -> tuple[list[list[int]], list[float]]:
    """Horovod's tensor fusion (docs/tensor-fusion.rst; sim/costs/fusion.py for the 2017 source):
    each cycle the background thread fuses the tensors all ranks have requested, in request
    order, into batches of at most HOROVOD_FUSION_THRESHOLD bytes (never skipping a tensor that
    does not fit), and performs them one after another. A tensor is requested when TensorFlow
    schedules its gradient, which the host does far ahead of the GPU (docs/timeline.rst: the
    processing phase first waits, WAIT_FOR_DATA, 'for GPU to finish computing input ... because
    TensorFlow tries to smartly interleave scheduling and GPU computation'): all of backward's
    gradients are requested within the first cycle. So the batches are consecutive runs of the
    backward order, released at the first cycle tick, each then waiting for its last gradient on
    the GPU (the engine's hand-off). Returns the batches (positions in backward order) and their
    release times after backward starts."""
    batches = horovod_fusion_batches(grad_bytes, fusion_bytes)
    return batches, [cycle_s] * len(batches)


def bucket_sync(n_bytes: float, cluster: Cluster, strategy: Strategy, gpu: GPU,
                held_bytes: list[float] | None = None) -> tuple[float, float, dict[str, float]]:
    """(comm seconds, of which codec seconds, bytes by link) to synchronise one gradient bucket
    of ``n_bytes`` (in the compute precision) over ``cluster``, through the strategy's codec
    (``held_bytes``: with parameter servers, each server's part of the bucket)."""
    if cluster.world_size == 1 or n_bytes <= 0:
        return 0.0, 0.0, {"intra": 0.0, "inter": 0.0}
    if strategy.codec is None:
        cost = allreduce_cost(n_bytes, cluster, spec_of(strategy), held_bytes)
        return cost.time_s, 0.0, dict(cost.bytes_by_link)
    sync = _compressed_sync(n_bytes, cluster, strategy, gpu)
    return sync.time_s, sync.codec_s, dict(sync.bytes_by_link)


def bucket_footprint(n_bytes: float, comm_s: float, by_link: dict[str, float], cluster: Cluster, strategy: Strategy,
                     extra_hbm_bytes: float = 0.0) -> Footprint | None:
    """What one bucket's reduction takes from each GPU while it runs (sim.costs.contention.comm_footprint):
    the bytes each rank sends are the group's bytes on links over its ranks (``bucket_sync``'s third
    term, codecs and hierarchical compositions included); the algorithm NCCL runs decides its blocks."""
    if not strategy.comm_slows_compute or cluster.world_size <= 1 or comm_s <= 0:
        return None
    algorithm = strategy.collective
    if strategy.backend == "nccl" and algorithm == "auto" and strategy.codec is None:
        from sim.costs.backends.nccl import choose

        algorithm = choose("allreduce", n_bytes, cluster, spec_of(strategy).options())[0]
    sent_per_rank = sum(by_link.values()) / cluster.world_size
    return comm_footprint(n_bytes, sent_per_rank, comm_s, algorithm, cluster, strategy, extra_hbm_bytes)


def comm_terms(stream_s: float, codec_s: float, copy_s: float, latency_s: float) -> dict[str, float]:
    """A bucket's ``stream_s`` on the comm stream by term: the codec's passes on that stream, the
    fusion-buffer copies, the library's size-independent time (``latency_s``: the same collective
    of one element, at most what is left) and the rest, what the bytes cost (bandwidth)."""
    left = max(0.0, stream_s - codec_s - copy_s)
    latency = min(latency_s, left)
    terms = {"latency": latency, "bandwidth": left - latency, "codec": min(codec_s, stream_s),
             "fusion copy": min(copy_s, max(0.0, stream_s - codec_s))}
    return {k: v for k, v in terms.items() if v > 0}


def one_element_latency_s(cluster: Cluster, strategy: Strategy, gpu: GPU) -> float:
    """The strategy's reduction of one gradient element, its codec's passes left out: what a bucket
    pays whatever its size."""
    if cluster.world_size == 1:
        return 0.0
    t, codec_s, _ = bucket_sync(strategy.grad_bytes_per_param, cluster, strategy, gpu)
    return max(0.0, t - codec_s)


def bucket_encode_s(n_bytes: float, cluster: Cluster, strategy: Strategy, gpu: GPU) -> float:
    """The part of ``bucket_sync``'s codec seconds that precedes the collective (encode, error
    feedback): the hand-off's own work (sim.costs.codecs.CompressedSync.encode_s)."""
    if strategy.codec is None or cluster.world_size == 1 or n_bytes <= 0:
        return 0.0
    return _compressed_sync(n_bytes, cluster, strategy, gpu).encode_s


def _compressed_sync(n_bytes: float, cluster: Cluster, strategy: Strategy, gpu: GPU) -> CompressedSync:
    src = strategy.grad_bytes_per_param
    codec = CODECS[strategy.codec or "fp32"]  # callers check strategy.codec first
    return compressed_sync(
        n_bytes / src, src, codec, strategy.resolved_codec_path() or "allreduce", cluster,
        gpu=gpu, spec=spec_of(strategy),
        reduce_ns_per_elem=strategy.codec_reduce_ns_per_elem, error_feedback=strategy.error_feedback,
        encode_ns_per_elem=strategy.codec_encode_ns_per_elem, decode_ns_per_elem=strategy.codec_decode_ns_per_elem,
    )


def _placed_ps_sync(layer_bytes: list[float], cluster: Cluster, strategy: Strategy) -> tuple[float, float, dict[str, float]]:
    """Whole layers on PS tasks, round-robin (sim.costs.ps); no codec on this path."""
    if cluster.world_size == 1:
        return 0.0, 0.0, {"intra": 0.0, "inter": 0.0}
    steps = ps_placed_push_pull(round_robin_placement(layer_bytes, strategy.ps_servers), cluster)
    return collective_time_s(steps, cluster), 0.0, bytes_by_link(steps)


def ps_servers_of(strategy: Strategy, cluster: Cluster) -> int:
    """Servers a parameter-server layout runs: co-located ones at most one per worker node."""
    if strategy.ps_layout in ("colocated", "colocated_aggregated"):
        return min(strategy.ps_servers, cluster.nodes)
    return strategy.ps_servers


def ps_placement(workload, strategy: Strategy, cluster: Cluster, backward_order: list[int]):
    """Per tensor (in backward order), the (server, bytes) it puts on the servers, or None for an
    even split (sim.costs.ps: round_robin as replica_device_setter, mxnet_keys as KVStoreDist)."""
    if strategy.collective != "ps" or strategy.ps_placement == "sharded":
        return None
    servers = ps_servers_of(strategy, cluster)
    per_param = strategy.grad_bytes_per_param
    if strategy.ps_placement == "mxnet_keys":  # keys numbered in the model's order
        placed = mxnet_key_placement([float(layer.param_count) for layer in workload.layers], servers, per_param)
    else:
        placed = [[(i % servers, layer.param_count * per_param)] for i, layer in enumerate(workload.layers)]
    return [placed[i] for i in backward_order]


def negotiation_of(strategy: Strategy, cluster: Cluster, tensors: int):
    """The framework's per-cycle negotiation (sim.costs.coordination), or None."""
    if strategy.negotiation is None or cluster.world_size == 1:
        return None
    link = cluster.inter_link if cluster.nodes > 1 else cluster.intra_link
    return NEGOTIATIONS[strategy.negotiation](cluster.world_size, tensors, link.alpha_s)
def zero_bucket_sync(n_bytes: float, cluster: Cluster, strategy: Strategy) -> tuple[float, float, dict[str, float]]:
    """ZeRO-1/2's bucket: a reduce-scatter of the gradients (each rank keeps the shard it updates),
    (Rajbhandari et al. 2020 section 5.1; DeepSpeed stage 1/2 reduce_scatter of each bucket)."""
    if cluster.world_size == 1 or n_bytes <= 0:
        return 0.0, 0.0, {"intra": 0.0, "inter": 0.0}
    cost = op_cost("reduce_scatter", n_bytes, cluster, spec_of(strategy))
    return cost.time_s, 0.0, dict(cost.bytes_by_link)


def param_gather_cost(n_bytes: float, cluster: Cluster, strategy: Strategy) -> tuple[float, dict[str, float]]:
    """ZeRO-1/2 after the step: every rank's updated shard allgathered (``n_bytes``: the whole
    parameters in the compute precision, nccl-tests' allgather size)."""
    if cluster.world_size == 1 or n_bytes <= 0:
        return 0.0, {"intra": 0.0, "inter": 0.0}
    cost = op_cost("allgather", n_bytes, cluster, spec_of(strategy))
    return cost.time_s, dict(cost.bytes_by_link)


def overlapped_gather_s(gather_s: float, forward_s: float, param_bytes: float, bucket_bytes: float) -> float:
    """The exposed part of ZeRO-1/2's parameter allgather under Megatron-LM's --overlap-param-gather:
    the gather runs bucket by bucket, a module's forward pre-hook waits for its bucket's gather and
    dispatches the next bucket's (megatron/core/distributed/distributed_data_parallel.py,
    _make_forward_pre_hook -> finish_param_sync), so the first bucket's gather is exposed and each
    later one overlaps the forward of the bucket before it:
    exposed = g_1 + sum_{k>1} max(0, g_k - f_{k-1}); with n = ceil(parameter bytes / bucket bytes)
    buckets of equal gather g = G / n and forward f = F / n (assumed: parameters and forward compute
    spread evenly over the buckets): G / n + (n - 1) / n x max(0, G - F)."""
    if gather_s <= 0:
        return 0.0
    n = max(1, math.ceil(param_bytes / bucket_bytes)) if bucket_bytes > 0 else 1
    return gather_s / n + (n - 1) / n * max(0.0, gather_s - forward_s)


def overlapped_reduce_s(reduce_s: float, backward_s: float, param_bytes: float, bucket_bytes: float) -> float:
    """The exposed part of a stage's gradient reduction under Megatron-LM's --overlap-grad-reduce:
    a bucket's allreduce (or reduce-scatter) is dispatched once the last micro-batch's backward has
    produced its gradients (distributed_data_parallel.py _make_backward_post_hook), the reductions
    run one after another on their stream while the backward goes on, so all but the last bucket's
    can hide: with n = ceil(parameter bytes / bucket bytes) equal buckets of r = R / n and the last
    micro-batch's backward b = B / n per bucket (assumed even), exposed = R / n + (n - 1) / n x
    max(0, R - B) (the mirror of ``overlapped_gather_s``)."""
    return overlapped_gather_s(reduce_s, backward_s, param_bytes, bucket_bytes)


def data_parallel_passes(scenario: Scenario, times: list[tuple[float, float]]):
    """The whole batch's layer passes on one rank (sim.costs.passes with tp = cp = 1: FlashAttention's
    backward, recomputation)."""
    options = pass_options(scenario)
    w = scenario.workload
    return layer_passes(w.layers, times, options, units=w.layer_units,
                        elementwise_s=elementwise_times_s(w, w.batch_size, scenario.cluster.gpu,
                                                          DTYPE_BYTES[scenario.strategy.precision], options.flash))


def build_plan(scenario: Scenario) -> IterationPlan:
    workload, cluster, strategy = scenario.workload, scenario.cluster, scenario.strategy
    dtype_bytes = DTYPE_BYTES[strategy.precision]
    passes = data_parallel_passes(scenario, layer_times_s(workload, cluster.gpu, strategy.precision, dtype_bytes))
    times = list(zip(passes.fwd_s, passes.bwd_s, strict=True))
    n_layers = len(workload.layers)
    backward_order = list(range(n_layers - 1, -1, -1))
    grad_bytes = [workload.layers[i].param_count * strategy.grad_bytes_per_param for i in backward_order]
    release: list[float] = []
    placed = ps_placement(workload, strategy, cluster, backward_order)
    whole_model_ps = (strategy.collective == "ps" and strategy.ps_placement == "round_robin"
                      and strategy.ps_layout == "dedicated")
    if whole_model_ps:
        groups = [list(range(n_layers))]  # all variables pulled and pushed together, after backward
    elif strategy.fusion_bytes is not None:
        groups, release = fusion_batches(grad_bytes, strategy.fusion_bytes, strategy.cycle_time_s or 0.0)
    else:
        groups = assign_buckets(grad_bytes, strategy.bucket_bytes, strategy.first_bucket_bytes or DDP_FIRST_BUCKET_BYTES)
    buckets = []
    comm_s = []
    codec_s = []
    encode_s = []
    link_bytes = []
    footprints: list[Footprint | None] = []
    terms = []
    latency_s = one_element_latency_s(cluster, strategy, cluster.gpu)
    for index, positions in enumerate(groups):
        layers = tuple(backward_order[p] for p in positions)
        n_bytes = sum(grad_bytes[p] for p in positions)
        buckets.append(Bucket(index, layers, n_bytes))
        if whole_model_ps:
            t, t_codec, by_link = _placed_ps_sync([workload.layers[i].param_count * strategy.grad_bytes_per_param
                                                   for i in range(n_layers)], cluster, strategy)
            footprints.append(bucket_footprint(n_bytes, t, by_link, cluster, strategy))
            terms.append(comm_terms(t, 0.0, 0.0, latency_s))
        elif strategy.zero_stage:
            t, t_codec, by_link = zero_bucket_sync(n_bytes, cluster, strategy)
            footprints.append(bucket_footprint(n_bytes, t, by_link, cluster, strategy))
            terms.append(comm_terms(t, 0.0, 0.0, zero_bucket_sync(strategy.grad_bytes_per_param, cluster, strategy)[0]))
        else:
            held = None if placed is None else server_bytes(placed, positions, ps_servers_of(strategy, cluster))
            t, t_codec, by_link = bucket_sync(n_bytes, cluster, strategy, cluster.gpu, held)
            encode_s.append(bucket_encode_s(n_bytes, cluster, strategy, cluster.gpu))
            t -= encode_s[-1]  # on the compute stream, at the hand-off
            copy_s = 0.0
            if strategy.fusion_bytes is not None and cluster.world_size > 1:  # Horovod's fusion buffer
                copy_s = fusion_copy_s(n_bytes, sum(grad_bytes[p] > 0 for p in positions), cluster.gpu)
                t += copy_s
            footprints.append(bucket_footprint(n_bytes, t, by_link, cluster, strategy,
                                               copy_s * cluster.gpu.memory_bandwidth_Bps))
            terms.append(comm_terms(t, t_codec - encode_s[-1], copy_s, latency_s))
        comm_s.append(t)
        codec_s.append(t_codec)
        link_bytes.append(by_link)
    coordination = 0.0
    negotiation = negotiation_of(strategy, cluster, sum(b > 0 for b in grad_bytes))
    if negotiation is not None and release:  # all requests in one cycle: sim.engine.plan.fusion_batches
        offsets = negotiation.release_offsets_s(len(release))
        release = [r + o for r, o in zip(release, offsets, strict=True)]
        coordination = negotiation.total_s(len(release))
    updated = workload.param_count / cluster.world_size if strategy.zero_stage else workload.param_count
    gather_s = 0.0
    if strategy.zero_stage:
        gather_s, gathered = param_gather_cost(workload.param_count * dtype_bytes, cluster, strategy)
        if strategy.overlap_param_gather:
            gather_s = overlapped_gather_s(gather_s, sum(passes.fwd_s), workload.param_count * dtype_bytes,
                                           strategy.bucket_bytes)
        if link_bytes:  # counted with the last bucket's bytes (the lists stay one entry per bucket)
            link_bytes[-1] = {k: link_bytes[-1].get(k, 0.0) + gathered.get(k, 0.0) for k in ("intra", "inter")}
    return IterationPlan(
        layer_names=tuple(layer.name for layer in workload.layers),
        fwd_s=tuple(t[0] for t in times),
        bwd_s=tuple(t[1] for t in times),
        buckets=tuple(buckets),
        bucket_comm_s=tuple(comm_s),
        bucket_bytes_by_link=tuple(link_bytes),
        optimizer_s=workload_optimizer_time_s(workload, updated, dtype_bytes, cluster.gpu),
        overlap=strategy.overlap,
        bucket_codec_s=tuple(codec_s),
        bucket_encode_s=tuple(encode_s) if any(encode_s) else (),
        bucket_release_s=tuple(release),
        layer_loads=tuple(pass_loads(workload, cluster.gpu, strategy.precision, dtype_bytes)) if any(footprints) else (),
        bucket_footprints=tuple(footprints) if any(footprints) else (),
        iteration_overhead_s=strategy.iteration_overhead_s
        + (strategy.multi_gpu_overhead_s if cluster.world_size > 1 else 0.0)
        + (strategy.inter_node_overhead_s if cluster.nodes > 1 else 0.0),
        double_buffering=strategy.double_buffering,
        coordination_s=coordination,
        param_gather_s=gather_s,
        recompute_s=sum(passes.recompute_s),
        bucket_terms=tuple(terms),
    )
