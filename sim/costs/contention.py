"""Compute slowed by communication that shares the GPU.

NCCL runs each channel of a collective as one CUDA thread block that stays resident for the
whole operation (src/enqueue.cc launches one block per channel, each looping over its
channel's chunks until the collective ends), so while a collective is in flight its channels
hold that many of the GPU's streaming multiprocessors and the model's own kernels get the rest:
compute runs at 1 - channels / SMs. Enabled by ``strategy.comm_slows_compute`` (the frameworks that overlap: DDP,
Horovod, ChainerMN with double buffering).
"""

from __future__ import annotations


def comm_compute_slowdown(scenario) -> float:
    """Fraction of the GPU's SMs NCCL's collective kernels hold: run-time ring channels / SMs."""
    strategy, cluster = scenario.strategy, scenario.cluster
    if not strategy.comm_slows_compute or strategy.backend != "nccl" or cluster.gpu.sm_count <= 0:
        return 0.0
    from sim.costs.backends.nccl import ring_graph

    channels = ring_graph(cluster).runtime_channels
    return min(0.5, channels / cluster.gpu.sm_count)
