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
  pure_nccl_communicator.py packs the parameters into one GPU buffer): no overlap.
- chainermn: ChainerMN >= 1.2 with double_buffering=True: the packed allreduce of one
  iteration runs during the next iteration's forward and backward (one-step-stale gradients;
  chainermn/optimizers.py _DoubleBufferingOptimizer).
- tf_ps: TensorFlow's parameter servers on their own hosts (tf.train.replica_device_setter,
  between-graph replication): every variable's shard pushed and pulled over gRPC (TCP).
"""

from __future__ import annotations

from typing import Any

from sim.errors import require_choice

FRAMEWORKS: dict[str, dict[str, Any]] = {
    "pytorch_ddp": {"bucket_mib": 25.0, "first_bucket_mib": 1.0, "overlap": True, "comm_slows_compute": True},
    "horovod": {"fusion_mib": 64.0, "cycle_time_ms": 5.0, "overlap": True, "comm_slows_compute": True},
    "horovod_0.21": {"fusion_mib": 128.0, "cycle_time_ms": 1.0, "overlap": True, "comm_slows_compute": True},
    "chainermn_2017": {"bucket_mib": 1e9, "overlap": False},
    "chainermn": {"bucket_mib": 1e9, "overlap": False, "double_buffering": True, "comm_slows_compute": True},
    "tf_ps": {"collective": "ps", "ps_layout": "dedicated", "overlap": True},
}


def apply_framework(spec: dict[str, Any], where: str = "strategy") -> dict[str, Any]:
    """``spec`` with its framework's defaults under the keys it does not set."""
    name = spec.get("framework")
    if name is None:
        return spec
    name = require_choice(f"{where}.framework", name, FRAMEWORKS)  # a list or a mapping too
    return {**FRAMEWORKS[name], **spec}
