"""Rank 0's iterations under torch.profiler, for ``scalebench real --profile TRACE.json``.

After the timed iterations every rank runs ``PROFILED_STEPS`` more (the strategy's real
iteration: DDP's hooks and collectives included, so the other ranks must step too); rank 0
records its own with torch.profiler (CPU ops and, on a CUDA device, its kernels; ``with_stack``
so that the model's module calls are in the trace as ``nn.Module: <Class>_<k>`` events) and
writes the Chrome trace. ``scalebench layers MODEL --profile TRACE.json`` (real/kineto.py) turns
it into per-layer forward and backward times. The trace's top level gets a ``scalebench`` object
(model, batch size, steps, world size, device): the Trace Event Format keeps unknown top-level
keys as metadata, and ``scalebench layers`` reads the batch from it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

PROFILED_STEPS = 2
"""Steps recorded: kineto.layer_times_from_trace takes the mean over them; a second step shows
whether the first was still warming up (one call of the root module per step)."""
META_KEY = "scalebench"


def profiled_iterations(ctx, trainer, batches, path: str, model: str, batch_size: int,
                        steps: int = PROFILED_STEPS) -> dict[str, Any]:
    """Run ``steps`` iterations on every rank, rank 0 under the profiler; rank 0 writes ``path``."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if ctx.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    ctx.barrier()
    if ctx.rank != 0:
        for i in range(steps):
            trainer.step(*batches[i % len(batches)])
            ctx.beat()
        return {}
    with profile(activities=activities, with_stack=True) as prof:
        for i in range(steps):
            trainer.step(*batches[i % len(batches)])
            if ctx.device.type == "cuda":
                torch.cuda.synchronize(ctx.device)
            ctx.beat()
    prof.export_chrome_trace(path)
    meta = {"model": model, "batch_size": batch_size, "steps": steps, "world_size": ctx.world,
            "device": torch.cuda.get_device_name(ctx.device) if ctx.device.type == "cuda" else "cpu",
            "torch": torch.__version__}
    add_metadata(path, meta)
    return {"profile": path, "profiled_steps": steps}


def add_metadata(path: str | Path, meta: dict[str, Any]) -> None:
    """Put ``meta`` at the trace's top level under META_KEY (rewritten atomically)."""
    from sim.fileio import atomic_write_text

    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, list):  # the array form of the format: make it the object form
        data = {"traceEvents": data}
    data[META_KEY] = meta
    atomic_write_text(path, json.dumps(data))
