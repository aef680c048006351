"""Ranks that share one machine's CPU cores: each rank's share of the calibrated device.

A CPU "device" is calibrated with all of its ``cores`` (sgemm rate, copy bandwidth). With k
ranks on the same cores, each running ``threads`` threads (the harness gives each rank
max(1, cores // k)), processor sharing leaves a rank min(threads, cores / k) cores, so every
roofline term (optimizer step, codec encode/decode, any uncalibrated layer) of one rank takes
  factor = cores / min(threads, cores / k)
times as long as on the whole device: 1 rank on 2 cores 1x, 2 ranks 2x, 4 ranks 4x
(DESIGN.md, observed: a small CNN's step takes 60 ms alone and 121-124 ms with 4 ranks on 2
cores at 1 thread each, with its CPU time unchanged). Measured per-layer times already carry
their own co-location (sim/calibration.py) and are not scaled again.
"""

from __future__ import annotations

from dataclasses import replace

from sim.catalog import GPU


def threads_per_rank(cores: int, ranks: int) -> int:
    """What the real harness gives each rank: max(1, cores // ranks) (real/worker.py)."""
    return max(1, cores // ranks)


def colocation_factor(cores: int, ranks: int, threads: int | None = None) -> float:
    """cores / min(threads, cores / ranks): how much slower one rank runs a device-bound pass."""
    threads = threads_per_rank(cores, ranks) if threads is None else threads
    return cores / min(threads, cores / ranks)


def shared_device(gpu: GPU, *, cores: int, ranks: int, threads: int | None = None) -> GPU:
    """The device as one of ``ranks`` co-located ranks sees it: peak FLOP/s and memory bandwidth
    divided by the co-location factor (launch overhead unchanged: one thread's latency)."""
    factor = colocation_factor(cores, ranks, threads)
    if factor == 1.0:
        return gpu
    return replace(gpu, name=f"{gpu.name}/{ranks}ranks", peak_flops={k: v / factor for k, v in gpu.peak_flops.items()},
                   memory_bandwidth_Bps=gpu.memory_bandwidth_Bps / factor,
                   source=f"{gpu.source}; shared by {ranks} co-located ranks (x{factor:g}, sim/costs/colocation.py)")
