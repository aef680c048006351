"""Compute time of layers and the optimizer step on one device."""

from __future__ import annotations

from sim.catalog import GPU
from sim.costs.contention import PassLoad, gemm_blocks, gemm_tile
from sim.workload import Layer, Workload

OPTIMIZER_TRAFFIC = {"sgd": 3, "momentum": 5, "adam": 7}
"""Parameter-sized arrays the update reads and writes: sgd reads p, g and writes p; momentum adds
the velocity (read + write); Adam adds two moments (torch.optim's single-tensor loops)."""


def roofline_time_s(flops: float, bytes_moved: float, gpu: GPU, dtype: str) -> float:
    """Roofline: t = max(flops / (peak(dtype) x efficiency), bytes / memory bandwidth) (Williams et al. 2009)."""
    compute_s = flops / (gpu.flops_for(dtype) * gpu.efficiency)
    memory_s = bytes_moved / gpu.memory_bandwidth_Bps
    return max(compute_s, memory_s)


def layer_times_s(
    workload: Workload, gpu: GPU, dtype: str, dtype_bytes: int, slowdown: float = 1.0
) -> list[tuple[float, float]]:
    """(forward, backward) seconds per layer for the workload's per-GPU batch.

    A layer with measured times uses them. Otherwise the device's launch overhead plus the
    roofline, with memory traffic
    forward = weights + input and output activations, and backward twice that (it reads the
    output gradient, input and weights and writes the input and weight gradients).
    ``slowdown`` multiplies every time (a slower GPU, or co-located ranks sharing cores).
    """
    times = []
    previous_act = 0.0
    batch = workload.batch_size
    for layer in workload.layers:
        times.append(_one_layer(layer, previous_act, batch, gpu, dtype, dtype_bytes, slowdown))
        previous_act = layer.activation_elems
    return times


def _one_layer(
    layer: Layer, input_elems: float, batch: int, gpu: GPU, dtype: str, dtype_bytes: int, slowdown: float
) -> tuple[float, float]:
    if layer.fwd_time_s is not None and layer.bwd_time_s is not None:
        return layer.fwd_time_s * slowdown, layer.bwd_time_s * slowdown
    fwd_bytes = dtype_bytes * (layer.param_count + batch * (input_elems + layer.activation_elems))
    fwd = gpu.launch_overhead_s + roofline_time_s(layer.fwd_flops * batch, fwd_bytes, gpu, dtype)
    bwd = gpu.launch_overhead_s + roofline_time_s(layer.bwd_flops * batch, 2 * fwd_bytes, gpu, dtype)
    scale = slowdown * gpu.compute_scale  # a calibrated GPU's measured time over the roofline's
    return fwd * scale, bwd * scale


def pass_loads(workload: Workload, gpu: GPU, dtype: str, dtype_bytes: int) -> list[tuple[PassLoad, PassLoad]]:
    """(forward, backward) of every layer as the roofline of ``layer_times_s`` sees them: compute
    and memory seconds, launch overhead, and the thread blocks of their GEMMs (what a collective
    beside them takes away: sim.costs.contention). The forward GEMM writes the layer's output
    (batch x activation elements); backward runs two GEMMs of half its FLOPs each, the data
    gradient writing the layer's input (batch x the previous layer's activation elements) and
    the weight gradient, whose few output tiles cuBLAS and cuDNN split along K to fill the GPU
    (counted as many waves). The first layer computes no data gradient."""
    tile = gemm_tile(gpu.compute_capability, dtype)
    peak = gpu.flops_for(dtype) * gpu.efficiency
    bandwidth = gpu.memory_bandwidth_Bps
    batch = workload.batch_size
    loads = []
    previous_act = 0.0
    for layer in workload.layers:
        fwd_bytes = dtype_bytes * (layer.param_count + batch * (previous_act + layer.activation_elems))
        fwd_gemms = ((1.0, gemm_blocks(batch * layer.activation_elems, tile)),) if layer.fwd_flops > 0 else ()
        if layer.bwd_flops <= 0:
            bwd_gemms: tuple[tuple[float, int | None], ...] = ()
        elif previous_act > 0:
            bwd_gemms = ((0.5, gemm_blocks(batch * previous_act, tile)), (0.5, None))
        else:
            bwd_gemms = ((1.0, None),)
        loads.append((
            PassLoad(layer.fwd_flops * batch / peak, fwd_bytes / bandwidth, gpu.launch_overhead_s, fwd_gemms,
                     tile.blocks_per_sm),
            PassLoad(layer.bwd_flops * batch / peak, 2 * fwd_bytes / bandwidth, gpu.launch_overhead_s, bwd_gemms,
                     tile.blocks_per_sm),
        ))
        previous_act = layer.activation_elems
    return loads


def optimizer_step_time_s(param_count: int, dtype_bytes: int, optimizer: str, gpu: GPU) -> float:
    """Memory-bound update: t = traffic(optimizer) x params x bytes / memory bandwidth (x a calibrated
    GPU's compute_scale)."""
    return OPTIMIZER_TRAFFIC[optimizer] * param_count * dtype_bytes / gpu.memory_bandwidth_Bps * gpu.compute_scale


def workload_optimizer_time_s(workload: Workload, param_count: float, dtype_bytes: int, gpu: GPU) -> float:
    """The optimizer step over ``param_count`` of the workload's parameters: the calibrated step
    pro rata, t = t_measured x param_count / total params (the update is one pass per parameter),
    else the roofline ``optimizer_step_time_s``."""
    if workload.optimizer_time_s is not None and workload.param_count > 0:
        return workload.optimizer_time_s * param_count / workload.param_count
    return optimizer_step_time_s(int(param_count), dtype_bytes, workload.optimizer, gpu)
