"""The stall of a collective issued after compute, as a training step issues it.

The link fits time collectives back to back (real/bench_comm.py): gloo's threads stay hot and
every rank arrives at once. A training step's first collective follows milliseconds of compute
on every rank, and on this machine (2 vCPUs) it then takes longer, by an amount that grows
with the compute before it: a 1 KiB allreduce on 2 ranks took 0.35 ms back to back, 0.6-0.8 ms
after 0.25-2 ms of compute and 2-2.6 ms after 5-10 ms; on 4 ranks (2 per core) 1.1 ms back to
back, 2.0 ms after 0.5 ms, 3.1 ms after 2 ms, 5.0 ms after 5 ms and 7.1 ms after 10 ms; 1 MiB
likewise (2026-11-23, probes behind this file). Per iteration the extra is bimodal (0.8 or
4-5 ms for a 760 KB allreduce after 10 ms of compute on 2 ranks, the slow mode in about half
the iterations), so its median is what a point's median iteration carries.

Measured here: per world size n and compute burst b (every rank computes b with matmuls on its
own thread, then the timed allreduce; ``busy_s`` of real/bench_comm.py), stall(n, b) = the
median in-situ time minus the median back-to-back time, averaged over 1 KiB and 1 MiB, each
the median of ``rounds`` launches. The validation adds stall(n, b) once per iteration to a DDP
or synchronous PS step, b = the step's predicted compute (validation/points.py).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import yaml

from scalebench.fileio import atomic_write_text
from validation.microbench import nearest_world_size, piecewise_linear

STALL_FILE = "comm_stall.yaml"
STALL_SIZES_BYTES = (1024, 1024 * 1024)
"""Latency-bound and bandwidth-bound: the stall is the mean of the two."""


def _times_s(n: int, busy_s: float) -> dict[int, float]:
    from real.bench_comm import measure_collectives

    rows = measure_collectives(n, ["allreduce"], min_bytes=min(STALL_SIZES_BYTES), max_bytes=max(STALL_SIZES_BYTES),
                               iterations=8, warmup=2, min_time_s=0.5, max_iterations=200, busy_s=busy_s)
    return {int(r["size_bytes"]): float(r["time_s"]) for r in rows if "time_s" in r and r["size_bytes"] in STALL_SIZES_BYTES}


def stall_entry(hot: list[dict[int, float]], in_situ: dict[float, list[dict[int, float]]]) -> dict[str, Any]:
    """From launches (size -> seconds) back to back and per burst (ms): the per-burst stall."""
    def med(launches: list[dict[int, float]], size: int) -> float:
        return statistics.median(launch[size] for launch in launches)

    hot_s = {s: med(hot, s) for s in STALL_SIZES_BYTES}
    stalls = {}
    for burst_ms, launches in sorted(in_situ.items()):
        extra = [med(launches, s) - hot_s[s] for s in STALL_SIZES_BYTES]
        stalls[float(burst_ms)] = max(0.0, statistics.fmean(extra))
    return {"back_to_back_s": hot_s, "in_situ_s": {b: {s: med(ls, s) for s in STALL_SIZES_BYTES}
                                                    for b, ls in sorted(in_situ.items())},
            "stall_s": stalls}


def calibrate_stalls(directory: str | Path, ranks: tuple[int, ...] = (2, 4), bursts_ms: tuple[float, ...] = (0.25, 1, 4, 16),
                     rounds: int = 3, progress=print) -> dict[str, Any]:
    data: dict[str, Any] = {"form": __doc__.split("\n\n")[2] if __doc__ else "", "world_sizes": {}}
    for n in ranks:
        hot: list[dict[int, float]] = []
        in_situ: dict[float, list[dict[int, float]]] = {float(b): [] for b in bursts_ms}
        for r in range(rounds):
            progress(f"collective stall after compute on {n} ranks, round {r + 1}/{rounds}")
            hot.append(_times_s(n, 0.0))
            for b in bursts_ms:
                in_situ[float(b)].append(_times_s(n, b / 1e3))
        data["world_sizes"][n] = stall_entry(hot, in_situ)
    atomic_write_text(Path(directory) / STALL_FILE, yaml.safe_dump(data, sort_keys=False))
    return data


def interpolate_stall_s(stalls: dict[float, float], burst_s: float) -> float:
    """stall(b): linear in b between the measured bursts (ms), from 0 at b = 0, held at the last."""
    return piecewise_linear([(0.0, 0.0), *sorted((float(b) / 1e3, float(s)) for b, s in stalls.items())], burst_s)


def stall_for(cal_dir: str | Path, ranks: int, burst_s: float) -> float:
    """The calibrated stall at the nearest measured world size (0 with no file, or for 1 rank)."""
    if ranks < 2:
        return 0.0
    found = nearest_world_size(Path(cal_dir) / STALL_FILE, ranks)
    if found is None:
        return 0.0
    return interpolate_stall_s(found[1].get("stall_s") or {}, burst_s)
