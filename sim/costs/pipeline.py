"""Pipeline parallelism, pure: stage balancing, the bubble's closed form, activation stash."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from itertools import accumulate


def bubble_fraction(p: int, m: int) -> float:
    """Idle share of a flushed pipeline with p equal stages and m micro-batches:
    (p-1)/(m+p-1), the same for GPipe and 1F1B (Huang et al. 2019 GPipe; Narayanan et al.
    2021 Megatron-LM, section 2.2)."""
    return (p - 1) / (m + p - 1)


def pipeline_time_closed_form(p: int, m: int, fwd_s: float, bwd_s: float) -> float:
    """Flush time of p equal stages, m micro-batches, free sends: (m + p - 1)(f + b)."""
    return (m + p - 1) * (fwd_s + bwd_s)


def stash_micro_batches(schedule: str, p: int, m: int, stage: int) -> int:
    """Micro-batches whose activations a stage holds at its peak: GPipe keeps all m;
    1F1B keeps at most p - stage (its warm-up depth + 1) (Narayanan et al. 2021, PipeDream-Flush)."""
    if schedule == "gpipe":
        return m
    return min(p - stage, m)


STAGE_BALANCES = ("time", "flops", "params")
"""How a pipeline's layers are cut into stages (strategy.stage_balance): by the simulator's
per-layer time (forward + backward of one micro-batch), by FLOPs (forward + backward), or by
parameter count. flops and params need no measurement, so the real harness and a calibrated
simulator cut a model identically; time is the simulator's own optimum."""


def layer_unit(name: str) -> str:
    """The pipeline unit a zoo layer belongs to: its name up to the first '.' (``1.attn.qkv`` ->
    ``1``, ``block3.fc`` -> ``block3``); stages are cut only between units, which are the model's
    top-level modules (torch's top-level children for the CPU-sized models)."""
    return name.split(".", 1)[0]


def split_units(costs: list[float], units: Sequence[str], p: int) -> list[tuple[int, int]]:
    """``balance_stages`` over the units (consecutive layers with the same unit, costs summed);
    returns [start, end) in layer indices, each stage whole units."""
    starts = [i for i in range(len(units)) if i == 0 or units[i] != units[i - 1]]
    ends = [*starts[1:], len(units)]
    bounds = _balanced(tuple(sum(costs[a:b]) for a, b in zip(starts, ends, strict=True)), p)
    return [(starts[lo], ends[hi - 1]) for lo, hi in bounds]


@lru_cache(maxsize=8192)
def _balanced(costs: tuple[float, ...], p: int) -> tuple[tuple[int, int], ...]:
    """``balance_stages``, remembered (a plan cuts the same unit costs many times)."""
    return tuple(balance_stages(list(costs), p))


def busy_stages(stage_work_s: list[float]) -> float:
    """Time-averaged number of stages computing at once in a pipeline's steady state: stage s
    is busy a share W_s / W_max of the time (the slowest stage sets the pace), so
    k_eff = sum_s W_s / max_s W_s, between 1 and p. Ranks sharing a machine's cores compete with
    k_eff busy neighbours, not with all p (processor sharing; the co-located layer profiles are
    measured with k ranks all busy)."""
    peak = max(stage_work_s)
    return sum(stage_work_s) / peak if peak > 0 else 1.0


def balance_stages(costs: list[float], p: int) -> list[tuple[int, int]]:
    """Contiguous split of layers into p non-empty stages minimising the slowest stage's cost
    (linear partition by dynamic programming, O(p L^2) at worst, pruned); returns [start, end) per stage."""
    n = len(costs)
    if not 1 <= p <= n:
        raise ValueError(f"cannot split {n} layers into {p} stages")
    prefix = [0.0, *accumulate(costs)]
    inf = float("inf")
    # best[k][j]: minimal max-stage cost of the first j layers in k stages; cut[k][j]: last cut
    best = [[inf] * (n + 1) for _ in range(p + 1)]
    cut = [[0] * (n + 1) for _ in range(p + 1)]
    best[0][0] = 0.0
    for k in range(1, p + 1):
        previous, here, cuts = best[k - 1], best[k], cut[k]  # the same lists, bound once per stage count
        for j in range(k, n - (p - k) + 1):
            end, least = prefix[j], here[j]
            for i in range(j - 1, k - 2, -1):
                segment = end - prefix[i]
                if segment >= least:
                    break  # longer last stages only cost more
                value = previous[i] if previous[i] > segment else segment
                if value < least:
                    least, cuts[j] = value, i
            here[j] = least
    bounds = []
    j = n
    for k in range(p, 0, -1):
        i = cut[k][j]
        bounds.append((i, j))
        j = i
    return bounds[::-1]
