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
from sim.costs.collectives import link_of
from sim.costs.comm import spec_of
from sim.costs.compute import layer_times_s, workload_optimizer_time_s
from sim.costs.network import message_time_s
from sim.costs.tensor import tp_allreduces_per_pass, tp_layer_comm_s
from sim.engine.fast import run_fast
from sim.engine.pipeline import run_pipeline
from sim.engine.pipeline_plan import PipelinePlan, StagePlan, micro_batch_times_s, stage_bounds
from sim.engine.plan import (
    DDP_FIRST_BUCKET_BYTES,
    Bucket,
    IterationPlan,
    assign_buckets,
    bucket_encode_s,
    bucket_sync,
)
from sim.memory import memory_per_rank
from sim.parallel import dp_group, stage_boundary_link, tp_group
from sim.planner.flush import flush_ends
from sim.planner.request import PlanRequest
from sim.planner.space import Layout, Sync
from sim.scenario import Scenario
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


class Rejection(Exception):
    """A candidate a rule removes after its layout was accepted (memory, the library's offer)."""

    def __init__(self, reason: str, detail: str, memory_bytes: float = 0.0):
        super().__init__(detail)
        self.reason, self.detail, self.memory_bytes = reason, detail, memory_bytes


def candidate_strategy(base: Strategy, layout: Layout, sync: Sync) -> Strategy:
    """The full strategy of a candidate (what its scenario's ``strategy:`` section says)."""
    model_parallel = layout.tp * layout.pp > 1
    return replace(base, kind="hybrid" if model_parallel else "data_parallel", tp=layout.tp, pp=layout.pp, dp=None,
                   micro_batches=layout.micro_batches, schedule=layout.schedule, backend=sync.backend,
                   collective=sync.collective, codec=sync.codec, codec_path=sync.codec_path,
                   bucket_bytes=sync.bucket_bytes)


FLUSHES = ("replay", "simpy")
"""How a pipeline's flush is obtained: replayed (sim.planner.flush, the engine's numbers bit for
bit) or by running sim.engine.pipeline.run_pipeline (the benchmark's comparison)."""


class Evaluator:
    def __init__(self, request: PlanRequest, flush: str = "replay"):
        base = request.strategy
        if (base.framework or base.fusion_bytes is not None or base.comm_slows_compute or base.double_buffering
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

    def _comm_strategy(self, sync: Sync) -> Strategy:
        key = ("comm", sync.backend, sync.collective, sync.codec, sync.codec_path)
        return self._get(key, lambda: replace(self.request.strategy, backend=sync.backend, collective=sync.collective,
                                              codec=sync.codec, codec_path=sync.codec_path))

    def _sync_s(self, n_bytes: float, group_key: tuple, group: Cluster, sync: Sync) -> tuple[float, float]:
        """(comm seconds, codec seconds) of one bucket: ``bucket_sync``'s first two terms."""
        key = ("bucket", n_bytes, group_key, sync.backend, sync.collective, sync.codec, sync.codec_path)
        try:
            return self._cache[key]  # type: ignore[return-value]
        except KeyError:
            t, codec_s, _ = bucket_sync(n_bytes, group, self._comm_strategy(sync), self.gpu)
            self._cache[key] = (t, codec_s)
            return t, codec_s

    def _encode_s(self, n_bytes: float, group_key: tuple, group: Cluster, sync: Sync) -> float:
        """The codec work before a bucket's collective (``bucket_encode_s``; 0 without a codec)."""
        if sync.codec is None:
            return 0.0
        key = ("encode", n_bytes, group_key, sync.backend, sync.collective, sync.codec, sync.codec_path)
        return self._get(key, lambda: bucket_encode_s(n_bytes, group, self._comm_strategy(sync), self.gpu))

    def _memory(self, layout: Layout, sync: Sync, bounds: tuple[tuple[int, int], ...]) -> float:
        # the codec's buffers are the only part the synchronisation changes (sim.memory._codec_bytes)
        codec = (sync.codec, sync.codec_path, sync.bucket_bytes) if sync.codec and layout.dp > 1 else None
        key = ("memory", layout.tp, layout.pp, layout.dp, layout.batch, layout.micro_batches, layout.schedule, bounds,
               codec, sync.collective == "ps")
        return self._get(key, lambda: max(b.total_bytes for b in memory_per_rank(self.scenario(layout, sync), list(bounds))))

    # -- a candidate ------------------------------------------------------------------------

    def evaluate(self, layout: Layout, sync: Sync) -> Outcome:
        """The candidate's iteration; ``Rejection`` if it does not fit or its library refuses it."""
        from sim.errors import ConfigError

        pipelined = layout.tp > 1 or layout.pp > 1 or layout.micro_batches > 1
        bounds = self._bounds(layout, sync.backend) if pipelined else ((0, len(self.layers)),)
        memory = self._memory(layout, sync, bounds)
        if memory > self.request.memory_limit_bytes:
            raise Rejection("memory", f"{layout.label()}: {memory / 2**30:.1f} GiB per GPU", memory)
        try:
            return self._pipeline(layout, sync, bounds, memory) if pipelined else self._data_parallel(layout, sync, memory)
        except ConfigError as err:
            raise Rejection("library", str(err), memory) from None

    # -- data parallelism, one micro-batch: sim.engine.plan.build_plan + run_fast ------------

    def _data_parallel(self, layout: Layout, sync: Sync, memory: float) -> Outcome:
        request, layers = self.request, self.layers
        times = self._get(("layer_times", layout.batch), lambda: layer_times_s(
            self.workload(layout.batch), self.gpu, request.precision, self.dtype_bytes))
        n = len(layers)
        backward_order = list(range(n - 1, -1, -1))
        per_param = request.strategy.grad_bytes_per_param
        grad_bytes = self._get(("grad_bytes",), lambda: [layers[i].param_count * per_param for i in backward_order])
        groups = self._get(("dp_buckets", sync.bucket_bytes),
                           lambda: assign_buckets(grad_bytes, sync.bucket_bytes, DDP_FIRST_BUCKET_BYTES))
        cluster = self.cluster(layout.gpus)
        comm, codec, encode = [], [], []
        for positions in groups:
            n_bytes = sum(grad_bytes[p] for p in positions)
            t, c, e = 0.0, 0.0, 0.0
            if layout.gpus > 1:
                t, c = self._sync_s(n_bytes, ("all", layout.gpus), cluster, sync)
                e = self._encode_s(n_bytes, ("all", layout.gpus), cluster, sync)
            comm.append(t - e)
            codec.append(c)
            encode.append(e)
        # a calibration's overheads, where the layout has several GPUs / spans nodes (as sim.engine.plan)
        overhead = ((request.strategy.multi_gpu_overhead_s if layout.gpus > 1 else 0.0)
                    + (request.strategy.inter_node_overhead_s if cluster.nodes > 1 else 0.0))
        key = ("fast", layout.batch, sync.bucket_bytes, tuple(comm), tuple(encode), overhead)

        def make():
            self.simulations += 1
            buckets = []
            for index, positions in enumerate(groups):
                buckets.append(Bucket(index, tuple(backward_order[p] for p in positions),
                                      sum(grad_bytes[p] for p in positions)))
            plan = IterationPlan(
                layer_names=tuple(layer.name for layer in layers), fwd_s=tuple(t[0] for t in times),
                bwd_s=tuple(t[1] for t in times), buckets=tuple(buckets), bucket_comm_s=tuple(comm),
                bucket_bytes_by_link=tuple({} for _ in buckets),
                optimizer_s=workload_optimizer_time_s(self.workload(layout.batch), self.request.workload.param_count,
                                                      self.dtype_bytes, self.gpu),
                overlap=request.strategy.overlap, bucket_codec_s=tuple(codec),
                bucket_encode_s=tuple(encode) if any(encode) else (), iteration_overhead_s=overhead)
            r = run_fast(plan, layout.gpus, layout.batch)
            return (r.iteration_time_s, r.compute_time_s, r.exposed_comm_time_s, r.comm_time_s, r.codec_time_s)

        total, compute, exposed, comm_s, codec_s = self._get(key, make)
        return Outcome(total, compute, exposed, 0.0, codec_s, 0.0, 0.0, comm_s, memory)

    # -- layouts with stages, TP or micro-batches: sim.engine.pipeline_plan + run_pipeline ----

    def _passes(self, layout: Layout, backend: str) -> tuple[list[float], list[float], list[float]]:
        """Per layer: one micro-batch's forward and backward on a TP rank (TP allreduces
        included) and the TP allreduce seconds of one pass (build_pipeline_plan's fwd, bwd, tp_comm)."""
        micro = layout.batch // layout.micro_batches
        key = ("passes", layout.gpus, layout.tp, layout.batch if self.measured else 0, micro, backend)

        def make():
            scenario = Scenario(name="plan", workload=self.workload(layout.batch), cluster=self.cluster(layout.gpus),
                                strategy=self.request.strategy)
            times = self._get(("micro_times", layout.batch if self.measured else 0, micro),
                              lambda: micro_batch_times_s(scenario, micro, self.dtype_bytes))
            tp_comm = self._tp_comm(layout, micro, backend)
            tp = layout.tp
            fwd = [f / tp + c for (f, _), c in zip(times, tp_comm, strict=True)]
            bwd = [b / tp + c for (_, b), c in zip(times, tp_comm, strict=True)]
            return fwd, bwd, tp_comm

        return self._get(key, make)

    def _tp_comm(self, layout: Layout, micro: int, backend: str) -> list[float]:
        group = tp_group(self.cluster(layout.gpus), layout.tp)
        strategy = replace(self.request.strategy, backend=backend)
        spec = replace(spec_of(strategy), collective="auto")
        by_shape: dict[tuple[int, float], float] = {}
        out = []
        for layer in self.layers:
            shape = (tp_allreduces_per_pass(layer), layer.activation_elems)
            if shape not in by_shape:
                by_shape[shape] = tp_layer_comm_s(layer, micro, self.dtype_bytes, group, spec)
            out.append(by_shape[shape])
        return out

    def _bounds(self, layout: Layout, backend: str) -> tuple[tuple[int, int], ...]:
        micro = layout.batch // layout.micro_batches
        key = ("bounds", layout.gpus, layout.tp, layout.pp, layout.batch if self.measured else 0, micro, backend)

        def make():
            fwd, bwd, _ = self._passes(layout, backend)
            strategy = replace(self.request.strategy, tp=layout.tp, pp=layout.pp, micro_batches=layout.micro_batches)
            scenario = Scenario(name="plan", workload=self.workload(layout.batch), cluster=self.cluster(layout.gpus),
                                strategy=strategy)
            return tuple(stage_bounds(scenario, [f + b for f, b in zip(fwd, bwd, strict=True)]))

        return self._get(key, make)

    def _stages(self, layout: Layout, backend: str, bounds) -> list[tuple[float, float, float]]:
        """(forward, backward, TP allreduce) seconds of each stage for one micro-batch."""
        micro = layout.batch // layout.micro_batches
        key = ("stages", layout.gpus, layout.tp, layout.batch if self.measured else 0, micro, backend, bounds)

        def make():
            fwd, bwd, tp_comm = self._passes(layout, backend)
            over_s = self.request.strategy.pipeline_overhead_s
            return [(sum(fwd[lo:hi]) + over_s, sum(bwd[lo:hi]) + over_s, 2 * sum(tp_comm[lo:hi])) for lo, hi in bounds]

        return self._get(key, make)

    def _sends(self, layout: Layout, bounds) -> list[float]:
        micro = layout.batch // layout.micro_batches
        key = ("sends", layout.gpus, layout.tp, layout.pp, layout.dp, micro, bounds)

        def make():
            cluster = self.cluster(layout.gpus)
            tp, pp, dp = layout.tp, layout.pp, layout.dp
            out = []
            for s, (lo, hi) in enumerate(bounds):
                send_s = 0.0
                if s < pp - 1:
                    link = stage_boundary_link(cluster, dp, tp, pp, s)
                    out_elems = next((x.activation_elems for x in reversed(self.layers[lo:hi]) if x.activation_elems), 0.0)
                    send_bytes = micro * out_elems * self.dtype_bytes
                    load = 1.0 if link == "intra" else tp * cluster.oversubscription / cluster.nics_per_node
                    send_s = message_time_s(send_bytes / tp, link_of(cluster, link), load)
                out.append(send_s)
            return out

        return self._get(key, make)

    def _optimizer_s(self, lo: int, hi: int, tp: int) -> float:
        def make():
            params = sum(layer.param_count for layer in self.layers[lo:hi])
            return workload_optimizer_time_s(self.request.workload, params / tp, self.dtype_bytes, self.gpu)

        return self._get(("optimizer", lo, hi, tp), make)

    def _stage_sync(self, layout: Layout, sync: Sync, lo: int, hi: int) -> tuple[float, float]:
        """A stage's gradient shard reduced over its DP group in DDP buckets (pipeline_plan._stage_dp_sync)."""
        if layout.dp == 1:
            return 0.0, 0.0
        key = ("stage_sync", layout.gpus, layout.dp, layout.tp, layout.pp, lo, hi, sync)

        def bucket_sizes():
            per_param = self.request.strategy.grad_bytes_per_param / layout.tp
            grads = [self.layers[i].param_count * per_param for i in range(hi - 1, lo - 1, -1)]
            return [sum(grads[i] for i in bucket) for bucket in assign_buckets(grads, sync.bucket_bytes, DDP_FIRST_BUCKET_BYTES)]

        def make():
            sizes = self._get(("stage_buckets", lo, hi, layout.tp, sync.bucket_bytes), bucket_sizes)
            group_key = ("dp", layout.gpus, layout.dp, layout.tp, layout.pp)
            group = self._get(group_key, lambda: dp_group(self.cluster(layout.gpus), layout.dp, layout.tp, layout.pp))
            total_s = codec_s = 0.0
            for n_bytes in sizes:
                t, c = self._sync_s(n_bytes, group_key, group, sync)
                total_s += t
                codec_s += c
            return total_s, codec_s

        return self._get(key, make)

    def _flush_ends(self, schedule: str, m: int, stages: list[tuple[float, float, float]], sends: list[float]) -> tuple[float, ...]:
        """When each stage ends its last backward (run_pipeline's flush), simulated once per shape."""
        key = ("flush", schedule, m, tuple(stages), tuple(sends))

        def make():
            self.simulations += 1
            if self.flush == "replay":
                return flush_ends(schedule, m, [(f, b) for f, b, _ in stages], sends)
            plan = PipelinePlan(
                stages=tuple(StagePlan(index=s, layers=(0, 0), fwd_s=f, bwd_s=b, tp_comm_s=0.0, send_s=send,
                                       send_link="intra", send_bytes=0.0, dp_sync_s=0.0, codec_s=0.0,
                                       dp_bytes_by_link={}, optimizer_s=0.0, param_count=0)
                             for s, ((f, b, _), send) in enumerate(zip(stages, sends, strict=True))),
                micro_batches=m, schedule=schedule, dp=1, tp=1, tp_bytes_by_link={})
            result = run_pipeline(plan, 1, 1)
            ends = {span.lane: span.start_s for span in result.spans if span.name == "optimizer step"}
            return tuple(ends[f"stage{s}"] for s in range(len(stages)))

        return self._get(key, make)

    def _stage_terms(self, layout: Layout, sync: Sync, bounds) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
        """Per stage: gradient sync seconds, codec seconds, optimizer seconds."""
        key = ("terms", layout.gpus, layout.dp, layout.tp, layout.pp, bounds, sync)
        try:
            return self._cache[key]  # type: ignore[return-value]
        except KeyError:
            pass
        syncs = [self._stage_sync(layout, sync, lo, hi) for lo, hi in bounds]
        value = (tuple(d for d, _ in syncs), tuple(c for _, c in syncs),
                 tuple(self._optimizer_s(lo, hi, layout.tp) for lo, hi in bounds))
        self._cache[key] = value
        return value

    def _pipeline(self, layout: Layout, sync: Sync, bounds, memory: float) -> Outcome:
        m = layout.micro_batches
        stages = self._stages(layout, sync.backend, bounds)
        sends = self._sends(layout, bounds)
        flush = self._flush_ends(layout.schedule, m, stages, sends)
        dp_s, codec_s, opt_s = self._stage_terms(layout, sync, bounds)
        # run_pipeline: after its flush a stage syncs its gradients (if any), then steps
        total = max((t + d if d > 0 else t) + o for t, d, o in zip(flush, dp_s, opt_s, strict=True))
        # run_pipeline's accounting: the busiest stage (the first of equals) sets compute
        busiest = max(range(len(stages)), key=lambda s: stages[s][0] + stages[s][1])
        f, b, tp_s = stages[busiest]
        busy = m * (f + b)
        compute = busy + opt_s[busiest]
        bubble = max(flush) - busy
        return Outcome(
            iteration_time_s=total, compute_time_s=compute, exposed_comm_time_s=max(0.0, total - compute - bubble),
            bubble_time_s=bubble, codec_time_s=max(codec_s), tp_comm_time_s=m * tp_s,
            pp_comm_time_s=2 * m * max(sends), comm_time_s=max(dp_s), memory_bytes=memory)
