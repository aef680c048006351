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
own thread, then the timed allreduce; ``busy_s`` of real/bench_comm.py), stall(n, b, S) = the
median in-situ time minus the median back-to-back time of an allreduce of S = 1 KiB and 1 MiB,
each the median of ``rounds`` launches. The validation adds stall(n, b, S) once per iteration to
a DDP or synchronous PS step, b = the step's predicted compute, S = the wire bytes of its first
collective, linear in b between the bursts and in log S between the two sizes
(validation/points.py). The stall depends on S after short bursts: on 2 ranks after 0.25 ms of
compute a 1 KiB allreduce took no longer than back to back (-0.01 and -0.11 ms in two
calibrations of 2026-11-25) where 1 MiB took 0.3-0.7 ms longer; after 4-16 ms both sizes stall
alike (1.6-2.6 ms).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import yaml

from real.calib_lookup import nearest_world_size, piecewise_linear
from sim.fileio import atomic_write_text

STALL_FILE = "comm_stall.yaml"
STALL_SIZES_BYTES = (1024, 1024 * 1024)
"""Latency-bound and bandwidth-bound; sizes between them are interpolated in log S."""


def _times_s(n: int, busy_s: float) -> dict[int, float]:
    from real.bench_comm import measure_collectives

    rows = measure_collectives(n, ["allreduce"], min_bytes=min(STALL_SIZES_BYTES), max_bytes=max(STALL_SIZES_BYTES),
                               iterations=8, warmup=2, min_time_s=0.5, max_iterations=200, busy_s=busy_s)
    return {int(r["size_bytes"]): float(r["time_s"]) for r in rows if "time_s" in r and r["size_bytes"] in STALL_SIZES_BYTES}


def stall_entry(hot: list[dict[int, float]], in_situ: dict[float, list[dict[int, float]]]) -> dict[str, Any]:
    """From launches (size -> seconds) back to back and per burst (ms): the medians, the stall per
    size and burst (``stall_by_size_s``; clipped at 0: no faster than back to back) and, for
    reference, their mean over the sizes per burst (``stall_s``)."""
    def med(launches: list[dict[int, float]], size: int) -> float:
        return statistics.median(launch[size] for launch in launches)

    hot_s = {s: med(hot, s) for s in STALL_SIZES_BYTES}
    in_situ_s = {float(b): {s: med(ls, s) for s in STALL_SIZES_BYTES} for b, ls in sorted(in_situ.items())}
    by_size = {s: {b: max(0.0, times[s] - hot_s[s]) for b, times in in_situ_s.items()} for s in STALL_SIZES_BYTES}
    stalls = {b: statistics.fmean(by_size[s][b] for s in STALL_SIZES_BYTES) for b in in_situ_s}
    return {"back_to_back_s": hot_s, "in_situ_s": in_situ_s, "stall_by_size_s": by_size, "stall_s": stalls}


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


def stall_by_size(entry: dict[str, Any]) -> dict[int, dict[float, float]]:
    """{size: {burst ms: stall s}} of one world size's entry: its ``stall_by_size_s``, or, in a
    file written before that key, from its ``in_situ_s`` and ``back_to_back_s`` medians (clipped
    at 0 as ``stall_entry`` does); empty where neither is there."""
    if entry.get("stall_by_size_s"):
        return {int(s): {float(b): float(v) for b, v in by.items()} for s, by in entry["stall_by_size_s"].items()}
    hot, in_situ = entry.get("back_to_back_s") or {}, entry.get("in_situ_s") or {}
    sizes = {int(s) for s in hot} & {int(s) for times in in_situ.values() for s in times}
    return {s: {float(b): max(0.0, float(times[s]) - float(hot[s])) for b, times in in_situ.items() if s in times}
            for s in sorted(sizes)}


def stall_at_size_s(by_size: dict[int, dict[float, float]], burst_s: float, size_bytes: float) -> float:
    """stall(b, S): each measured size's stall at b (``interpolate_stall_s``), linear in log S
    between the sizes, held beyond the smallest and the largest."""
    import math

    curve = sorted((math.log(s), interpolate_stall_s(by, burst_s)) for s, by in by_size.items())
    return piecewise_linear(curve, math.log(max(size_bytes, 1.0)))


def stall_for(cal_dir: str | Path, ranks: int, burst_s: float, size_bytes: float | None = None) -> float:
    """The calibrated stall at the nearest measured world size after ``burst_s`` of compute, for a
    first collective of ``size_bytes`` on the wire (None: the mean over the measured sizes);
    0 with no file, or for 1 rank."""
    if ranks < 2:
        return 0.0
    found = nearest_world_size(Path(cal_dir) / STALL_FILE, ranks)
    if found is None:
        return 0.0
    by_size = stall_by_size(found[1]) if size_bytes is not None else {}
    if by_size:
        return stall_at_size_s(by_size, burst_s, size_bytes or 0.0)
    return interpolate_stall_s(found[1].get("stall_s") or {}, burst_s)
