"""One measured iteration's phases per rank, for the timeline ``scalebench real --trace FILE`` writes
(the format of sim/trace.py, so a measured and a simulated iteration open the same way).

After the timed iterations every rank runs one more, recorded:
- forward: the model's call (forward pre-hook to forward hook on the trained module); with a
  pipeline, each micro-batch's stage call;
- backward: from the forward's end to the optimizer step (the loss, autograd, and whatever the
  strategy does there before the step: DDP without overlap reduces its buckets then, a
  synchronous parameter server pushes and pulls);
- optimizer step: the optimizer's step (torch.optim step pre- and post-hooks);
- with DDP and overlap, each gradient bucket: a communication hook (the default one's average and
  allreduce, timed) records when DDP handed the bucket over (ready) and when its allreduce
  finished; its start is inferred as the later of ready and the previous bucket's end, since the
  process group runs one collective at a time in issue order. With a compression hook installed,
  buckets are not recorded (one hook per DDP).
Ranks are aligned at a barrier just before the iteration: each rank's times are its own clock
from leaving it, so ranks are offset by the barrier's skew (tens of microseconds on one host).
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

Span = dict[str, Any]
BACKWARD_NAMES = {"ps_sync": "backward + PS push/pull", "ddp_no_overlap": "backward + bucket allreduces"}
"""The span from the forward's end to the optimizer step, by what else happens in it."""


class PhaseRecorder:
    """Hooks on a trainer's module and optimizer that record one iteration's spans."""

    def __init__(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer | None):
        self.t0 = time.perf_counter()
        self.spans: list[Span] = []
        self.buckets: list[tuple[int, float, float, int]] = []  # (index, ready, end, bytes)
        self._open: dict[str, float] = {}
        self._last_forward_end: float | None = None
        self._handles = [module.register_forward_pre_hook(self._fwd_start), module.register_forward_hook(self._fwd_end)]
        if optimizer is not None:
            self._handles += [optimizer.register_step_pre_hook(self._opt_start),
                              optimizer.register_step_post_hook(self._opt_end)]

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def start(self) -> None:
        """Time zero: call right after the barrier that aligns the ranks."""
        self.t0 = time.perf_counter()
        self.spans.clear()
        self.buckets.clear()
        self._last_forward_end = None

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()

    def _span(self, lane: str, name: str, start: float, end: float, **args: Any) -> None:
        self.spans.append({"lane": lane, "name": name, "start_s": start, "end_s": end, "args": args})

    def _fwd_start(self, module, args) -> None:
        self._open["forward"] = self.now()

    def _fwd_end(self, module, args, out) -> None:
        start = self._open.pop("forward", self.now())
        self._last_forward_end = self.now()
        self._span("compute", "forward", start, self._last_forward_end)

    def _opt_start(self, optimizer, args, kwargs) -> None:
        now = self.now()
        if self._last_forward_end is not None:
            self._span("compute", "backward", self._last_forward_end, now)
            self._last_forward_end = None
        self._open["optimizer"] = now

    def _opt_end(self, optimizer, args, kwargs) -> None:
        self._span("compute", "optimizer step", self._open.pop("optimizer", self.now()), self.now())

    def bucket_hook(self, state: Any, bucket):  # no annotations: DDP checks the hook's signature literally
        """DDP's default allreduce hook (average, then allreduce), timed."""
        ready = self.now()
        tensor = bucket.buffer()
        tensor.div_(dist.get_world_size())
        n_bytes = tensor.numel() * tensor.element_size()
        index = bucket.index()
        fut = dist.all_reduce(tensor, async_op=True).get_future()

        def done(f):
            self.buckets.append((index, ready, self.now(), n_bytes))
            return f.value()[0]

        return fut.then(done)

    def finish(self, end_s: float, backend: str, strategy: str) -> list[Span]:
        """The spans of the recorded iteration, the buckets' included, ending at ``end_s``; the
        backward span is named after what it holds besides autograd (BACKWARD_NAMES)."""
        if self._last_forward_end is not None:  # no optimizer step on this rank: backward runs to the end
            self._span("compute", "backward", self._last_forward_end, end_s)
        for span in self.spans:
            if span["name"] == "backward":
                span["name"] = BACKWARD_NAMES.get(strategy, "backward")
        previous_end = 0.0
        for index, ready, end, n_bytes in sorted(self.buckets, key=lambda b: b[2]):
            start = max(ready, previous_end)
            self._span("comm", f"allreduce bucket {index}", start, end, bytes=n_bytes, algorithm=f"{backend} allreduce",
                       ready_ms=ready * 1e3, waited_ms=(start - ready) * 1e3)
            previous_end = end
        return sorted(self.spans, key=lambda s: (s["start_s"], s["lane"]))


def traced_iteration(ctx, trainer, x: torch.Tensor, y: torch.Tensor, backend: str, strategy: str) -> dict[str, Any]:
    """Run one more iteration with a PhaseRecorder; this rank's spans and the iteration's length."""
    module = getattr(trainer, "ddp", None) or getattr(trainer, "module", None) or trainer.model
    recorder = PhaseRecorder(module, getattr(trainer, "opt", None))
    ddp = getattr(trainer, "ddp", None)
    if ddp is not None and getattr(trainer, "overlap", False) and getattr(trainer, "hook_state", None) is None:
        ddp.register_comm_hook(None, recorder.bucket_hook)
    dist.barrier()
    recorder.start()
    trainer.step(x, y)
    if ctx.device.type == "cuda":
        torch.cuda.synchronize()
    end = recorder.now()
    if strategy == "ddp" and not getattr(trainer, "overlap", True):
        strategy = "ddp_no_overlap"
    spans = recorder.finish(end, backend, strategy)
    recorder.remove()
    ctx.beat()
    return {"spans": spans, "iteration_s": end}
