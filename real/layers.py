"""The simulator's view of a torch model: one row per top-level child, and how measured
per-child times map onto a zoo layer table.

Only used where the simulator's zoo lacks a CPU-sized model (the zoo's tables come from
``real.derive``); FLOPs here are torch's FlopCounterMode counts
(matmul and convolution only: forward counted alone, backward = total - forward).
"""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def _table(name: str) -> tuple[tuple[tuple[str, Any], ...], ...]:
    import torch

    from real.derive import flop_counter
    from real.models import build_model, make_batch

    model = build_model(name, seed=0)
    batch = 2
    x, _ = make_batch(name, batch, torch.Generator().manual_seed(0))
    rows = []
    for i, child in enumerate(model):
        with flop_counter() as fwd:
            out = child(x)
        x_req = x.detach().requires_grad_(x.is_floating_point())
        with flop_counter() as total:
            out2 = child(x_req)
            if out2.requires_grad:
                out2.float().sum().backward()
        fwd_flops = fwd.get_total_flops() / batch
        rows.append(tuple({
            "layer": f"{i}_{type(child).__name__.lower()}",
            "kind": type(child).__name__,
            "param_count": sum(p.numel() for p in child.parameters()),
            "fwd_flops": float(fwd_flops),
            "bwd_flops": float(max(0.0, total.get_total_flops() / batch - fwd_flops)),
            "activation_elems": float(out.numel() / batch),
        }.items()))
        x = out.detach()
    return tuple(rows)


def torch_layer_table(name: str) -> list[dict[str, Any]]:
    """Rows for ``workload.layers`` (sim/workload.py's custom-table form)."""
    return [dict(row) for row in _table(name)]


def group_children(param_counts: list[int], n_layers: int) -> list[list[int]] | None:
    """Map top-level children onto ``n_layers`` zoo layers.

    One to one when the counts agree; otherwise each group starts at a child with parameters
    (parameter-free activations and pools join the layer before them). None if that does not
    give ``n_layers`` groups either.
    """
    if len(param_counts) == n_layers:
        return [[i] for i in range(n_layers)]
    groups: list[list[int]] = []
    for i, count in enumerate(param_counts):
        if count > 0 or not groups:
            groups.append([i])
        else:
            groups[-1].append(i)
    return groups if len(groups) == n_layers else None
