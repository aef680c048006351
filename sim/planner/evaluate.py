"""Candidates simulated on the fast path, with what does not change between them computed once.

``sim.simulate.simulate`` builds a whole iteration plan for every scenario: every layer's roofline,
every tensor-parallel allreduce through the collective library's tuner, the stage cut, every
bucket's reduction, then runs the event layer. Across the thousands of candidates of one plan
most of that repeats, so this evaluator keeps it (all keys exact; nothing is approximated):

- per-layer times of one micro-batch, by micro-batch size (and batch, where layers carry measured
  times): ``sim.engine.pipeline_plan.micro_batch_times_s``, ``sim.costs.compute.layer_times_s``;
- tensor-parallel allreduce seconds, by TP group and message size: ``sim.costs.tensor.tp_layer_comm_s``
  depends on a layer only through its allreduce count and activation size;
- stage cuts (``stage_bounds``), stage sends, optimizer steps, memory (``sim.memory.memory_per_rank``);
- a gradient bucket's reduction, by its bytes, its data-parallel group and the synchronisation
  (``sim.engine.plan.bucket_sync``, ``bucket_encode_s``);
- the pipeline's flush: the stage processes of ``sim.engine.pipeline.run_pipeline`` up to each
  stage's last backward depend only on the stages' forward, backward and send times, the
  micro-batches and the schedule, so the event layer runs once per distinct flush and a
  candidate's end is each stage's flush end + its gradient sync + its optimizer step, as
  ``run_pipeline`` adds them;
- data parallelism without micro-batches runs ``sim.engine.fast.run_fast`` on an iteration plan
  assembled from the same cached pieces as ``sim.engine.plan.build_plan`` assembles them.

tests/test_planner.py checks the outcome against ``simulate()`` of the candidate's scenario,
field by field, over models, clusters, layouts, libraries and codecs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.cluster import Cluster
from sim.costs.comm import op_cost, spec_of
from sim.costs.compute import layer_times_s, pass_loads, workload_optimizer_time_s
from sim.costs.elementwise import elementwise_times_s
from sim.costs.passes import Passes, layer_passes, pass_options
from sim.costs.tensor import tp_allreduces_per_pass, tp_layer_comm_s
from sim.engine.fast import run_fast
from sim.engine.pipeline import run_pipeline
from sim.engine.pipeline_plan import (
    PipelinePlan,
    StagePlan,
    _chunk_send,
    chunk_bounds,
    kv_send_s,
    micro_batch_loads,
    micro_batch_times_s,
    moe_alltoall_s,
    optimizer_params,
    scaled_passes,
    stage_param_bytes,
    stage_sync,
    tp_spec,
    zero3_unit_comm,
    zero3_unit_copy_s,
    zero3_unit_footprints,
)
from sim.engine.plan import (
    DDP_FIRST_BUCKET_BYTES,
    Bucket,
    IterationPlan,
    assign_buckets,
    bucket_encode_s,
    bucket_footprint,
    bucket_sync,
    data_parallel_passes,
    overlapped_gather_s,
    overlapped_reduce_s,
    param_gather_cost,
    zero_bucket_sync,
)
from sim.memory import memory_per_rank
from sim.parallel import expert_grad_group, grad_group, tp_group
from sim.planner.flush import flush_ends
from sim.planner.request import PlanRequest
from sim.planner.space import Layout, Sync
from sim.scenario import Scenario
from sim.simulate import with_stragglers
from sim.strategy import DTYPE_BYTES, Strategy
from sim.workload import Workload


@dataclass(frozen=True, slots=True)
class Outcome:
    """One candidate's iteration, as ``simulate()`` reports it (sim.result.IterationResult's fields)."""

    iteration_time_s: float
    compute_time_s: float
    exposed_comm_time_s: float
    bubble_time_s: float
    codec_time_s: float
    tp_comm_time_s: float
    pp_comm_time_s: float
    comm_time_s: float
    memory_bytes: float
    model_comm_time_s: float = 0.0
    recompute_time_s: float = 0.0
    overlap_slowdown_time_s: float = 0.0
    straggler_wait_time_s: float = 0.0


class Rejection(Exception):
    """A candidate a rule removes after its layout was accepted (memory, the library's offer)."""

    def __init__(self, reason: str, detail: str, memory_bytes: float = 0.0):
        super().__init__(detail)
        self.reason, self.detail, self.memory_bytes = reason, detail, memory_bytes


DISTRIBUTED_OPTIMIZER_STAGE = 1
"""The plan's ZeRO-1 is Megatron-LM's distributed optimizer as NeMo's and Megatron-LM's own recipes run
it (--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather): with micro-batches the
gradients' reduce-scatter overlaps the last micro-batch's backward (sim.engine.plan.overlapped_reduce_s)
and the updated parameters' allgather the next forward (overlapped_gather_s); ZeRO-2 is DeepSpeed's
stage 2 (the gather after the step, exposed)."""


def candidate_strategy(base: Strategy, layout: Layout, sync: Sync) -> Strategy:
    """The full strategy of a candidate (what its scenario's ``strategy:`` section says)."""
    model_parallel = layout.tp * layout.pp > 1
    return replace(base, kind="hybrid" if model_parallel else "data_parallel", tp=layout.tp, pp=layout.pp, dp=None,
                   micro_batches=layout.micro_batches, schedule=layout.schedule, backend=sync.backend,
                   collective=sync.collective, codec=sync.codec, codec_path=sync.codec_path,
                   bucket_bytes=sync.bucket_bytes, cp=layout.cp, vpp=layout.vpp, ep=layout.ep,
                   sequence_parallel=layout.sequence_parallel, zero_stage=layout.zero_stage,
                   overlap_param_gather=layout.zero_stage == DISTRIBUTED_OPTIMIZER_STAGE,
                   overlap_grad_reduce=layout.zero_stage == DISTRIBUTED_OPTIMIZER_STAGE and is_pipelined(layout),
                   recompute=layout.recompute)


def is_pipelined(layout: Layout) -> bool:
    """sim.simulate.pipelined for a layout: the pipeline engine, or the data-parallel fast path."""
    return (layout.tp > 1 or layout.pp > 1 or layout.micro_batches > 1 or layout.cp > 1 or layout.ep > 1
            or layout.zero_stage >= 3)


FLUSHES = ("replay", "simpy")
"""How a pipeline's flush is obtained: replayed (sim.planner.flush, the engine's numbers bit for
bit) or by running sim.engine.pipeline.run_pipeline (the benchmark's comparison)."""


class Evaluator:
    def __init__(self, request: PlanRequest, flush: str = "replay"):
        base = request.strategy
        if (base.framework or base.fusion_bytes is not None or base.double_buffering
                or base.iteration_overhead_s or base.first_bucket_bytes is not None):
            raise ValueError("the planner searches DDP-style synchronisation: no framework mechanisms in its base strategy")
        if flush not in FLUSHES:
            raise ValueError(f"flush: one of {FLUSHES}")
        self.flush = flush
        self.request = request
        self.layers = request.workload.layers
        self.dtype_bytes = DTYPE_BYTES[request.precision]
        self.gpu = request.cluster.gpu
        self.measured = any(layer.fwd_time_s is not None for layer in self.layers)
        self.simulations = 0
        """Event-layer runs (flushes and data-parallel iterations) actually simulated."""
        self._cache: dict[tuple, object] = {}

    # -- small pieces, each computed once ---------------------------------------------------

    def _get(self, key: tuple, make):
        try:
            return self._cache[key]
        except KeyError:
            value = self._cache[key] = make()
            return value

    def cluster(self, gpus: int) -> Cluster:
        return self._get(("cluster", gpus), lambda: self.request.cluster.with_world_size(gpus))

    def workload(self, batch: int) -> Workload:
        return self._get(("workload", batch), lambda: self.request.workload.with_batch_size(batch))

    def scenario(self, layout: Layout, sync: Sync) -> Scenario:
        return Scenario(name=f"plan-{self.request.workload.name}", workload=self.workload(layout.batch),
                        cluster=self.cluster(layout.gpus), strategy=candidate_strategy(self.request.strategy, layout, sync))

    def _backend_scenario(self, layout: Layout, backend: str) -> Scenario:
        """The layout's scenario with its library and no synchronisation choices (what its passes,
        stage cut and memory depend on)."""
        return self._get(("scenario", layout, backend), lambda: self.scenario(
            layout, Sync.of(backend, "auto", None, None, self.request.bucket_mib[0])))

    def _comm_strategy(self, sync: Sync) -> Strategy:
        key = ("comm", sync.backend, sync.collective, sync.codec, sync.codec_path)
        return self._get(key, lambda: replace(self.request.strategy, backend=sync.backend, collective=sync.collective,
                                              codec=sync.codec, codec_path=sync.codec_path))

    def _sync_s(self, n_bytes: float, group_key: tuple, group: Cluster, sync: Sync) -> tuple[float, float]:
        """(comm seconds, codec seconds) of one bucket: ``bucket_sync``'s first two terms."""
        t, codec_s, _ = self._sync(n_bytes, group_key, group, sync)
        return t, codec_s

    def _sync(self, n_bytes: float, group_key: tuple, group: Cluster, sync: Sync) -> tuple[float, float, dict[str, float]]:
        key = ("bucket", n_bytes, group_key, sync.backend, sync.collective, sync.codec, sync.codec_path)
        try:
            return self._cache[key]  # type: ignore[return-value]
        except KeyError:
            value = self._cache[key] = bucket_sync(n_bytes, group, self._comm_strategy(sync), self.gpu)
            return value

    def _footprint(self, n_bytes: float, stream_s: float, by_link: dict[str, float], group_key: tuple, group: Cluster,
                   sync: Sync):
        """What the bucket's reduction takes from the GPU beside compute (``build_plan``'s ``bucket_footprint``)."""
        key = ("footprint", n_bytes, stream_s, group_key, sync.backend, sync.collective, sync.codec, sync.codec_path)
        return self._get(key, lambda: bucket_footprint(n_bytes, stream_s, by_link, group, self._comm_strategy(sync)))

    def straggler_scale(self, gpus: int) -> float:
        """The expected slowest of ``gpus`` ranks' compute factor (``simulate``'s: sim.costs.stragglers)."""
        return self._get(("stragglers", gpus), lambda: self.request.variability.scale(self.gpu, gpus))

    def _op_s(self, op: str, n_bytes: float, group_key: tuple, group: Cluster, backend: str) -> float:
        """A reduce-scatter or allgather through the library's own algorithm (ZeRO's)."""
        key = ("op", op, n_bytes, group_key, backend)
        return self._get(key, lambda: 0.0 if group.world_size == 1 or n_bytes <= 0 else op_cost(
            op, n_bytes, group, spec_of(replace(self.request.strategy, backend=backend))).time_s)

    def _encode_s(self, n_bytes: float, group_key: tuple, group: Cluster, sync: Sync) -> float:
        """The codec work before a bucket's collective (``bucket_encode_s``; 0 without a codec)."""
        if sync.codec is None:
            return 0.0
        key = ("encode", n_bytes, group_key, sync.backend, sync.collective, sync.codec, sync.codec_path)
        return self._get(key, lambda: bucket_encode_s(n_bytes, group, self._comm_strategy(sync), self.gpu))

    def memory(self, layout: Layout, sync: Sync, bounds: tuple[tuple[int, int], ...]) -> float:
        """The fullest rank's bytes (sim.memory.memory_per_rank with the stage cut given)."""
        # the codec's buffers are the only part the synchronisation changes (sim.memory._codec_bytes),
        # the library only NCCL's buffers
        codec = (sync.codec, sync.codec_path, sync.bucket_bytes) if sync.codec and layout.dp > 1 else None
        key = ("memory", layout, bounds, codec, sync.collective == "ps", sync.backend == "nccl")
        return self._get(key, lambda: max(b.total_bytes for b in memory_per_rank(self.scenario(layout, sync), list(bounds))))

    def bounds(self, layout: Layout, backend: str) -> tuple[tuple[int, int], ...]:
        """The model chunks' [start, end) layers (one chunk of everything without a pipeline path)."""
        if not is_pipelined(layout) or layout.pp * layout.vpp == 1:  # one chunk: the cut is everything
            return ((0, len(self.layers)),)
        return self._bounds(layout, backend)

    # -- a candidate ------------------------------------------------------------------------

    def evaluate(self, layout: Layout, sync: Sync) -> Outcome:
        """The candidate's iteration; ``Rejection`` if it does not fit or its library refuses it."""
        from sim.errors import ConfigError

        pipelined = is_pipelined(layout)
        bounds = self.bounds(layout, sync.backend)
        memory = self.memory(layout, sync, bounds)
        if memory > self.request.memory_limit_bytes:
            raise Rejection("memory", f"{layout.label()}: {memory / 2**30:.1f} GiB per GPU", memory)
        try:
            outcome = self._pipeline(layout, sync, bounds, memory) if pipelined else self._data_parallel(layout, sync, memory)
        except ConfigError as err:
            raise Rejection("library", str(err), memory) from None
        return self._fed(outcome, layout)

    def _fed(self, outcome: Outcome, layout: Layout) -> Outcome:
        """The iteration no shorter than its node's input pipeline (sim.simulate.with_input_pipeline)."""
        from sim.catalog import host_of
        from sim.costs.input_pipeline import DEFAULT_LOADER, node_data

        request = self.request
        cluster = self.cluster(layout.gpus)
        data = node_data(request.workload.data, request.strategy.data_loader or DEFAULT_LOADER,
                         layout.dp * layout.batch / cluster.nodes, cluster.gpus_per_node, host_of(cluster).cores,
                         request.strategy.data_workers)
        if data is None or data.time_s <= outcome.iteration_time_s:
            return outcome
        return replace(outcome, iteration_time_s=data.time_s)

    def lower_bound_s(self, layout: Layout, backend: str) -> float:
        """An iteration can be no shorter than this whatever its synchronisation (gradient
        synchronisation and ZeRO's gathers only add time). Data-parallel path: forward + backward +
        optimizer. Pipeline path, without simulating the flush: each stage computes m micro-batches,
        m (F_s + B_s), before its optimizer step; and (one chunk per stage) stage s cannot start
        before micro-batch 0's forwards reach it, sum_{j<s} f_j, nor can stage 0 end before the
        last gradient returns through the stages below s, sum_{j<s} b_j, then steps."""
        if not is_pipelined(layout):
            passes = self._dp_passes(layout)
            return sum(passes.fwd_s) + sum(passes.bwd_s) + self._dp_optimizer_s(layout)
        bounds = self._bounds(layout, backend)
        stages = self._stages(layout, backend, bounds)
        p, m = layout.pp, layout.micro_batches
        opt = [self._optimizer_s(layout, bounds[s::p]) for s in range(p)]
        busy = [m * sum(st[0] + st[1] for st in stages[s::p]) for s in range(p)]
        bound = max(b + o for b, o in zip(busy, opt, strict=True))
        if layout.vpp == 1:
            ahead = behind = 0.0
            for s in range(p):
                bound = max(bound, ahead + busy[s] + behind + opt[0])
                ahead += stages[s][0]
                behind += stages[s][1]
        return bound

    # -- data parallelism, one micro-batch: sim.engine.plan.build_plan + run_fast ------------

    def _dp_passes(self, layout: Layout) -> Passes:
        key = ("dp_passes", layout.batch, layout.recompute)

        def make():
            times = self._get(("layer_times", layout.batch), lambda: layer_times_s(
                self.workload(layout.batch), self.gpu, self.request.precision, self.dtype_bytes))
            return data_parallel_passes(self._backend_scenario(layout, self.request.backends[0]), times)

        return self._get(key, make)

    def _dp_optimizer_s(self, layout: Layout) -> float:
        params = self.request.workload.param_count
        updated = params / layout.gpus if layout.zero_stage else params
        return workload_optimizer_time_s(self.workload(layout.batch), updated, self.dtype_bytes, self.gpu)

    def _data_parallel(self, layout: Layout, sync: Sync, memory: float) -> Outcome:
        request, layers = self.request, self.layers
        passes = self._dp_passes(layout)
        n = len(layers)
        backward_order = list(range(n - 1, -1, -1))
        per_param = request.strategy.grad_bytes_per_param
        grad_bytes = self._get(("grad_bytes",), lambda: [layers[i].param_count * per_param for i in backward_order])
        groups = self._get(("dp_buckets", sync.bucket_bytes),
                           lambda: assign_buckets(grad_bytes, sync.bucket_bytes, DDP_FIRST_BUCKET_BYTES))
        cluster = self.cluster(layout.gpus)
        comm, codec, encode, footprints = [], [], [], []
        for positions in groups:
            n_bytes = sum(grad_bytes[p] for p in positions)
            t, c, e, f = 0.0, 0.0, 0.0, None
            if layout.zero_stage:
                t, _, by_link = self._get(("zero_bucket", n_bytes, layout.gpus, sync.backend),
                                          lambda n=n_bytes: zero_bucket_sync(n, cluster, self._comm_strategy(sync)))
                f = self._footprint(n_bytes, t, by_link, ("zero", layout.gpus), cluster, sync) if layout.gpus > 1 else None
            elif layout.gpus > 1:
                t, c, by_link = self._sync(n_bytes, ("all", layout.gpus), cluster, sync)
                e = self._encode_s(n_bytes, ("all", layout.gpus), cluster, sync)
                f = self._footprint(n_bytes, t - e, by_link, ("all", layout.gpus), cluster, sync)
            comm.append(t - e if not layout.zero_stage else t)
            codec.append(c)
            encode.append(e)
            footprints.append(f)
        # a calibration's overheads, where the layout has several GPUs / spans nodes (as sim.engine.plan)
        overhead = ((request.strategy.multi_gpu_overhead_s if layout.gpus > 1 else 0.0)
                    + (request.strategy.inter_node_overhead_s if cluster.nodes > 1 else 0.0))
        gather_s = 0.0
        if layout.zero_stage:
            gather_s = self._get(("zero_gather", layout.gpus, sync.backend), lambda: param_gather_cost(
                request.workload.param_count * self.dtype_bytes, cluster, self._comm_strategy(sync))[0])
            if layout.zero_stage == DISTRIBUTED_OPTIMIZER_STAGE:
                gather_s = overlapped_gather_s(gather_s, sum(passes.fwd_s), request.workload.param_count * self.dtype_bytes,
                                               sync.bucket_bytes)
        scale = self.straggler_scale(layout.gpus)
        key = ("fast", layout.batch, layout.recompute, sync.bucket_bytes, tuple(comm), tuple(encode), overhead, gather_s,
               layout.zero_stage > 0, tuple(footprints), scale)

        def make():
            self.simulations += 1
            buckets = []
            for index, positions in enumerate(groups):
                buckets.append(Bucket(index, tuple(backward_order[p] for p in positions),
                                      sum(grad_bytes[p] for p in positions)))
            plan = IterationPlan(
                layer_names=tuple(layer.name for layer in layers), fwd_s=passes.fwd_s,
                bwd_s=passes.bwd_s, buckets=tuple(buckets), bucket_comm_s=tuple(comm),
                bucket_bytes_by_link=tuple({} for _ in buckets),
                optimizer_s=self._dp_optimizer_s(layout),
                overlap=request.strategy.overlap, bucket_codec_s=tuple(codec),
                bucket_encode_s=tuple(encode) if any(encode) else (), iteration_overhead_s=overhead,
                param_gather_s=gather_s, recompute_s=sum(passes.recompute_s),
                layer_loads=self._get(("loads", layout.batch), lambda: tuple(pass_loads(
                    self.workload(layout.batch), self.gpu, request.precision, self.dtype_bytes))) if any(footprints) else (),
                bucket_footprints=tuple(footprints) if any(footprints) else ())
            r = with_stragglers(lambda s: run_fast(plan.scaled(s), layout.gpus, layout.batch), scale)
            return (r.iteration_time_s, r.compute_time_s, r.exposed_comm_time_s, r.comm_time_s, r.codec_time_s,
                    r.recompute_time_s, r.overlap_slowdown_time_s, r.straggler_wait_time_s)

        total, compute, exposed, comm_s, codec_s, recompute_s, slowdown, wait = self._get(key, make)
        return Outcome(total, compute, exposed, 0.0, codec_s, 0.0, 0.0, comm_s, memory, 0.0, recompute_s, slowdown, wait)

    # -- layouts with stages, TP, CP, EP, ZeRO-3 or micro-batches: pipeline_plan + run_pipeline --

    def _passes(self, layout: Layout, backend: str) -> Passes:
        """Per layer: one micro-batch's passes on one rank (build_pipeline_plan's scenario_passes)."""
        micro = layout.batch // layout.micro_batches
        key = ("passes", layout.gpus, layout.tp, layout.cp, layout.pp, layout.dp, layout.ep, layout.sequence_parallel,
               layout.recompute, layout.zero_stage >= 3, layout.batch if self.measured else 0, micro, backend)

        def make():
            scenario = self._backend_scenario(layout, backend)
            times = self._get(("micro_times", layout.batch if self.measured else 0, micro),
                              lambda: micro_batch_times_s(scenario, micro, self.dtype_bytes))
            tp_comm = self._tp_comm(layout, micro, backend)
            kv = self._get(("kv", layout.gpus, layout.tp, layout.cp, micro, backend),
                           lambda: kv_send_s(scenario, micro, self.dtype_bytes))
            a2a = self._get(("a2a", layout.gpus, layout.tp, layout.cp, layout.pp, layout.ep, micro, backend),
                            lambda: moe_alltoall_s(scenario, micro, self.dtype_bytes))
            gather, scatter = self._get(("zero3", layout.gpus, layout.dp, layout.tp, layout.pp, layout.cp, layout.ep,
                                         layout.zero_stage >= 3, backend), lambda: zero3_unit_comm(scenario))
            footprints = self._get(("zero3_footprints", layout.gpus, layout.dp, layout.tp, layout.pp, layout.cp,
                                    layout.ep, layout.zero_stage >= 3, backend),
                                   lambda: zero3_unit_footprints(scenario, gather, scatter))
            loads = self._get(("micro_loads", layout.batch if self.measured else 0, micro),
                              lambda: micro_batch_loads(scenario, micro, self.dtype_bytes)) if footprints else None
            options = pass_options(scenario)
            elementwise = self._get(("elementwise", micro), lambda: elementwise_times_s(
                self.request.workload, micro, self.gpu, self.dtype_bytes, options.flash))
            copy = self._get(("zero3_copy", layout.gpus, layout.dp, layout.tp, layout.pp, layout.cp, layout.ep,
                              layout.zero_stage >= 3), lambda: zero3_unit_copy_s(scenario))
            return layer_passes(self.layers, times, options, tp_comm, kv, a2a, gather, scatter,
                                self.request.workload.layer_units, elementwise, footprints, loads, copy)

        return self._get(key, make)

    def _tp_comm(self, layout: Layout, micro: int, backend: str) -> list[float]:
        key = ("tp_comm", layout.gpus, layout.tp, layout.cp, layout.sequence_parallel, micro, backend)

        def make():
            group = tp_group(self.cluster(layout.gpus), layout.tp)
            spec = tp_spec(replace(self.request.strategy, backend=backend))
            sp = layout.sequence_parallel and layout.tp > 1
            by_shape: dict[tuple[int, float], float] = {}
            out = []
            for layer in self.layers:
                shape = (tp_allreduces_per_pass(layer), layer.activation_elems)
                if shape not in by_shape:
                    by_shape[shape] = tp_layer_comm_s(layer, micro, self.dtype_bytes, group, spec, sp, 1 / layout.cp)
                out.append(by_shape[shape])
            return out

        return self._get(key, make)

    def _bounds(self, layout: Layout, backend: str) -> tuple[tuple[int, int], ...]:
        if layout.pp * layout.vpp == 1:
            return ((0, len(self.layers)),)
        micro = layout.batch // layout.micro_batches
        key = ("bounds", layout.gpus, layout.tp, layout.cp, layout.pp, layout.vpp, layout.dp, layout.ep,
               layout.sequence_parallel, layout.recompute, layout.zero_stage >= 3, layout.batch if self.measured else 0,
               micro, backend)

        def make():
            passes = self._passes(layout, backend)
            return tuple(chunk_bounds(self._backend_scenario(layout, backend),
                                      [f + b for f, b in zip(passes.fwd_s, passes.bwd_s, strict=True)]))

        return self._get(key, make)

    def _stages(self, layout: Layout, backend: str, bounds) -> list[tuple[float, float, float, float, float]]:
        """Per virtual stage: (forward, backward, TP collectives, other model-parallel comm,
        recomputation) seconds of one micro-batch (build_pipeline_plan's ChunkPlan sums)."""
        micro = layout.batch // layout.micro_batches
        key = ("stages", layout.gpus, layout.tp, layout.cp, layout.pp, layout.dp, layout.ep, layout.sequence_parallel,
               layout.recompute, layout.zero_stage >= 3, layout.batch if self.measured else 0, micro, backend, bounds)

        def make():
            passes = self._passes(layout, backend)
            over_s = self.request.strategy.pipeline_overhead_s
            return [(sum(passes.fwd_s[lo:hi]) + over_s, sum(passes.bwd_s[lo:hi]) + over_s,
                     sum(passes.tp_comm_s[i] for i in range(lo, hi)), sum(passes.model_comm_s[i] for i in range(lo, hi)),
                     sum(passes.recompute_s[i] for i in range(lo, hi))) for lo, hi in bounds]

        return self._get(key, make)

    def _sends(self, layout: Layout, bounds) -> list[float]:
        micro = layout.batch // layout.micro_batches
        key = ("sends", layout.gpus, layout.tp, layout.cp, layout.pp, layout.dp, micro, bounds)

        def make():
            scenario = self._backend_scenario(layout, self.request.backends[0])
            return [_chunk_send(scenario, list(bounds), k, micro, self.dtype_bytes, layout.dp)[0] for k in range(len(bounds))]

        return self._get(key, make)

    def _optimizer_s(self, layout: Layout, chunks) -> float:
        key = ("optimizer", layout.gpus, layout.tp, layout.cp, layout.dp, layout.ep, layout.zero_stage > 0, tuple(chunks))

        def make():
            scenario = self._backend_scenario(layout, self.request.backends[0])
            return workload_optimizer_time_s(self.request.workload, optimizer_params(scenario, list(chunks)),
                                             self.dtype_bytes, self.gpu)

        return self._get(key, make)

    def _stage_sync(self, layout: Layout, sync: Sync, chunks) -> tuple[float, float, float]:
        """A stage's gradient sync after the flush (pipeline_plan.stage_sync): (sync, codec, ZeRO gather) seconds."""
        if layout.dp * layout.cp == 1 or layout.zero_stage >= 3:
            return 0.0, 0.0, 0.0
        key = ("stage_sync", layout.gpus, layout.dp, layout.tp, layout.pp, layout.cp, layout.ep, layout.zero_stage > 0,
               tuple(chunks), sync)

        def make():
            cluster = self.cluster(layout.gpus)
            dense_key = ("grad", layout.gpus, layout.dp, layout.tp, layout.pp, layout.cp)
            dense = self._get(dense_key, lambda: grad_group(cluster, layout.dp, layout.tp, layout.pp, layout.cp))
            expert_key = ("expert_grad", layout.gpus, layout.dp, layout.ep, layout.tp, layout.pp, layout.cp)
            expert = dense if layout.ep == 1 else self._get(expert_key, lambda: expert_grad_group(
                cluster, layout.dp, layout.ep, layout.tp, layout.pp, layout.cp))
            keys = {id(dense): dense_key, id(expert): expert_key}

            def sync_fn(n_bytes, group, op):
                if op == "allreduce":
                    t, c = self._sync_s(n_bytes, keys[id(group)], group, sync) if group.world_size > 1 else (0.0, 0.0)
                    return t, c, {}
                return self._op_s(op, n_bytes, keys[id(group)], group, sync.backend), 0.0, {}

            t, c, _, g = stage_sync(self.scenario(layout, sync), list(chunks), sync_fn, (dense, expert))
            return t, c, g

        return self._get(key, make)

    def _flush_ends(self, schedule: str, m: int, vpp: int, stages: list, sends: list[float]) -> tuple[float, ...]:
        """When each stage ends its last backward (run_pipeline's flush), simulated once per shape."""
        times = tuple((st[0], st[1]) for st in stages)
        key = ("flush", schedule, m, vpp, times, tuple(sends))

        def make():
            self.simulations += 1
            if self.flush == "replay":
                return flush_ends(schedule, m, times, sends, vpp)
            p = len(times) // vpp
            plan = PipelinePlan(
                stages=tuple(StagePlan(index=s, layers=(0, 0), fwd_s=times[s][0], bwd_s=times[s][1], tp_comm_s=0.0,
                                       send_s=sends[s], send_link="intra", send_bytes=0.0, dp_sync_s=0.0, codec_s=0.0,
                                       dp_bytes_by_link={}, optimizer_s=0.0, param_count=0,
                                       chunks=_chunk_plans(times, sends, p, s) if vpp > 1 else ())
                             for s in range(p)),
                micro_batches=m, schedule=schedule, dp=1, tp=1, tp_bytes_by_link={}, vpp=vpp)
            result = run_pipeline(plan, 1, 1)
            ends = {span.lane: span.start_s for span in result.spans if span.name == "optimizer step"}
            return tuple(ends[f"stage{s}"] for s in range(p))

        return self._get(key, make)

    def _pipeline(self, layout: Layout, sync: Sync, bounds, memory: float) -> Outcome:
        m, p, v = layout.micro_batches, layout.pp, layout.vpp
        stages = self._stages(layout, sync.backend, bounds)
        sends = self._sends(layout, bounds)
        terms = [self._stage_sync(layout, sync, bounds[s::p]) for s in range(p)]
        dp_s = [t[0] for t in terms]
        codec_s = [t[1] for t in terms]
        gather_s = [t[2] for t in terms]
        if layout.zero_stage == DISTRIBUTED_OPTIMIZER_STAGE:  # Megatron-LM's overlaps (candidate_strategy)
            scenario = self._backend_scenario(layout, sync.backend)
            held = [stage_param_bytes(scenario, list(bounds[s::p])) for s in range(p)]
            gather_s = [overlapped_gather_s(g, sum(stages[k][0] for k in range(s, len(stages), p)), held[s],
                                            sync.bucket_bytes) for s, g in enumerate(gather_s)]
            dp_s = [overlapped_reduce_s(d, sum(stages[k][1] for k in range(s, len(stages), p)), held[s],
                                        sync.bucket_bytes) for s, d in enumerate(dp_s)]
        opt_s = [self._optimizer_s(layout, bounds[s::p]) for s in range(p)]

        def end(scale: float) -> tuple[float, tuple[float, ...]]:
            # sim.engine.pipeline_plan.scaled_pipeline_plan: each virtual stage's compute x scale, its
            # TP and other model-parallel communication (half in each pass) as it is
            scaled = stages if scale == 1.0 else [scaled_passes(f, b, tp + mc, scale) + (tp, mc, rc)
                                                   for f, b, tp, mc, rc in stages]
            flush = self._flush_ends(layout.schedule, m, v, scaled, sends)
            # run_pipeline: after its flush a stage syncs its gradients (if any), steps, then (ZeRO-1/2) gathers
            ends = []
            for t, d, o, g in zip(flush, dp_s, opt_s, gather_s, strict=True):
                e = (t + d if d > 0 else t) + o * scale
                ends.append(e + g if g > 0 else e)
            return max(ends), flush

        total, flush = end(1.0)
        scale = self.straggler_scale(layout.gpus)
        slow = end(scale)[0] if scale != 1.0 else total
        # per device: its chunks' sums, as build_pipeline_plan's StagePlan (fwd_s = sum of chunk fwd_s)
        devices = [[stages[k] for k in range(s, len(stages), p)] for s in range(p)]
        dev_f = [sum(ch[0] for ch in dev) for dev in devices]
        dev_b = [sum(ch[1] for ch in dev) for dev in devices]
        # run_pipeline's accounting: the busiest stage (the first of equals) sets compute
        busiest = max(range(p), key=lambda s: dev_f[s] + dev_b[s])
        busy = m * (dev_f[busiest] + dev_b[busiest])
        bubble = max(0.0, max(flush) - busy)  # as run_pipeline clamps it
        layer_ids = [i for lo, hi in bounds[busiest::p] for i in range(lo, hi)]
        passes = self._passes(layout, sync.backend)
        slowdown = m * sum(passes.slowdown_s[i] for i in layer_ids) if passes.slowdown_s else 0.0
        compute = busy + opt_s[busiest] - slowdown
        tp_s = sum(passes.tp_comm_s[i] for i in layer_ids)
        model_s = sum(passes.model_comm_s[i] for i in layer_ids)
        recompute_s = sum(passes.recompute_s[i] for i in layer_ids)
        per_device_sends = [sends[s] if v == 1 else sum(sends[k] for k in range(s, len(sends), p)) for s in range(p)]
        return Outcome(
            iteration_time_s=slow, compute_time_s=compute,
            exposed_comm_time_s=max(0.0, total - compute - slowdown - bubble),
            bubble_time_s=bubble, codec_time_s=max(codec_s), tp_comm_time_s=m * tp_s,
            pp_comm_time_s=2 * m * max(per_device_sends), comm_time_s=max(dp_s), memory_bytes=memory,
            model_comm_time_s=m * model_s, recompute_time_s=m * recompute_s,
            overlap_slowdown_time_s=slowdown, straggler_wait_time_s=max(0.0, slow - total))


def _chunk_plans(times, sends, p: int, s: int):
    from sim.engine.pipeline_plan import ChunkPlan

    return tuple(ChunkPlan(layers=(0, 0), fwd_s=times[k][0], bwd_s=times[k][1], send_s=sends[k], send_link="intra",
                           send_bytes=0.0) for k in range(s, len(times), p))
