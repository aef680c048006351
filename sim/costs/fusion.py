"""Horovod's tensor fusion as its 2017 source does it (v0.10-v0.12, the versions of the Uber
benchmark and of Sergeev & Del Balso 2018, arXiv 1802.05799).

Sources, all in the horovod/horovod repository:
- horovod/tensorflow/mpi_ops.cc as Tensor Fusion arrived (Horovod 0.10, autumn 2017:
  ``size_t tensor_fusion_threshold = 64 * 1024 * 1024``, ``sleep_for(milliseconds(5))`` per tick)
  and horovod/common/operations.cc of Horovod 0.11/0.12 (``RunLoopOnce``, HOROVOD_CYCLE_TIME):
  the coordinator builds one response per ready tensor, in the order the tensors became ready,
  then fuses: a batch takes the following responses while ``tensor_size + new_tensor_size <=
  tensor_fusion_threshold`` and stops at the first that does not fit ("Don't try to fuse
  additional tensors since they are usually computed in order of requests and skipping tensors
  may mean that the batch will have to wait longer").
- ``PerformOperation`` (same files): a batch of more than one tensor is copied into the fusion
  buffer with ``cudaMemcpyAsync(..., cudaMemcpyDeviceToDevice, stream)`` per tensor
  (MEMCPY_IN_FUSION_BUFFER), reduced in place by ``ncclAllReduce`` on the same stream, and copied
  out again (MEMCPY_OUT_FUSION_BUFFER); a single tensor is reduced where it lies. The stream is
  Horovod's own, one per GPU, so batches queue behind each other (docs/timeline.md, QUEUE).
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.catalog import GPU


def horovod_fusion_batches(grad_bytes: Sequence[float], threshold_bytes: float) -> list[list[int]]:
    """Group tensors, given in the order they become ready, as Horovod's coordinator fuses them.

    A batch starts with the next tensor and takes the following ones while its total stays at or
    below ``threshold_bytes``; it ends at the first tensor that would overflow it (later tensors
    are never pulled forward). A tensor larger than the threshold is a batch of its own.
    Tensors without bytes (layers without parameters: no Horovod request) join the current batch.
    Returns the positions of each batch.
    """
    batches: list[list[int]] = []
    current: list[int] = []
    size = 0.0
    for i, n_bytes in enumerate(grad_bytes):
        if current and (n_bytes <= 0 or size + n_bytes <= threshold_bytes):
            current.append(i)
            size += n_bytes
            continue
        if current:
            batches.append(current)
        current, size = [i], float(n_bytes)
    if current:
        batches.append(current)
    return batches


def fusion_copy_s(n_bytes: float, n_tensors: int, gpu: GPU) -> float:
    """Time of the copies into and out of the fusion buffer for a batch of ``n_tensors`` tensors
    holding ``n_bytes``: each copy reads and writes the batch once, at the GPU's memory bandwidth
    (device-to-device memcpy is memory-bound): t = 2 copies x 2 x n_bytes / memory bandwidth.
    0 for a single tensor, which Horovod reduces in place (PerformOperation's ``entries.size() > 1``)."""
    if n_tensors <= 1 or n_bytes <= 0:
        return 0.0
    return 4.0 * n_bytes / gpu.memory_bandwidth_Bps
