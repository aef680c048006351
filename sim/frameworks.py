"""Training frameworks as presets of documented mechanisms.

``strategy.framework: NAME`` fills the strategy fields the user leaves out with that
framework's defaults; anything the user gives wins. Every default comes from the framework's
documentation or source, never from a result to match:
- pytorch_ddp: gradient buckets of bucket_cap_mb = 25 MiB, the first capped at 1 MiB
  (torch/nn/parallel/distributed.py, _DEFAULT_FIRST_BUCKET_BYTES), each reduced as soon as it
  fills, during backward; NCCL's kernels run beside backward's on the GPU.
- horovod: tensor fusion (HOROVOD_FUSION_THRESHOLD 64 MB) and a background cycle
  (HOROVOD_CYCLE_TIME 5 ms): every cycle the tensors all ranks have ready are fused into one
  allreduce (docs/tensor-fusion.rst; horovod/common/operations.cc RunLoopOnce); these were the
  defaults until v0.21.0, whose release notes raised them to 128 MB and 1 ms (horovod_0.21).
  As the 2017 source does it (sim/costs/fusion.py): batches never exceed the threshold and never
  skip a tensor; a fused batch is copied into and out of the fusion buffer on Horovod's own
  stream; the background thread waits for each batch's data (WAIT_FOR_DATA) but not for its
  allreduce, which a detached finalizer thread completes, so batches queue on that one stream.
- chainermn_2017: ChainerMN 1.0's multi-node optimizer allreduces all gradients, packed into
  one buffer, after backward has finished (chainermn/optimizers.py _MultiNodeOptimizer.update;
  pure_nccl_communicator.py packs the parameters into one GPU buffer): no overlap. Its
  HierarchicalCommunicator (the post's 'MPI inter-node (CUDA-aware) + NCCL intra-node'): an NCCL
  reduce to each node's first GPU, among those an allreduce built of two MPI_Alltoall calls on GPU
  buffers and a sum on the GPU (root_collective alltoall_sum: sim.costs.comm), an NCCL broadcast.
  NCCL 1.3 (the post is of February 2017; NCCL 2.0 came in June; ChainerMN 1.0 tested 1.3.4 and
  2.0.4). The MPI is CUDA-aware (its installation guide requires it: docs/source/installation/
  guide.rst at v1.0.0); which one the post ran it does not say: Open MPI 1.10 assumed (the guide's
  first example; 1.10.3 is among the versions ChainerMN 1.0 tested and the one the same post's
  CNTK ran), built --with-cuda: its alltoall on device buffers is pipelined through host
  fragments (no reduction, so not coll/cuda's whole-buffer copy).
- chainermn: ChainerMN >= 1.2 with double_buffering=True: the packed allreduce of one
  iteration runs during the next iteration's forward and backward (one-step-stale gradients;
  chainermn/optimizers.py _DoubleBufferingOptimizer).
- tf_ps: TensorFlow's parameter servers on their own hosts (tf.train.replica_device_setter,
  between-graph replication): every variable's shard pushed and pulled over gRPC (TCP).
- tf_ps_0.12: TensorFlow 0.12 as the ChainerMN 2017 comparison ran it: parameter-server tasks on
  the worker nodes (the post: 'Parameter servers are different processes on the same nodes as
  those of workers'; set ``ps_servers``, n-1 there), each variable whole on one task in turn
  (replica_device_setter's round-robin), one RecvTensor per variable and direction over TF 0.12's
  gRPC, whose copies cap a stream near 569 MB/s (sim/costs/ps.py PS_RPCS grpc_tf0).
- mxnet_ps: MXNet 0.9's dist_sync kvstore (src/kvstore/kvstore_dist.h): one worker per machine
  sums its GPUs' gradients (KVStoreLocal's Reduce), then pushes each key to the servers, one
  server per machine (tools/launch.py starts as many servers as workers); a key of at least
  MXNET_KVSTORE_BIGARRAY_BOUND = 10^6 elements split over every server, a smaller one whole on
  server (key x 9973) mod P; pushes and pulls over ps-lite's ZeroMQ TCP sockets, key by key as
  backward produces them (its engine's priorities: overlap).
- cntk: CNTK 2.0 (Jan 2017) data-parallel SGD (Source/SGDLib/SimpleDistGradAggregator.h):
  after backward (AggregateGradients is called once the minibatch's gradients exist), one
  MPI_Iallreduce per gradient matrix over all ranks (every GPU an MPI rank: flat), NCCL only
  inside one node (NcclComm: NCCL 1; the post: 'MPI allreduce (OpenMPI 1.10.3) + NCCL
  intra-node'; the one-node path is not modelled: MPI there too). Across nodes each gradient is
  copied with cudaMemcpy into pinned host buffers (CUDAPageLockedMemAllocator; ShouldCopyDataToCPU
  unless NCCL or GPUDirect RDMA, which needs a USE_CUDA_GDR build) and reduced by MPI on host
  memory: mpi_gpu_buffers host_copy_pinned, mpi_library openmpi-1.10 (the post; CNTK's official
  GPU Dockerfile, which the post followed, builds Open MPI 1.10.3 with a bare ./configure: not
  CUDA-aware).
- caffe2_gloo: Caffe2 + Gloo as Goyal et al. 2017 ran ResNet-50 on 352 GPUs (section 4): per
  server a reduce of the 8 GPUs' gradients, a recursive halving/doubling allreduce among the
  servers (gloo allreduce_halving_doubling), a broadcast back; 'pipelined with backprop' (each
  gradient blob reduced as soon as backward produced it: one bucket per layer), up to 16 of them
  in flight on their own communicators (caffe2/python/data_parallel_model.py Parallelize,
  max_concurrent_distributed_ops=16).
- data_loader: what decodes real images where the workload reads them (sim/costs/input_pipeline.py
  LOADERS): each framework's ImageNet example's loader (PyTorch's DataLoader, Chainer's
  MultiprocessIterator, MXNet's ImageRecordIter, TensorFlow's queue runners); CNTK's and Caffe2's
  C++ readers as a thread pool; Horovod names none (it runs under TensorFlow or PyTorch).
- megatron_lm_2021: Megatron-LM as of its SC'21 paper (aed2f75e, April 2021): LocalDDP, the default
  --DDP-impl, coalesces every fp16 gradient into one buffer and allreduces it after the whole
  forward-backward schedule, not overlapped (megatron/training.py train_step,
  'backward-params-all-reduce'; megatron/model/distributed.py allreduce_gradients); the optimizer
  step follows. Its layouts (tensor, pipeline, interleaving, recomputation) are the strategy's own.
- horovod (above) negotiates every cycle point to point with its coordinator (Horovod
  0.9-0.13.2: sim/costs/coordination.py horovod_p2p); horovod_0.21 agrees through its response
  cache (>= 0.16.2: horovod_cached).
"""

from __future__ import annotations

from typing import Any

from sim.errors import ConfigError, require_choice

FRAMEWORKS: dict[str, dict[str, Any]] = {
    "pytorch_ddp": {"bucket_mib": 25.0, "first_bucket_mib": 1.0, "overlap": True, "comm_slows_compute": True,
                    "data_loader": "pytorch_dataloader"},
    "horovod": {"fusion_mib": 64.0, "cycle_time_ms": 5.0, "overlap": True, "comm_slows_compute": True,
                "negotiation": "horovod_p2p"},
    "horovod_0.21": {"fusion_mib": 128.0, "cycle_time_ms": 1.0, "overlap": True, "comm_slows_compute": True,
                     "negotiation": "horovod_cached"},
    "chainermn_2017": {"bucket_mib": 1e9, "first_bucket_mib": 1e9, "overlap": False, "collective": "hierarchical_root",
                       "backend": "mpi", "root_collective": "alltoall_sum", "mpi_library": "openmpi-1.10",
                       "mpi_gpu_buffers": "cuda_aware", "nccl_version": "1.3", "data_loader": "chainer_multiprocess"},
    "chainermn": {"bucket_mib": 1e9, "overlap": False, "double_buffering": True, "comm_slows_compute": True,
                  "data_loader": "chainer_multiprocess"},
    "tf_ps": {"collective": "ps", "ps_layout": "dedicated", "overlap": True, "data_loader": "tf_queue_runners"},
    "tf_ps_0.12": {"collective": "ps", "ps_layout": "colocated", "ps_placement": "round_robin", "ps_rpc": "grpc_tf0",
                   "overlap": True, "data_loader": "tf_queue_runners"},
    "mxnet_ps": {"collective": "ps", "ps_layout": "colocated_aggregated", "ps_placement": "mxnet_keys",
                 "ps_rpc": "ps_lite_zmq", "overlap": True, "bucket_mib": 1e-6, "first_bucket_mib": 1e-6,
                 "data_loader": "mxnet_image_record_iter"},
    "cntk": {"backend": "mpi", "bucket_mib": 1e-6, "first_bucket_mib": 1e-6, "overlap": False,
             "mpi_library": "openmpi-1.10", "mpi_gpu_buffers": "host_copy_pinned", "data_loader": "cpp_thread_pool"},
    "megatron_lm_2021": {"bucket_mib": 1e9, "first_bucket_mib": 1e9, "overlap": False},
    "caffe2_gloo": {"collective": "hierarchical_root", "backend": "gloo", "root_collective": "halving_doubling",
                    "concurrent_collectives": 16, "bucket_mib": 1e-6, "first_bucket_mib": 1e-6, "overlap": True,
                    "data_loader": "cpp_thread_pool"},
}


def apply_framework(spec: dict[str, Any], where: str = "strategy") -> dict[str, Any]:
    """``spec`` with its framework's defaults under the keys it does not set."""
    name = spec.get("framework")
    if name is None:
        return spec
    name = require_choice(f"{where}.framework", name, FRAMEWORKS)  # a list or a mapping too
    preset = FRAMEWORKS[name]
    if preset.get("collective") == "ps" and spec.get("collective", "ps") != "ps":
        # its parameter servers are what the framework is: a ring under its name would be no mechanism of it
        raise ConfigError(f"{where}.collective", spec["collective"], f"ps with framework {name} (its parameter servers "
                          "are the framework's mechanism; for an allreduce pick pytorch_ddp, horovod or chainermn)",
                          related=(f"{where}.framework",))
    return {**preset, **spec}
