"""DDP's compression hooks (real/strategies/hooks.py) on a device, checked against their error
bound: one backward per format through DDP on ``n`` ranks, every gradient compared with the fp32
mean of the ranks' gradients computed here without DDP (the bound: hooks.error_bound).

    python -m real.gpucheck.hookcheck BACKEND DEVICE RANKS OUT.json

writes, per format, the path the hook took, its calls, the largest |error| and how far the worst
element is from its bound (``excess`` < 0 within it), and where the gradients lived.
"""

from __future__ import annotations

import json
import sys
from typing import Any

MODEL = "small_cnn"
BATCH = 4
BUCKET_MIB = 0.25
"""Several buckets (small_cnn's 0.76 MB of gradients in 0.25 MiB buckets): more than one hook call."""


def check_hooks(backend: str, device: str, ranks: int, timeout_s: float = 120) -> dict[str, Any]:
    import torch

    from real.launch import launch
    from real.models import build_model, loss_fn
    from real.strategies.common import rank_batches
    from real.strategies.hooks import FORMATS, error_bound

    # cuDNN convolves fp32 in TF32 by default (10 fraction bits, about fp16's rounding): off in the
    # ranks and here, so that the reference and the hooked gradients differ only by the format's rounding
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    job = {"kind": "grad_check", "model": MODEL, "batch_size": BATCH, "formats": list(FORMATS),
           "bucket_mib": BUCKET_MIB, "backend": backend, "device": device, "full_fp32": True}
    raw = launch(job, ranks, timeout_s=timeout_s, deadline_s=3 * timeout_s)
    per_rank = []
    for r in range(ranks):
        model = build_model(MODEL, 0).to(device)
        x, y = (t.to(device) for t in rank_batches(MODEL, BATCH, 0, r, count=1)[0])
        loss_fn(MODEL)(model(x), y).backward()
        per_rank.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).double().cpu())
    mean = sum(per_rank) / ranks
    out: dict[str, Any] = {"backend": backend, "device": device, "ranks": ranks, "formats": {}}
    for name, got in raw.items():
        if not isinstance(got, dict) or "grad" not in got:
            continue
        grad = torch.tensor(got["grad"], dtype=torch.float64)
        err = (grad - mean).abs()
        if name == "none":
            bound = 1e-5 * mean.abs() + 1e-7  # fp32 sums in another order than here
        else:
            bound = error_bound(name, [g.float() for g in per_rank]).double()
        out["formats"][name] = {"path": got["path"], "calls": got["calls"], "device": got.get("device", "?"),
                                "max_abs_error": float(err.max()), "excess": float((err - bound).max()),
                                "within_bound": bool((err <= bound).all())}
    out["ok"] = bool(out["formats"]) and all(f["within_bound"] for f in out["formats"].values())
    return out


def main(argv: list[str]) -> int:
    backend, device, ranks, path = argv[1], argv[2], int(argv[3]), argv[4]
    result = check_hooks(backend, device, ranks)
    from sim.fileio import atomic_write_text

    atomic_write_text(path, json.dumps(result, indent=1))
    for name, f in result["formats"].items():
        print(f"{name:10s} {f['path']:30s} calls {f['calls']}  max |error| {f['max_abs_error']:.3g}  "
              f"{'within' if f['within_bound'] else 'OUTSIDE'} its bound  on {f['device']}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
