"""Timing work on a device: CUDA events on a GPU, the wall clock on the CPU.

CUDA kernels run asynchronously: a wall clock around a forward times its launches, not its
kernels. ``DeviceTimer.mark()`` records an event on the current stream (CUDA) or reads
``time.perf_counter`` (CPU); ``seconds(a, b)`` is the time between two marks, read after
``sync()`` (torch.cuda.Event.elapsed_time: milliseconds between two recorded events, valid once
both completed). The same measuring code then runs on either device, which is what lets the GPU
check run its every line on a CPU in a dry run (scripts/gpu_check.py --dry-run).
"""

from __future__ import annotations

import time
from typing import Any

import torch


class DeviceTimer:
    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"

    @property
    def clock(self) -> str:
        """What the marks are: 'CUDA events' or 'perf_counter' (a result says which it used)."""
        return "CUDA events" if self.cuda else "perf_counter"

    def mark(self) -> Any:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def sync(self) -> None:
        """Wait for the device's queued work (nothing to wait for on the CPU)."""
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def wait(self, mark: Any) -> None:
        """Wait until ``mark`` has happened (a CUDA event: only the work queued before it on its stream)."""
        if self.cuda:
            mark.synchronize()

    def seconds(self, start: Any, end: Any) -> float:
        """Seconds from ``start`` to ``end`` (two marks; on CUDA call ``sync()`` first)."""
        if self.cuda:
            return float(start.elapsed_time(end)) / 1e3
        return float(end - start)
