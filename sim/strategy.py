"""The *how*: parallelism, collective algorithm, buckets, precision."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.cluster import MAX_WORLD_SIZE
from sim.errors import (
    ConfigError,
    reject_unknown_keys,
    require_bool,
    require_choice,
    require_positive,
)
from sim.units import mib_to_bytes, require_size

STRATEGY_KINDS = ("data_parallel", "pipeline", "tensor", "hybrid")
"""data_parallel: tp = pp = 1; pipeline, tensor, hybrid: any dp x tp x pp (the names are labels)."""
SCHEDULES = ("gpipe", "1f1b")
PS_MODES = ("sync", "async")
PS_PLACEMENTS = ("sharded", "round_robin", "mxnet_keys")
"""sharded: every server holds 1/P of every tensor; round_robin: whole layers placed on servers
in turn (TensorFlow's replica_device_setter default, the seeds' first hands-on layout);
mxnet_keys: MXNet's kvstore, arrays of at least MXNET_KVSTORE_BIGARRAY_BOUND elements split over
all servers, smaller ones whole on one server by a hash of their key (sim/costs/ps.py)."""
COLLECTIVES = ("auto", "ring", "tree", "nvls", "hierarchical", "hierarchical_root", "ps", "recursive_doubling",
               "rabenseifner", "halving_doubling")
"""auto: the library's own choice (NCCL's tuner); ring, tree, nvls, recursive_doubling,
rabenseifner: that algorithm of the library (as NCCL_ALGO forces one); hierarchical: Horovod's
intra/inter/intra composition; hierarchical_root: a reduce to one GPU per node, an allreduce
among those, a broadcast back (ChainerMN 2017, Caffe2 + Gloo); halving_doubling: gloo's
recursive halving/doubling; ps: parameter servers (sim/costs/comm.py)."""
BACKEND_NAMES = ("nccl", "gloo", "mpi")
"""Collective libraries (sim/costs/backends/); None in a Strategy: NCCL on GPUs, gloo on CPUs."""
PROTOCOLS = ("auto", "LL", "LL128", "Simple")
PS_LAYOUTS = ("dedicated", "colocated", "node_aggregated", "colocated_aggregated", "centralized")
"""Where parameter servers sit (sim/costs/ps.py PS_LAYOUTS)."""
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
RECOMPUTE = ("none", "selective", "full")
"""Activation recomputation (Korthikanti et al. 2022, arXiv:2205.05198 section 5): none; selective,
the attention core (QK^T, softmax, dropout, AV) recomputed in backward; full, every transformer
block's forward run again from its stored input. Megatron-LM's --recompute-granularity
(selective | full, with --recompute-method uniform over all layers), torchtitan's
activation_checkpoint.mode (none | selective | full)."""
ZERO_STAGES = (0, 1, 2, 3)
"""What is sharded over the data-parallel ranks (Rajbhandari et al. 2020, ZeRO, section 5; DeepSpeed's
zero_optimization.stage): 0 nothing (DDP); 1 the optimizer state (Megatron-LM's
--use-distributed-optimizer); 2 + gradients (FSDP's SHARD_GRAD_OP); 3 + parameters (FSDP's
FULL_SHARD, torchtitan's data_parallel_shard_degree)."""
ATTENTION = ("auto", "flash", "eager")
"""How attention's core runs: flash, FlashAttention's fused kernels (Dao et al. 2022/2023: the s x s
scores are never stored; backward recomputes them, 2.5x the forward's FLOPs instead of 2x); eager,
matmuls and a softmax that store the scores (Korthikanti's 5 a s^2 b bytes per layer); auto, flash
where FlashAttention-2 runs (compute capability 8.0 and newer: Ampere, Ada, Hopper, its README),
else eager."""
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}
"""Bytes per element of each dtype (tf32 is stored as fp32)."""

DDP_DEFAULT_BUCKET_MIB = 25.0
"""PyTorch DistributedDataParallel's default bucket_cap_mb (torch/nn/parallel/distributed.py)."""
MAX_BUCKET_MIB = float(2**30)
"""1 PiB: a bucket this size holds every gradient of any model (Llama 2 70B's fp32 gradients are
257 GiB); the framework presets write 1e9 MiB for 'one buffer' (sim/frameworks.py chainermn). A
bound against typos (issue 29: 1e30 passed)."""
MAX_OVERHEAD_S = 3600.0
"""A per-pass or per-iteration overhead of an hour is a typo (assumed; measured ones are microseconds
to milliseconds: validation/pipeline_bench.py)."""

STRATEGY_KEYS = (
    "kind", "framework", "backend", "protocol", "nccl_socket_nthreads", "nccl_nsocks_perthread", "nccl_version",
    "mpi_library", "mpi_gpu_buffers", "fusion_mib", "cycle_time_ms", "iteration_overhead_ms",
    "multi_gpu_overhead_ms", "inter_node_overhead_ms",
    "comm_slows_compute", "double_buffering", "negotiation", "ps_rpc", "root_collective", "concurrent_collectives",
    "ps_layout", "collective", "ps_servers", "bucket_mib", "first_bucket_mib", "overlap", "precision",
    "codec", "codec_path", "error_feedback", "codec_reduce_ns_per_elem",
    "codec_encode_ns_per_elem", "codec_decode_ns_per_elem",
    "dp", "tp", "pp", "micro_batches", "schedule", "stage_balance", "pipeline_overhead_s",
    "ps_mode", "ps_placement", "staleness_penalty", "max_staleness",
    "sequence_parallel", "cp", "ep", "vpp", "recompute", "zero_stage", "overlap_param_gather", "overlap_grad_reduce",
    "attention", "moe_capacity_factor", "data_loader", "data_workers",
)
LLM_FIELDS = ("sequence_parallel", "cp", "ep", "vpp", "recompute", "zero_stage", "overlap_param_gather",
              "overlap_grad_reduce", "attention", "moe_capacity_factor")
"""The large-model fields (issue 28) and their framework names: sequence_parallel (Megatron-LM
--sequence-parallel), cp (--context-parallel-size; torchtitan context_parallel_degree), ep
(--expert-model-parallel-size; torchtitan expert_parallel_degree), vpp
(--virtual-pipeline-model-parallel-size: model chunks per pipeline rank, the interleaved 1F1B
schedule), recompute (--recompute-granularity; torchtitan activation_checkpoint.mode), zero_stage
(DeepSpeed zero_optimization.stage; Megatron --use-distributed-optimizer = 1; FSDP
sharding_strategy NO_SHARD 0, SHARD_GRAD_OP 2, FULL_SHARD 3), overlap_param_gather (Megatron-LM
--overlap-param-gather: ZeRO-1/2's allgather of the updated parameters overlaps the next forward),
overlap_grad_reduce (Megatron-LM --overlap-grad-reduce: with micro-batches, each bucket's reduction
starts in the last micro-batch's backward),
attention (flash or eager kernels),
moe_capacity_factor (--moe-expert-capacity-factor). docs/model.md#large-models has the mapping."""


@dataclass(frozen=True, kw_only=True)
class Strategy:
    kind: str = "data_parallel"
    framework: str | None = None
    """The training framework whose documented defaults filled the fields below it does not
    leave to the user (sim/frameworks.py FRAMEWORKS); None: plain settings."""
    backend: str | None = None
    """Collective library: nccl | gloo | mpi; None until the scenario resolves it (NCCL on GPUs,
    gloo on CPUs)."""
    collective: str = "auto"
    """Gradient reduction: auto (the library's choice) | ring | tree | nvls | recursive_doubling
    | rabenseifner | hierarchical | ps (COLLECTIVES)."""
    protocol: str | None = None
    """NCCL protocol forced as NCCL_PROTO does (LL, LL128, Simple); None: NCCL's choice."""
    nccl_socket_nthreads: int | None = None
    """NCCL_SOCKET_NTHREADS: helper threads per socket connection; None: NCCL's choice by NIC
    (sim.costs.backends.nccl: AWS 2, GCP 4, else none: the GPU's proxy thread)."""
    nccl_nsocks_perthread: int | None = None
    """NCCL_NSOCKS_PERTHREAD: sockets per helper thread; None: NCCL's choice (AWS 8, else 1)."""
    nccl_version: str | None = None
    """The NCCL release whose tables and mechanisms run, as a minor version ('2.3', '2.21'; the
    keys of sim.costs.backends.nccl_tables.NCCL_VERSIONS); None: the newest modelled. A key of its
    own, not one 'library version' per strategy, because one run may use two libraries (NCCL
    inside a node and MPI between nodes, as ChainerMN and CNTK did in 2017)."""
    mpi_library: str | None = None
    """The MPI implementation and release (sim.costs.backends.mpi.MPI_LIBRARIES: mpich-3,
    openmpi-1.10); None: mpich-3."""
    mpi_gpu_buffers: str | None = None
    """How MPI reaches GPU tensors (sim.costs.backends.mpi.GPU_BUFFERS): host_copy (not
    CUDA-aware: the framework copies through pageable host memory), host_copy_pinned, cuda_aware
    (the library stages them itself); None: host_copy."""
    fusion_bytes: int | None = None
    """Horovod's tensor fusion threshold (HOROVOD_FUSION_THRESHOLD): gradients ready within one
    cycle are fused into batches of at most this size; None: DDP-style buckets."""
    cycle_time_s: float | None = None
    """Horovod's background cycle (HOROVOD_CYCLE_TIME): a fused batch starts at the first cycle
    tick after its gradients are ready; None: as soon as a bucket is full."""
    iteration_overhead_s: float = 0.0
    """A fixed cost per iteration outside the layers (framework bookkeeping, a step's launch)."""
    multi_gpu_overhead_s: float = 0.0
    """A fixed cost per iteration paid by every job of more than one GPU: what runs on one node
    measured beyond the model (``scalebench calibrate --from-runs``); one GPU, and so the
    efficiency's baseline, never pays it."""
    inter_node_overhead_s: float = 0.0
    """A fixed cost per iteration paid, beyond ``multi_gpu_overhead_s``, where the job spans nodes:
    what runs on two or more nodes measured beyond the model (``scalebench calibrate --from-runs``)."""
    comm_slows_compute: bool = True
    """Compute slows while a collective runs beside it on the same GPU: NCCL's kernels hold one SM
    per channel and move every byte through memory several times (sim/costs/contention.py). Only
    matters where a collective overlaps compute; false turns it off."""
    double_buffering: bool = False
    """ChainerMN's double buffering: the gradients of one iteration are reduced during the next
    iteration's compute (one step stale), after backward rather than during it."""
    negotiation: str | None = None
    """How the framework's ranks agree each cycle on the tensors all of them have ready
    (sim/costs/coordination.py NEGOTIATIONS: horovod_p2p, horovod_cached); None: no negotiation."""
    ps_rpc: str | None = None
    """With collective=ps: the RPC layer carrying pushes and pulls (sim/costs/ps.py PS_RPCS:
    grpc_tf0, grpc_tf1_4, ps_lite_zmq), whose per-stream rate caps each worker-server flow;
    None: the transport alone."""
    root_collective: str | None = None
    """With collective=hierarchical_root: the library's algorithm for the allreduce among the node
    roots (a key of the backend's algorithms, e.g. gloo's halving_doubling), or alltoall_sum
    (ChainerMN's: two alltoalls and a sum on the GPU, sim.costs.comm.alltoall_sum_allreduce); None:
    the library's choice."""
    concurrent_collectives: int = 1
    """Gradient reductions in flight at once, each on its own communicator (Caffe2's
    data_parallel_model max_concurrent_distributed_ops, 16 by default): the libraries that honour
    it move them over that many connections per rank (gloo's halving_doubling)."""
    ps_layout: str = "dedicated"
    """With collective=ps: dedicated | colocated | node_aggregated | colocated_aggregated | centralized (PS_LAYOUTS)."""
    ps_servers: int = 1
    """With collective=ps: parameter-server hosts, each holding 1/ps_servers of the model."""
    bucket_bytes: int = mib_to_bytes(DDP_DEFAULT_BUCKET_MIB)
    """Gradients are reduced in buckets of about this size, in backward order (DDP-style)."""
    first_bucket_bytes: int | None = None
    """Cap of the first bucket; None: DDP's default 1 MiB (sim.engine.plan.DDP_FIRST_BUCKET_BYTES).
    torch >= 2.x uses the 1 MiB first bucket only when bucket_cap_mb is left unset; a DDP given
    bucket_cap_mb explicitly (as real/strategies/ddp.py does) caps the first bucket at it too
    (torch/nn/parallel/distributed.py, _BucketCapacityConfig.create)."""
    overlap: bool = True
    """Start a bucket's reduction as soon as it is full, during the remaining backward."""
    precision: str = "fp32"
    """Compute and gradient dtype."""
    codec: str | None = None
    """Wire format of gradients (a key of sim.codecs.CODECS); None: the precision itself."""
    codec_path: str | None = None
    """allreduce | allgather | reduce_scatter; None: what the real harness does for the codec."""
    error_feedback: bool = False
    codec_reduce_ns_per_elem: float | None = None
    """Override of the codec's per-element local-sum cost (set by calibration)."""
    codec_encode_ns_per_elem: float | None = None
    """Measured encode cost per gradient element (replaces the memory roofline; set by
    calibration, real/codec_bench.py); None: the roofline."""
    codec_decode_ns_per_elem: float | None = None
    """Measured decode (+ add into the accumulator) cost per element per decoded copy
    (replaces the roofline); None: the roofline."""
    dp: int | None = None
    """Data-parallel degree; None: world_size / (tp x pp)."""
    tp: int = 1
    """Tensor-parallel degree (Megatron-style), placed inside a node first."""
    pp: int = 1
    """Pipeline stages."""
    micro_batches: int = 1
    """Micro-batches per iteration per pipeline; must divide the batch."""
    schedule: str = "1f1b"
    """Pipeline schedule: gpipe (all forwards, then all backwards) or 1f1b."""
    stage_balance: str = "time"
    """How layers are cut into pipeline stages (sim/costs/pipeline.py STAGE_BALANCES): time, flops
    or params, always between the model's top-level modules; the real harness cuts the same way."""
    pipeline_overhead_s: float = 0.0
    """The pipelining framework's own cost per micro-batch pass (forward or backward) per stage,
    beside the layers' compute and the activation send (set by calibration; sim/engine/pipeline_plan.py)."""
    ps_mode: str = "sync"
    """With collective=ps: sync (all workers' gradients per step) or async (one process per worker)."""
    ps_placement: str = "sharded"
    staleness_penalty: str = "inverse"
    """Statistical efficiency of a stale update (sim/costs/staleness.py): inverse = 1/max(1, staleness)."""
    max_staleness: int | None = None
    """Asynchronous PS: a worker may run at most this many steps ahead of the slowest (stale
    synchronous parallel, Ho et al. 2013); None: unbounded."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism (Korthikanti et al. 2022 section 4.2.2): with tp > 1 the
    norms and dropouts run on 1/tp of the sequence, and each tensor-parallel allreduce becomes a
    reduce-scatter and an allgather of the same activation."""
    cp: int = 1
    """Context-parallel degree: each of cp ranks holds 1/cp of every sequence; attention passes
    the key/value blocks around a ring (ring attention), overlapped with attention's compute."""
    ep: int = 1
    """Expert-parallel degree (mixture-of-experts workloads): each of ep data-parallel ranks holds
    1/ep of the experts; tokens reach them by all-to-all (dispatch and combine)."""
    vpp: int = 1
    """Virtual pipeline stages (model chunks) per pipeline rank: the interleaved 1F1B schedule of
    Narayanan et al. 2021 (section 2.2.2) when > 1: bubble 1/vpp of 1F1B's, vpp x the sends."""
    recompute: str = "none"
    """Activation recomputation: none | selective | full (RECOMPUTE)."""
    zero_stage: int = 0
    """ZeRO / FSDP sharding over the data-parallel ranks: 0-3 (ZERO_STAGES)."""
    overlap_grad_reduce: bool = False
    """With micro-batches (the pipeline path): each gradient bucket's reduction (allreduce or ZeRO's
    reduce-scatter) starts as the last micro-batch's backward finishes it, as Megatron-LM runs it with
    --overlap-grad-reduce (sim.engine.plan.overlapped_reduce_s); False: the stage reduces after its
    flush. Without micro-batches ``overlap`` governs."""
    overlap_param_gather: bool = False
    """ZeRO-1/2: the allgather of the updated parameter shards overlaps the next forward bucket by
    bucket, as Megatron-LM's distributed optimizer runs it with --overlap-param-gather
    (sim.engine.plan.overlapped_gather_s); False: after the step, exposed (DeepSpeed stage 1/2)."""
    attention: str = "auto"
    """Attention kernels: auto | flash | eager (ATTENTION)."""
    moe_capacity_factor: float | None = None
    """Mixture of experts: each expert computes capacity_factor x its balanced share of tokens
    (padding included); None: dropless (Megatron-LM's default), balanced routing assumed."""
    data_loader: str | None = None
    """What decodes real images on the host (sim.costs.input_pipeline.LOADERS); None: the
    framework's, else PyTorch's DataLoader (DEFAULT_LOADER). Used only with real data
    (workload.data)."""
    data_workers: int | None = None
    """Worker processes or threads per loader (PyTorch's num_workers, Chainer's n_processes, MXNet's
    preprocess_threads); None: the loader's default."""

    @property
    def grad_bytes_per_param(self) -> int:
        return DTYPE_BYTES[self.precision]

    @property
    def model_parallel(self) -> bool:
        return self.tp > 1 or self.pp > 1 or self.cp > 1 or self.ep > 1

    @property
    def model_parallel_size(self) -> int:
        """Ranks that hold one copy of the model together: tp x cp x pp (ep lives inside dp)."""
        return self.tp * self.cp * self.pp

    def dp_degree(self, world_size: int) -> int:
        return self.dp if self.dp is not None else max(1, world_size // self.model_parallel_size)

    def resolved_codec_path(self) -> str | None:
        from sim.codecs import CODECS, default_path

        if self.codec is None:
            return None
        return self.codec_path or default_path(CODECS[self.codec])


def strategy_from_dict(spec: dict[str, Any] | None, where: str = "strategy") -> Strategy:
    from sim.costs.input_pipeline import LOADERS
    from sim.costs.pipeline import STAGE_BALANCES
    from sim.costs.staleness import STALENESS_PENALTIES
    from sim.frameworks import apply_framework

    spec = spec or {}
    if not isinstance(spec, dict):
        raise ConfigError(where, spec, "a mapping with keys " + ", ".join(STRATEGY_KEYS))
    reject_unknown_keys(where, spec, STRATEGY_KEYS)
    spec = apply_framework(spec, where)
    overlap = require_bool(f"{where}.overlap", spec.get("overlap", True))
    bucket_mib = require_size(f"{where}.bucket_mib", spec.get("bucket_mib", DDP_DEFAULT_BUCKET_MIB), "MiB",
                              maximum=MAX_BUCKET_MIB, why="1 PiB: one bucket whatever the model")
    first_mib = spec.get("first_bucket_mib")
    if first_mib is not None:
        first_mib = require_size(f"{where}.first_bucket_mib", first_mib, "MiB", maximum=MAX_BUCKET_MIB,
                                 why="1 PiB: one bucket whatever the model")
    codec, codec_path = _codec_fields(spec, where)
    error_feedback = require_bool(f"{where}.error_feedback", spec.get("error_feedback", False))
    reduce_ns = spec.get("codec_reduce_ns_per_elem")
    if reduce_ns is not None:
        reduce_ns = float(require_positive(f"{where}.codec_reduce_ns_per_elem", reduce_ns, allow_zero=True))
    encode_ns, decode_ns = (_optional_ns(spec, where, f"codec_{k}_ns_per_elem") for k in ("encode", "decode"))
    dp = spec.get("dp")
    if dp is not None:
        dp = require_positive(f"{where}.dp", dp, integer=True)
    kind = require_choice(f"{where}.kind", spec.get("kind", "data_parallel"), STRATEGY_KINDS)
    tp = require_positive(f"{where}.tp", spec.get("tp", 1), integer=True)
    pp = require_positive(f"{where}.pp", spec.get("pp", 1), integer=True)
    if kind == "data_parallel" and (tp > 1 or pp > 1):
        raise ConfigError(f"{where}.kind", kind, f"pipeline, tensor or hybrid when tp * pp > 1 (tp={tp}, pp={pp})")
    backend = spec.get("backend")
    if backend is not None:
        backend = require_choice(f"{where}.backend", backend, BACKEND_NAMES)
    protocol = require_choice(f"{where}.protocol", spec.get("protocol", "auto"), PROTOCOLS)
    nthreads, nsocks = nccl_socket_fields(spec.get("nccl_socket_nthreads"), spec.get("nccl_nsocks_perthread"),
                                          (f"{where}.nccl_socket_nthreads", f"{where}.nccl_nsocks_perthread"))
    nccl_version, mpi_library, mpi_gpu_buffers = library_fields(spec, where)
    fusion_mib = spec.get("fusion_mib")
    cycle_ms = spec.get("cycle_time_ms")
    slows = require_bool(f"{where}.comm_slows_compute", spec.get("comm_slows_compute", True))
    double = require_bool(f"{where}.double_buffering", spec.get("double_buffering", False))
    negotiation = spec.get("negotiation")
    if negotiation is not None:
        from sim.costs.coordination import NEGOTIATIONS

        negotiation = require_choice(f"{where}.negotiation", negotiation, NEGOTIATIONS)
    ps_rpc = spec.get("ps_rpc")
    if ps_rpc is not None:
        from sim.costs.ps import PS_RPCS

        ps_rpc = require_choice(f"{where}.ps_rpc", ps_rpc, PS_RPCS)
    root_collective = spec.get("root_collective")
    if root_collective is not None:  # checked against the library's algorithms once it is resolved
        from sim.costs.backends import BACKENDS
        from sim.costs.comm import COMPOSED_ROOT_COLLECTIVES

        root_collective = require_choice(f"{where}.root_collective", root_collective,
                                         sorted({a for b in BACKENDS.values() for a in b.algorithms}
                                                | set(COMPOSED_ROOT_COLLECTIVES)))
    return Strategy(
        kind=kind,
        framework=spec.get("framework"),
        backend=backend,
        protocol=None if protocol == "auto" else protocol,
        nccl_socket_nthreads=nthreads,
        nccl_nsocks_perthread=nsocks,
        nccl_version=nccl_version,
        mpi_library=mpi_library,
        mpi_gpu_buffers=mpi_gpu_buffers,
        fusion_bytes=None if fusion_mib is None else max(1, mib_to_bytes(require_size(
            f"{where}.fusion_mib", fusion_mib, "MiB", maximum=MAX_BUCKET_MIB, why="1 PiB: one buffer whatever the model"))),
        cycle_time_s=None if cycle_ms is None else float(require_positive(
            f"{where}.cycle_time_ms", cycle_ms, allow_zero=True, maximum=1e3 * MAX_OVERHEAD_S, why="an hour")) / 1e3,
        iteration_overhead_s=float(require_positive(f"{where}.iteration_overhead_ms", spec.get("iteration_overhead_ms", 0.0),
                                     allow_zero=True, maximum=1e3 * MAX_OVERHEAD_S, why="an hour")) / 1e3,
        multi_gpu_overhead_s=float(require_positive(f"{where}.multi_gpu_overhead_ms",
                                                    spec.get("multi_gpu_overhead_ms", 0.0), allow_zero=True,
                                                    maximum=1e3 * MAX_OVERHEAD_S, why="an hour")) / 1e3,
        inter_node_overhead_s=float(require_positive(f"{where}.inter_node_overhead_ms",
                                                     spec.get("inter_node_overhead_ms", 0.0), allow_zero=True,
                                                     maximum=1e3 * MAX_OVERHEAD_S, why="an hour")) / 1e3,
        comm_slows_compute=slows,
        double_buffering=double,
        negotiation=negotiation,
        ps_rpc=ps_rpc,
        root_collective=root_collective,
        concurrent_collectives=require_positive(f"{where}.concurrent_collectives", spec.get("concurrent_collectives", 1),
                                                integer=True, maximum=1024, why="communicators in flight"),
        ps_layout=require_choice(f"{where}.ps_layout", spec.get("ps_layout", "dedicated"), PS_LAYOUTS),
        collective=require_choice(f"{where}.collective", spec.get("collective", "auto"), COLLECTIVES),
        ps_servers=require_positive(f"{where}.ps_servers", spec.get("ps_servers", 1), integer=True, maximum=MAX_WORLD_SIZE,
                                    why="hosts, as many as the largest cluster has GPUs"),
        bucket_bytes=max(1, mib_to_bytes(bucket_mib)),
        first_bucket_bytes=None if first_mib is None else max(1, mib_to_bytes(first_mib)),
        overlap=overlap,
        precision=require_choice(f"{where}.precision", spec.get("precision", "fp32"), PRECISIONS),
        codec=codec,
        codec_path=codec_path,
        error_feedback=error_feedback,
        codec_reduce_ns_per_elem=reduce_ns,
        codec_encode_ns_per_elem=encode_ns,
        codec_decode_ns_per_elem=decode_ns,
        dp=dp,
        tp=tp,
        pp=pp,
        micro_batches=require_positive(f"{where}.micro_batches", spec.get("micro_batches", 1), integer=True),
        schedule=require_choice(f"{where}.schedule", spec.get("schedule", "1f1b"), SCHEDULES),
        stage_balance=require_choice(f"{where}.stage_balance", spec.get("stage_balance", "time"), STAGE_BALANCES),
        pipeline_overhead_s=float(require_positive(f"{where}.pipeline_overhead_s", spec.get("pipeline_overhead_s", 0.0),
                                                   allow_zero=True, maximum=MAX_OVERHEAD_S, why="an hour per pass")),
        ps_mode=require_choice(f"{where}.ps_mode", spec.get("ps_mode", "sync"), PS_MODES),
        ps_placement=require_choice(f"{where}.ps_placement", spec.get("ps_placement", "sharded"), PS_PLACEMENTS),
        max_staleness=(None if spec.get("max_staleness") is None else
                       require_positive(f"{where}.max_staleness", spec["max_staleness"], integer=True, allow_zero=True)),
        staleness_penalty=require_choice(f"{where}.staleness_penalty", spec.get("staleness_penalty", "inverse"),
                                         STALENESS_PENALTIES),
        **_llm_fields(spec, where),
        data_loader=None if spec.get("data_loader") is None else require_choice(
            f"{where}.data_loader", spec["data_loader"], LOADERS),
        data_workers=None if spec.get("data_workers") is None else require_positive(
            f"{where}.data_workers", spec["data_workers"], integer=True, maximum=4096, why="workers of one loader"),
    )


def library_fields(spec: dict[str, Any], where: str = "strategy",
                   names: dict[str, str] | None = None) -> tuple[str | None, str | None, str | None]:
    """strategy.nccl_version, mpi_library, mpi_gpu_buffers, each optional and one of the values
    the libraries' models know (a version as a string, '2.3'), checked under the names ``names``
    gives (a command's flags) or ``where.key``."""
    def name(key: str) -> str:
        return (names or {}).get(key, f"{where}.{key}")

    from sim.costs.backends.mpi import GPU_BUFFERS, MPI_LIBRARIES
    from sim.costs.backends.nccl_tables import NCCL_VERSIONS, known_versions

    version = spec.get("nccl_version")
    if version is not None and (not isinstance(version, str) or version not in NCCL_VERSIONS):
        quote = " (quoted: YAML reads 2.20 as the number 2.2)" if isinstance(version, (int, float)) else ""
        raise ConfigError(name("nccl_version"), version,
                          f"an NCCL version the model knows, as a string{quote}: " + ", ".join(known_versions()))
    library = spec.get("mpi_library")
    if library is not None:
        library = require_choice(name("mpi_library"), library, tuple(MPI_LIBRARIES))
    buffers = spec.get("mpi_gpu_buffers")
    if buffers is not None:
        buffers = require_choice(name("mpi_gpu_buffers"), buffers, GPU_BUFFERS)
    return version, library, buffers
def _llm_fields(spec: dict[str, Any], where: str) -> dict[str, Any]:
    """The large-model fields, each alone (check_degrees and sim.config check them together)."""
    sp = require_bool(f"{where}.sequence_parallel", spec.get("sequence_parallel", False))
    stage = spec.get("zero_stage", 0)
    if isinstance(stage, bool) or stage not in ZERO_STAGES:
        raise ConfigError(f"{where}.zero_stage", stage, "0, 1, 2 or 3 (DeepSpeed's ZeRO stages; FSDP FULL_SHARD is 3, "
                          "SHARD_GRAD_OP 2, Megatron's distributed optimizer 1)")
    factor = spec.get("moe_capacity_factor")
    if factor is not None:
        factor = float(require_positive(f"{where}.moe_capacity_factor", factor))
    overlap_gather = require_bool(f"{where}.overlap_param_gather", spec.get("overlap_param_gather", False))
    overlap_reduce = require_bool(f"{where}.overlap_grad_reduce", spec.get("overlap_grad_reduce", False))
    return {
        "sequence_parallel": sp,
        "cp": require_positive(f"{where}.cp", spec.get("cp", 1), integer=True),
        "ep": require_positive(f"{where}.ep", spec.get("ep", 1), integer=True),
        "vpp": require_positive(f"{where}.vpp", spec.get("vpp", 1), integer=True),
        "recompute": require_choice(f"{where}.recompute", spec.get("recompute", "none"), RECOMPUTE),
        "zero_stage": stage,
        "overlap_param_gather": overlap_gather,
        "overlap_grad_reduce": overlap_reduce,
        "attention": require_choice(f"{where}.attention", spec.get("attention", "auto"), ATTENTION),
        "moe_capacity_factor": factor,
    }


NCCL_SOCKET_MAX_THREADS = 16
NCCL_SOCKET_MAX_SOCKETS = 64
"""src/transport/net_socket.cc MAX_THREADS and MAX_SOCKETS: NCCL clamps NCCL_SOCKET_NTHREADS to 16
and NCCL_NSOCKS_PERTHREAD to 64 / threads (with a warning); here a value past them is refused."""


def nccl_socket_fields(nthreads: Any, nsocks: Any, fields: tuple[str, str]) -> tuple[int | None, int | None]:
    """NCCL_SOCKET_NTHREADS (1-16) and NCCL_NSOCKS_PERTHREAD (their product at most 64), each
    optional, checked under the names ``fields`` (a config's keys or a command's flags)."""
    if nthreads is not None:
        nthreads = require_positive(fields[0], nthreads, integer=True, maximum=NCCL_SOCKET_MAX_THREADS,
                                    why="NCCL's MAX_THREADS (net_socket.cc)")
    if nsocks is not None:
        most = NCCL_SOCKET_MAX_SOCKETS // (nthreads or 1)
        nsocks = require_positive(fields[1], nsocks, integer=True, maximum=most,
                                  why=f"NCCL's MAX_SOCKETS {NCCL_SOCKET_MAX_SOCKETS} / {nthreads or 1} threads (net_socket.cc)")
    return nthreads, nsocks


def _optional_ns(spec: dict[str, Any], where: str, key: str) -> float | None:
    """A calibrated per-element cost in ns (finite, >= 0), only with a codec; None: the roofline."""
    value = spec.get(key)
    if value is None:
        return None
    if spec.get("codec") is None:
        raise ConfigError(f"{where}.{key}", value, "only with a codec (strategy.codec)")
    value = float(require_positive(f"{where}.{key}", value, allow_zero=True))
    if value == float("inf"):
        raise ConfigError(f"{where}.{key}", value, "a finite number of nanoseconds >= 0")
    return value


def _codec_fields(spec: dict[str, Any], where: str) -> tuple[str | None, str | None]:
    from sim.codecs import CODEC_PATHS, CODECS

    codec = spec.get("codec")
    if codec is None:
        if spec.get("codec_path") is not None:
            raise ConfigError(f"{where}.codec_path", spec["codec_path"], "only with a codec (strategy.codec)")
        return None, None
    codec = require_choice(f"{where}.codec", codec, CODECS)
    path = spec.get("codec_path")
    if path is None:
        return codec, None
    path = require_choice(f"{where}.codec_path", path, CODEC_PATHS)
    if path == "allreduce" and not CODECS[codec].summable:
        summable = [name for name, c in CODECS.items() if c.summable]
        raise ConfigError(f"{where}.codec_path", path,
                          f"allgather or reduce_scatter for {codec} (allreduce sums in place only " + ", ".join(summable) + ")")
    return codec, path


def check_degrees(strategy: Strategy, world_size: int, n_layers: int, batch_size: int, where: str = "strategy") -> None:
    """dp x tp x pp = world size, pp <= layers, micro-batches divide the batch: one error naming every term."""
    dp = strategy.dp_degree(world_size)
    tp, pp, cp = strategy.tp, strategy.pp, strategy.cp
    if dp * cp * tp * pp != world_size:
        if cp == 1:
            raise ConfigError(f"{where}.dp * tp * pp", f"{dp} * {tp} * {pp} = {dp * tp * pp}",
                              f"the world size {world_size} (cluster.gpus)")
        raise ConfigError(f"{where}.dp * cp * tp * pp", f"{dp} * {cp} * {tp} * {pp} = {dp * cp * tp * pp}",
                          f"the world size {world_size} (cluster.gpus)")
    if pp > n_layers:
        raise ConfigError(f"{where}.pp", pp, f"at most the workload's {n_layers} layers (one stage needs a layer)")
    m = strategy.micro_batches
    if batch_size % m:
        raise ConfigError(f"{where}.micro_batches", m,
                          f"a divisor of workload.batch_size={batch_size} ({batch_size} % {m} = {batch_size % m})")
    if strategy.ps_mode == "async" and strategy.collective != "ps":
        raise ConfigError(f"{where}.ps_mode", "async", f"only with collective=ps (got collective={strategy.collective})")


def check_large_model(strategy: Strategy, workload: Any, world_size: int, where: str = "strategy") -> None:
    """The large-model fields against the workload and the layout, one error naming the field and
    what it takes (``workload``: a sim.workload.Workload; its ``architecture`` is the transformer's)."""
    arch = workload.architecture
    dp, pp, m = strategy.dp_degree(world_size), strategy.pp, strategy.micro_batches
    transformer = "a transformer workload (a zoo transformer, seq_len or architecture, or the decoder)"
    if strategy.cp > 1:
        if arch is None:
            raise ConfigError(f"{where}.cp", strategy.cp, f"1 for {workload.name} (context parallelism splits the "
                              f"sequence of {transformer})")
        if arch.seq_len % (2 * strategy.cp):
            raise ConfigError(f"{where}.cp", strategy.cp, f"a cp with 2 x cp dividing seq_len={arch.seq_len} (Megatron-LM "
                              "cuts each sequence into 2 x cp chunks so that causal attention balances over the ring)")
        if strategy.attention == "eager":
            raise ConfigError(f"{where}.attention", "eager", "flash or auto with cp > 1 (ring attention runs "
                              "FlashAttention's kernels block by block: Transformer Engine's context parallelism)")
    if strategy.ep > 1:
        if arch is None or not arch.moe:
            raise ConfigError(f"{where}.ep", strategy.ep, f"1 for {workload.name} (expert parallelism needs a "
                              "mixture-of-experts workload: architecture.experts > 0)")
        if arch.experts % strategy.ep:
            raise ConfigError(f"{where}.ep", strategy.ep, f"a divisor of architecture.experts={arch.experts} "
                              "(each expert-parallel rank holds experts / ep of them)")
        if dp % strategy.ep:
            raise ConfigError(f"{where}.ep", strategy.ep, f"a divisor of dp={dp} (expert-parallel ranks are "
                              "data-parallel ranks that split the experts)")
    if arch is not None and arch.moe and strategy.tp > 1 and not strategy.sequence_parallel:
        raise ConfigError(f"{where}.sequence_parallel", False, "true with tp > 1 for a mixture of experts (Megatron-LM "
                          "refuses MoE with tensor parallelism without it in training: moe_layer.py)")
    if strategy.moe_capacity_factor is not None and (arch is None or not arch.moe):
        raise ConfigError(f"{where}.moe_capacity_factor", strategy.moe_capacity_factor,
                          f"absent for {workload.name} (only mixture-of-experts workloads route tokens)")
    if strategy.vpp > 1:
        if pp == 1:
            raise ConfigError(f"{where}.vpp", strategy.vpp, "1 with pp = 1 (virtual stages interleave a pipeline: pp > 1)")
        if strategy.schedule != "1f1b":
            raise ConfigError(f"{where}.schedule", strategy.schedule, "1f1b with vpp > 1 (the interleaved schedule is 1F1B's)")
        if m % pp:
            raise ConfigError(f"{where}.micro_batches", m, f"a multiple of pp={pp} with vpp > 1 (Megatron-LM's "
                              "interleaved schedule runs micro-batches in groups of pp)")
        if arch is not None and arch.layers % (pp * strategy.vpp):
            raise ConfigError(f"{where}.vpp", strategy.vpp, f"a vpp with pp x vpp = {pp} x vpp dividing the "
                              f"{arch.layers} transformer layers (each model chunk holds layers / (pp x vpp))")
    if strategy.recompute != "none" and arch is None:
        raise ConfigError(f"{where}.recompute", strategy.recompute, f"none for {workload.name} (recomputation "
                          f"checkpoints the blocks of {transformer})")
    if strategy.overlap_param_gather and strategy.zero_stage not in (1, 2):
        raise ConfigError(f"{where}.overlap_param_gather", True, f"false with zero_stage={strategy.zero_stage} (only "
                          "ZeRO-1/2 gather the updated parameters after the step: Megatron-LM's distributed optimizer)")
    if strategy.overlap_grad_reduce and strategy.zero_stage >= 3:
        raise ConfigError(f"{where}.overlap_grad_reduce", True, "false with zero_stage=3 (ZeRO-3 reduce-scatters each "
                          "unit's gradients in its backward already)")
    if strategy.zero_stage:
        for field, value, why in (("collective", strategy.collective == "ps", "parameter servers keep the state"),
                                  ("codec", strategy.codec is not None, "ZeRO reduce-scatters gradients in the compute precision"),
                                  ("fusion_mib", strategy.fusion_bytes is not None, "Horovod's fusion is an allreduce"),
                                  ("double_buffering", strategy.double_buffering, "ChainerMN's reduction is an allreduce")):
            if value:
                raise ConfigError(f"{where}.zero_stage", strategy.zero_stage, f"0 with {field}={getattr(strategy, field, None)!r} ({why})")


def strategy_notes(strategy: Strategy, world_size: int) -> list[str]:
    """Settings that are accepted but change nothing here (said once, not refused)."""
    notes = []
    dp = strategy.dp_degree(world_size)
    if strategy.zero_stage and dp == 1:
        notes.append(f"strategy.zero_stage {strategy.zero_stage} with dp = 1 shards over one rank: nothing is sharded (a no-op)")
    if strategy.sequence_parallel and strategy.tp == 1:
        notes.append("strategy.sequence_parallel with tp = 1 splits nothing (a no-op, as Megatron-LM turns it off)")
    return notes
