"""Gradient compression as DDP communication hooks, written for gloo/CPU; every buffer is made on
the bucket's device, so the same hooks run on CUDA tensors (NCCL, or gloo with ``real.device: cuda``).

torch's own hooks mostly fail here (../shared/DESIGN.md: bf16_compress_hook demands NCCL, the
quantization hooks raise IndexError, PowerSGD hangs), and gloo rejects float8 tensors in every
collective. Two paths:
- ``allreduce``: formats gloo can sum (fp16, bf16): divide by the world size, cast, allreduce,
  cast back. Bytes on the wire: 2 per element, the ring's 2(n-1)/n factor kept.
- ``allgather``: formats it cannot (fp8 e4m3 / e5m2, int8): scale by amax / format max (one fp32
  scale per bucket tensor), encode, all_gather the bytes as a uint8 view with the scale's 4 bytes
  appended, decode every rank's part and sum locally in fp32. Bytes: (n-1) x S_c per rank.
The path that ran is recorded (``HookState.path``) and lands in the result row (comm_path).

Error bound per element against the fp32 mean of the ranks' gradients g_r (what the tests check):
  |g_hook - mean g_r| <= 2 u mean|g_r| + floor,  u = unit roundoff of the format
(one rounding to encode, one for the sum or the final cast); floor: scaled formats, the mean
over ranks of half the smallest subnormal step times that rank's scale (int8: u = 0 and half a
quantisation step, amax / 254); fp16/bf16, (n + 1) half subnormal steps (n encodes, one sum).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Format:
    dtype_name: str
    path: str
    max_value: float = 0.0
    """Largest finite value (scaled formats map amax onto it)."""
    unit_roundoff: float = 0.0
    subnormal_half_step: float = 0.0
    """Half the smallest subnormal, relative to the unscaled format (absolute error floor)."""

    @property
    def dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype_name)

    @property
    def scaled(self) -> bool:
        return self.max_value > 0


FORMATS: dict[str, Format] = {
    # IEEE 754 binary16: 10 fraction bits, smallest subnormal 2^-24.
    "fp16": Format("float16", "allreduce", unit_roundoff=2**-11, subnormal_half_step=2**-25),
    # bfloat16: 7 fraction bits, fp32's exponent range.
    "bf16": Format("bfloat16", "allreduce", unit_roundoff=2**-8, subnormal_half_step=2**-134),
    # OCP FP8 (Micikevicius et al. 2022): E4M3 max 448, min subnormal 2^-9; E5M2 max 57344, 2^-16.
    "fp8_e4m3": Format("float8_e4m3fn", "allgather", 448.0, 2**-4, 2**-10),
    "fp8_e5m2": Format("float8_e5m2", "allgather", 57344.0, 2**-3, 2**-17),
    "int8": Format("int8", "allgather", 127.0, 0.0, 0.5),
}


@dataclass
class HookState:
    name: str
    fmt: Format
    calls: int = 0

    @property
    def path(self) -> str:
        wire = "uint8" if self.fmt.path == "allgather" else self.name
        return f"{self.fmt.path}_{wire}" + (f"({self.name})" if self.fmt.path == "allgather" else "")


def _encode(t: torch.Tensor, fmt: Format) -> tuple[torch.Tensor, torch.Tensor]:
    amax = t.abs().max().float()
    scale = torch.where(amax > 0, amax / fmt.max_value, torch.ones_like(amax)).reshape(1)
    x = t / scale
    q = x.round().clamp_(-127, 127).to(torch.int8) if fmt.dtype_name == "int8" else x.to(fmt.dtype)
    return q, scale


def _decode(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return q.float() * scale


# The hooks' work before and after their collective, as functions of their own so that
# real/codec_bench.py times exactly these operations.
def allreduce_encode(buffer: torch.Tensor, fmt: Format, world: int) -> torch.Tensor:
    """Runs in DDP's autograd hook, on the backward thread: average, cast to the wire format."""
    return buffer.div(world).to(fmt.dtype)


def allreduce_decode(buffer: torch.Tensor, compressed: torch.Tensor) -> torch.Tensor:
    """Runs in the future's callback: cast the summed wire tensor back into the bucket."""
    buffer.copy_(compressed)
    return buffer


def allgather_encode(buffer: torch.Tensor, fmt: Format, world: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Scale, encode, append the scale's bytes; allocate the gather buffer: (payload, gathered, n_q)."""
    q, scale = _encode(buffer, fmt)
    payload = torch.cat([q.reshape(-1).view(torch.uint8), scale.view(torch.uint8)])
    gathered = torch.empty(world * payload.numel(), dtype=torch.uint8, device=buffer.device)
    return payload, gathered, q.numel() * q.element_size()


def allgather_decode(buffer: torch.Tensor, gathered: torch.Tensor, n_q: int, fmt: Format, world: int) -> torch.Tensor:
    """Decode all ``world`` gathered parts (this rank's own too: every replica sums the same
    quantised values), sum in fp32, average into the bucket."""
    rows = gathered.view(world, -1)
    total = torch.zeros(buffer.numel(), dtype=torch.float32, device=buffer.device)
    for r in range(world):
        part_q = rows[r, :n_q].view(fmt.dtype)
        part_scale = rows[r, n_q:].clone().view(torch.float32)  # clone: 4-byte aligned
        total += _decode(part_q, part_scale)
    buffer.copy_(total.div_(world).view_as(buffer))
    return buffer


def allreduce_hook(state: HookState, bucket):  # no return annotation: DDP checks it literally
    buffer = bucket.buffer()
    compressed = allreduce_encode(buffer, state.fmt, dist.get_world_size())
    state.calls += 1
    fut = dist.all_reduce(compressed, async_op=True).get_future()
    return fut.then(lambda _: allreduce_decode(buffer, compressed))


def allgather_hook(state: HookState, bucket):
    buffer = bucket.buffer()
    world = dist.get_world_size()
    payload, gathered, n_q = allgather_encode(buffer, state.fmt, world)
    state.calls += 1
    fut = dist.all_gather_into_tensor(gathered, payload, async_op=True).get_future()
    return fut.then(lambda _: allgather_decode(buffer, gathered, n_q, state.fmt, world))


def register_compression(ddp, name: str) -> HookState:
    fmt = FORMATS[name]
    state = HookState(name, fmt)
    ddp.register_comm_hook(state, allreduce_hook if fmt.path == "allreduce" else allgather_hook)
    return state


def error_bound(name: str, per_rank_grads: list[torch.Tensor]) -> torch.Tensor:
    """Per-element bound on |hooked gradient - fp32 mean| (the module docstring's formula)."""
    fmt = FORMATS[name]
    n = len(per_rank_grads)
    mean_abs = sum(g.abs() for g in per_rank_grads) / n
    if fmt.scaled:
        floor = sum(g.abs().max() / fmt.max_value for g in per_rank_grads) / n * fmt.subnormal_half_step
    else:  # each rank's g/n rounds once, the in-format sum once more (subnormal range: absolute)
        floor = torch.tensor((n + 1) * fmt.subnormal_half_step)
    return 2 * fmt.unit_roundoff * mean_abs + floor + 1e-7 * mean_abs.max()


def run_grad_check(ctx) -> dict:
    """One backward per format on the same parameters and batch; rank 0 returns the flat gradients."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from real.models import build_model, loss_fn
    from real.strategies.common import rank_batches

    job = ctx.job
    model_name, batch, seed = job["model"], job["batch_size"], job.get("seed", 0)
    device = ctx.device
    if job.get("full_fp32"):  # no TF32 convolutions or matmuls: the caller's fp32 reference is the same arithmetic
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    x, y = (t.to(device) for t in rank_batches(model_name, batch, seed, ctx.rank, count=1)[0])
    out = {}
    for name in ["none", *job["formats"]]:
        ddp = DDP(build_model(model_name, seed).to(device), bucket_cap_mb=job.get("bucket_mib", 25.0),
                  device_ids=[device.index] if device.type == "cuda" else None)
        state = register_compression(ddp, name) if name != "none" else None
        loss_fn(model_name)(ddp(x), y).backward()
        flat = torch.cat([p.grad.reshape(-1) for p in ddp.parameters()])
        out[name] = {"grad": flat.cpu().tolist(), "path": state.path if state else "allreduce_fp32",
                     "calls": state.calls if state else 0, "device": str(flat.device)}
        ctx.beat()
    return out if ctx.rank == 0 else {}
