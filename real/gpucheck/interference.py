"""Compute slowed by communication on the same GPU, measured: two loops timed alone and beside
an interferer on another stream.

The loops (main stream, CUDA events around each window):
- **GEMM**: ``gemm_reps`` square matrix products (M = N = K = ``gemm_dim``): compute-bound;
- **stream**: ``stream_reps`` of z = x + y over three tensors far larger than L2: memory-bound.

The interferers (a side stream, running for the whole window):
- **hold** (c): c thread blocks of 512 threads that stay resident and spin on a flag: the SMs an
  NCCL collective holds, one block per channel for the whole operation (NVIDIA/nccl
  src/enqueue.cc: the kernel's grid is the channel count; src/include/device.h:
  NCCL_SIMPLE_MAX_NTHREADS 512), without its memory traffic;
- **reduce_copy** (c): the same c blocks, each looping dst = a + b over its share of chunks (what
  NCCL's ring reduce does with the data it receives: read two buffers, write one), so SMs and
  memory bandwidth are taken; its achieved bytes per second are recorded;
- **copies**: device-to-device copies back to back (tensor.copy_), the copy traffic a
  collective's staging causes.
Each interferer starts before the window: a one-block kernel on the main stream waits until all
c blocks of the interferer are resident, then the loop runs, then the main stream raises the
flag that ends it. A spinning kernel stops after ``MAX_SPINS`` rounds or ``MAX_CYCLES`` of its
clock in any case (and the row says it did not outlast the window): a flag never seen cannot hang
the GPU. The kernels are CUDA C compiled by CuPy (KERNELS_CU), each
block reserving NCCL's dynamic shared memory.

On the CPU (dry run) the same loops run with the wall clock, ``copies`` becomes a thread copying
tensors beside them, and the SM-holding kernels are skipped (they need CUDA).
"""

from __future__ import annotations

import math
import threading
from typing import Any

import torch

from real.devtime import DeviceTimer
from real.gpucheck.models import TORCH_DTYPES
from real.gpucheck.plan import InterferencePlan

THREADS_PER_BLOCK = 512
"""NCCL's Simple-protocol blocks: NCCL_SIMPLE_MAX_NTHREADS 512 (NVIDIA/nccl src/include/device.h)."""
MAX_CHANNELS = 256
"""Most blocks an interferer may have (NCCL's MAXCHANNELS is 64; src/include/device.h)."""
MAX_SPINS = 4_000_000
"""Rounds after which a spinning block stops by itself (a round of hold is two block barriers and
a load, about a microsecond; of reduce_copy 96 KiB of traffic: seconds either way, far beyond a
window of tens of milliseconds)."""
MAX_CYCLES = 4_000_000_000
"""SM clock cycles after which every loop of the kernels ends: about 2 s at the 1,980 MHz an H200
of this workplace ran its matrix products at (.library/device/KINDS.md), 20-100 windows."""


def measure_interference(plan: InterferencePlan, device: torch.device) -> dict[str, Any]:
    timer = DeviceTimer(device)
    dtype = TORCH_DTYPES[plan.gemm_dtype]
    gen = torch.Generator(device=device).manual_seed(0)
    n = plan.gemm_dim
    a, b = (torch.randn(n, n, generator=gen, device=device, dtype=dtype) for _ in range(2))
    c = torch.empty(n, n, device=device, dtype=dtype)
    x, y = (torch.randn(plan.stream_elems, generator=gen, device=device, dtype=dtype) for _ in range(2))
    z = torch.empty_like(x)

    def gemm() -> None:
        for _ in range(plan.gemm_reps):
            torch.mm(a, b, out=c)

    def stream() -> None:
        for _ in range(plan.stream_reps):
            torch.add(x, y, out=z)

    loops = {"gemm": gemm, "stream": stream}
    for loop in loops.values():  # warm-up: cuBLAS handles, kernel selection
        loop()
    timer.sync()
    alone = {name: _mean_window(timer, loop, plan.windows) for name, loop in loops.items()}
    out: dict[str, Any] = {
        "clock": timer.clock,
        "sms": torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 0,
        "gemm": {"dim": n, "dtype": plan.gemm_dtype, "reps": plan.gemm_reps, "flops": 2.0 * n**3 * plan.gemm_reps,
                 "alone_s": alone["gemm"]},
        "stream": {"elems": plan.stream_elems, "dtype": plan.gemm_dtype, "reps": plan.stream_reps,
                   "bytes": 3.0 * plan.stream_elems * x.element_size() * plan.stream_reps, "alone_s": alone["stream"]},
        "configs": [], "skipped": [],
    }
    interferers: list[tuple[str, int, Any]] = [("copies", 0, _Copies(plan, device, dtype, timer))]
    if device.type == "cuda":
        try:
            kernels = _Kernels(device, plan.stream_elems)
        except Exception as err:  # no CuPy, or NVRTC cannot compile here: the copies still run
            out["skipped"].append({"interferer": "hold, reduce_copy", "why": f"{type(err).__name__}: {err}"[:300]})
        else:
            interferers += [(kind, ch, kernels.runner(kind, ch)) for kind in ("hold", "reduce_copy")
                            for ch in plan.channels]
    else:
        out["skipped"].append({"interferer": "hold, reduce_copy", "why": "CUDA only: thread blocks held on SMs"})
    for kind, channels, interferer in interferers:
        row: dict[str, Any] = {"interferer": kind, "channels": channels}
        try:
            for name, loop in loops.items():
                times, info = [], []
                for _ in range(plan.windows):
                    t, meta = interferer.around(lambda loop=loop: _window(timer, loop))
                    times.append(t)
                    info.append(meta)
                row[f"{name}_s"] = sum(times) / len(times)
                row[f"{name}_slowdown"] = row[f"{name}_s"] / alone[name] - 1.0
                rates = [m["Bps"] for m in info if m.get("Bps")]
                row[f"{name}_interferer_Bps"] = sum(rates) / len(rates) if rates else None
                row[f"{name}_interferer_outlasted"] = all(m.get("outlasted", True) for m in info)
        except Exception as err:
            row["error"] = f"{type(err).__name__}: {err}"[:300]
        out["configs"].append(row)
    return out


def _window(timer: DeviceTimer, loop) -> float:
    """One timed run of ``loop``; it waits for the loop's own end only (a device-wide synchronize
    would also wait for the interferer on the side stream, which ends after the window)."""
    start = timer.mark()
    loop()
    end = timer.mark()
    timer.wait(end)
    return timer.seconds(start, end)


def _mean_window(timer: DeviceTimer, loop, windows: int) -> float:
    return sum(_window(timer, loop) for _ in range(windows)) / windows


class _Copies:
    """Back-to-back device-to-device copies on a side stream (CUDA) or a thread (CPU) for the
    whole window; its rate counts the bytes read and written."""

    def __init__(self, plan: InterferencePlan, device: torch.device, dtype: torch.dtype, timer: DeviceTimer):
        elems = max(1, plan.copy_bytes // torch.tensor([], dtype=dtype).element_size())
        self.src = torch.ones(elems, device=device, dtype=dtype)
        self.dst = torch.empty_like(self.src)
        self.bytes = 2.0 * self.src.numel() * self.src.element_size()
        self.device, self.timer = device, timer
        self.copy_s = _mean_window(timer, lambda: self.dst.copy_(self.src), 3)

    def around(self, window) -> tuple[float, dict[str, Any]]:
        if self.device.type != "cuda":
            return self._threaded(window)
        side = torch.cuda.Stream(self.device)
        # enough copies to outlast a window of the loop's length alone, twice over
        guess = window()
        count = max(2, math.ceil(2 * guess / max(self.copy_s, 1e-9)))
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            s0 = torch.cuda.Event(enable_timing=True)
            s1 = torch.cuda.Event(enable_timing=True)
            s0.record(side)
            for _ in range(count):
                self.dst.copy_(self.src)
            s1.record(side)
        t = window()
        torch.cuda.synchronize(self.device)
        side_s = s0.elapsed_time(s1) / 1e3
        return t, {"Bps": count * self.bytes / side_s, "outlasted": side_s > t}

    def _threaded(self, window) -> tuple[float, dict[str, Any]]:
        stop = threading.Event()
        done = [0]

        def copy_until_stopped() -> None:
            while not stop.is_set():
                self.dst.copy_(self.src)
                done[0] += 1

        import time

        thread = threading.Thread(target=copy_until_stopped, daemon=True)
        t0 = time.perf_counter()
        thread.start()
        t = window()
        stop.set()
        thread.join()
        return t, {"Bps": done[0] * self.bytes / (time.perf_counter() - t0), "outlasted": True}


KERNELS_CU = r"""
// Every loop also ends after max_cycles of its SM's clock: a flag never seen cannot hang the GPU.
extern "C" __global__ void hold(int* started, volatile const int* stop, long long* spins, long long max_spins,
                                long long max_cycles) {
    __shared__ int s_stop;
    const long long t0 = clock64();
    if (threadIdx.x == 0) started[blockIdx.x] = 1;
    long long i = 0;
    for (;;) {
        if (threadIdx.x == 0) s_stop = (*stop != 0) || (i >= max_spins) || (clock64() - t0 > max_cycles);
        __syncthreads();
        if (s_stop) break;
        ++i;
        __syncthreads();
    }
    if (threadIdx.x == 0) spins[blockIdx.x] = i;
}

extern "C" __global__ void reduce_copy(const float4* a, const float4* b, float4* out, long long n_chunks,
                                       int vec_per_chunk, int* started, volatile const int* stop,
                                       long long* spins, long long max_spins, long long max_cycles) {
    __shared__ int s_stop;
    const long long t0 = clock64();
    if (threadIdx.x == 0) started[blockIdx.x] = 1;
    long long i = 0;
    long long chunk = blockIdx.x;
    for (;;) {
        if (threadIdx.x == 0) s_stop = (*stop != 0) || (i >= max_spins) || (clock64() - t0 > max_cycles);
        __syncthreads();
        if (s_stop) break;
        long long base = (chunk % n_chunks) * vec_per_chunk;
        for (int v = threadIdx.x; v < vec_per_chunk; v += blockDim.x) {
            float4 x = a[base + v];
            float4 y = b[base + v];
            out[base + v] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
        }
        chunk += gridDim.x;
        ++i;
        __syncthreads();
    }
    if (threadIdx.x == 0) spins[blockIdx.x] = i;
}

extern "C" __global__ void wait_started(volatile const int* started, int want, long long max_cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 <= max_cycles) {
        int n = 0;
        for (int c = 0; c < want; ++c) n += started[c];
        if (n >= want) return;
    }
}
"""
"""The interferers in CUDA C, compiled at run time by CuPy (NVRTC): explicit grids, 512-thread
blocks and NCCL's dynamic shared memory per block, which a Triton kernel cannot reserve."""

NCCL_SHMEM_BYTES = 20 * 4112
"""Dynamic shared memory of one NCCL block on sm90: ncclShmemDynamicSize = ncclShmemScratchWarpSize
x NCCL_MAX_NTHREADS / WARP_SIZE = 4,112 B (the Simple protocol's (ncclCollUnroll 8 x 32 + 1) x 16,
the largest of the protocols') x 640 / 32 warps (NVIDIA/nccl src/include/device.h at 5067397c).
Reserved by our blocks too, so that they leave an SM as little room as NCCL's do."""
REDUCE_VEC_PER_CHUNK = 2048
"""float4 vectors one block adds per round of reduce_copy: 32 KiB of each operand."""


class _Kernels:
    """The kernels that hold SMs as NCCL's channel blocks do (module docstring)."""

    def __init__(self, device: torch.device, elems: int):
        import cupy

        self.cupy = cupy
        self.device = device
        module = cupy.RawModule(code=KERNELS_CU)
        self.hold = module.get_function("hold")
        self.reduce_copy = module.get_function("reduce_copy")
        self.wait_started = module.get_function("wait_started")
        for kernel in (self.hold, self.reduce_copy):
            kernel.max_dynamic_shared_size_bytes = NCCL_SHMEM_BYTES
        self.started = torch.zeros(MAX_CHANNELS, dtype=torch.int32, device=device)
        self.stop = torch.zeros(1, dtype=torch.int32, device=device)
        self.n_chunks = max(1, elems // (4 * REDUCE_VEC_PER_CHUNK))
        gen = torch.Generator(device=device).manual_seed(1)
        self.a, self.b = (torch.randn(self.n_chunks * REDUCE_VEC_PER_CHUNK * 4, generator=gen, device=device)
                          for _ in range(2))
        self.out = torch.empty_like(self.a)
        self.chunk_bytes = 3.0 * REDUCE_VEC_PER_CHUNK * 16  # two float4 operands read, one written
        # compile and load now, outside any timed window, with the flag already raised
        self.stop.fill_(1)
        torch.cuda.synchronize(device)
        spins = torch.zeros(1, dtype=torch.int64, device=device)
        self.launch("hold", 1, spins, torch.cuda.current_stream(device))
        self.launch("reduce_copy", 1, spins, torch.cuda.current_stream(device))
        self.wait(0, torch.cuda.current_stream(device))
        torch.cuda.synchronize(device)

    def _args(self, kind: str, spins: torch.Tensor) -> tuple:
        import numpy as np

        cp = self.cupy
        common = (cp.asarray(self.started), cp.asarray(self.stop), cp.asarray(spins), np.int64(MAX_SPINS),
                  np.int64(MAX_CYCLES))
        if kind == "hold":
            return common
        return (cp.asarray(self.a), cp.asarray(self.b), cp.asarray(self.out), np.int64(self.n_chunks),
                np.int32(REDUCE_VEC_PER_CHUNK), *common)

    def launch(self, kind: str, channels: int, spins: torch.Tensor, stream) -> None:
        kernel = self.hold if kind == "hold" else self.reduce_copy
        with self.cupy.cuda.ExternalStream(stream.cuda_stream):
            kernel((channels,), (THREADS_PER_BLOCK,), self._args(kind, spins), shared_mem=NCCL_SHMEM_BYTES)

    def wait(self, channels: int, stream) -> None:
        import numpy as np

        with self.cupy.cuda.ExternalStream(stream.cuda_stream):
            self.wait_started((1,), (1,), (self.cupy.asarray(self.started), np.int32(channels), np.int64(MAX_CYCLES)))

    def runner(self, kind: str, channels: int) -> _KernelRun:
        return _KernelRun(self, kind, channels)


class _KernelRun:
    def __init__(self, kernels: _Kernels, kind: str, channels: int):
        self.k, self.kind, self.channels = kernels, kind, channels

    def around(self, window) -> tuple[float, dict[str, Any]]:
        k, device = self.k, self.k.device
        spins = torch.zeros(self.channels, dtype=torch.int64, device=device)
        k.started.zero_()
        k.stop.zero_()
        torch.cuda.synchronize(device)
        main = torch.cuda.current_stream(device)
        side = torch.cuda.Stream(device)
        s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s0.record(side)
        k.launch(self.kind, self.channels, spins, side)
        s1.record(side)
        k.wait(self.channels, main)  # the window starts once every block of the interferer is resident
        timer = DeviceTimer(device)
        start = timer.mark()
        end = None
        try:
            t = window()
            end = timer.mark()
        finally:
            k.stop.fill_(1)  # main stream, after the window: the interferer ends
            torch.cuda.synchronize(device)
        counts = spins.tolist()
        side_s = s0.elapsed_time(s1) / 1e3
        meta: dict[str, Any] = {"spins": counts,
                                "outlasted": max(counts) < MAX_SPINS and end is not None
                                and side_s >= timer.seconds(start, end)}
        if self.kind == "reduce_copy":
            meta["Bps"] = sum(counts) * k.chunk_bytes / side_s
        return t, meta
