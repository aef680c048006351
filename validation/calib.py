"""The calibration the validation uses, and the network model validated on its own.

Nothing here is fitted on the points being evaluated:
- compute: per-layer forward/backward times from ``scalebench calibrate``'s layer profiles
  (each top-level module timed on a detached input, alone and with k co-located ranks), never
  from a training iteration of the sweep;
- network: alpha-beta fits of collective microbenchmarks (gloo, sizes 1 KiB x 4^k), one fit per
  (link setting, world size), because gloo picks its own algorithm per rank count and a shared
  tbf divides one rate among all ranks: a ring with 2(n-1) steps does not carry a 2-rank fit to
  4 ranks (DESIGN.md, observed). Each fit becomes a catalog link ``gloo_<link>_n<n>``.
- the network model alone is checked at held-out sizes (2 KiB x 4^k, between the fitted ones).

The measurements themselves are real/'s (real/calibrate.py, real/microbench.py,
real/stall_bench.py, real/codec_bench.py, real/pipeline_bench.py) and so are the fits as
catalog links (real/calibrated_links.py); this module asks for what is missing and predicts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from real.calib_lookup import nearest_world_size
from real.calibrated_links import calibrated_catalog, link_for
from real.codec_bench import CODEC_OPS_FILE, calibrate_codec_ops
from real.microbench import CODECS_FILE, FRAMEWORK_FILE, calibrate_codecs, calibrate_framework
from real.pipeline_bench import PIPELINE_FILE, calibrate_pipeline
from real.stall_bench import STALL_FILE, calibrate_stalls, stall_for
from sim.calibration import Calibration, load_calibration
from sim.catalog import Catalog
from sim.cluster import Cluster
from sim.costs.collectives import bytes_by_link, collective_time_s, ring_allgather, ring_allreduce
from sim.costs.network import message_time_s

PIECES = (("framework_ranks", FRAMEWORK_FILE), ("stall_ranks", STALL_FILE), ("codec_ranks", CODECS_FILE),
          ("codec_op_ranks", CODEC_OPS_FILE), ("pipeline_ranks", PIPELINE_FILE))
"""Calibration pieces beyond device.yaml: the settings key that asks for one, and its file."""


def calibration_missing(directory: str | Path, settings: dict[str, Any]) -> list[str]:
    """The files a calibration for ``settings`` lacks in ``directory`` (empty: complete)."""
    directory = Path(directory)
    missing = [] if (directory / "device.yaml").exists() else ["device.yaml"]
    return missing + [name for key, name in PIECES if settings.get(key) and not (directory / name).exists()]


def ensure_calibration(directory: str | Path, settings: dict[str, Any], *, recalibrate: bool, progress=print,
                       busy_percent: float | None = None) -> Calibration:
    """Load the calibration in ``directory``; run ``scalebench calibrate``'s measurement first
    when it is missing or ``recalibrate`` is set. With ``busy_percent``, a launch disturbed by
    other processes is launched again (real/load.py) and what every launch saw of the rest of the
    machine goes into ``directory/record.json`` (validation/record.py) with the machine's name."""
    from contextlib import nullcontext

    from real.load import LAUNCH_LOG, retry_when_busy
    from validation import record

    directory = Path(directory)
    first = len(LAUNCH_LOG)
    busy = retry_when_busy(busy_percent / 100, progress) if busy_percent is not None else nullcontext()
    with busy:
        _calibrate_missing(directory, settings, recalibrate=recalibrate, progress=progress)
    launches = LAUNCH_LOG[first:]
    if launches:
        kept = [] if recalibrate else record.read(directory).get("launches", [])
        record.write(directory, launches=kept + launches)
    return load_calibration(directory)


def _calibrate_missing(directory: Path, settings: dict[str, Any], *, recalibrate: bool, progress) -> None:
    if recalibrate or not (directory / "device.yaml").exists():
        from real.calibrate import calibrate

        links = tuple(None if x == "loopback" else x for x in settings.get("links", ["loopback"]))
        if any(links):
            from real.netem import availability

            ok, why = availability()
            if not ok:
                progress(f"shaped links skipped in calibration: {why}")
                links = tuple(x for x in links if x is None) or (None,)
        calibrate(directory, models=list(settings.get("models", ["mlp", "small_cnn", "small_transformer"])),
                  colocated=tuple(settings.get("colocated", (1, 2, 4))), comm_ranks=tuple(settings.get("ranks", (2, 4))),
                  links=links, collectives=("allreduce", "allgather", "sendrecv"),
                  max_bytes=int(settings.get("max_bytes", 4 * 2**20)), iterations=int(settings.get("iterations", 8)),
                  step_rounds=int(settings.get("step_rounds", 3)), comm_rounds=int(settings.get("comm_rounds", 1)),
                  warmup=2, progress=progress)
    if settings.get("framework_ranks") and (recalibrate or not (directory / FRAMEWORK_FILE).exists()):
        calibrate_framework(directory, tuple(settings["framework_ranks"]), progress=progress)
    if settings.get("stall_ranks") and (recalibrate or not (directory / STALL_FILE).exists()):
        calibrate_stalls(directory, tuple(settings["stall_ranks"]),
                         bursts_ms=tuple(settings.get("stall_bursts_ms", (0.25, 1, 4, 16))),
                         rounds=int(settings.get("comm_rounds", 1)), progress=progress)
    if settings.get("codec_ranks") and (recalibrate or not (directory / CODECS_FILE).exists()):
        calibrate_codecs(directory, tuple(settings["codec_ranks"]), progress=progress)
    if settings.get("codec_op_ranks") and (recalibrate or not (directory / CODEC_OPS_FILE).exists()):
        calibrate_codec_ops(directory, tuple(settings["codec_op_ranks"]), progress=progress)
    if settings.get("pipeline_ranks") and (recalibrate or not (directory / PIPELINE_FILE).exists()):
        calibrate_pipeline(directory, tuple(settings["pipeline_ranks"]),
                           micro_batches=dict(settings.get("pipeline_micro_batch") or {}),
                           rounds=int(settings.get("step_rounds", 3)), progress=progress)


def predict_collective_s(collective: str, size_bytes: float, cluster: Cluster) -> float:
    """The simulator's cost layer for one microbenchmark (nccl-tests' size conventions)."""
    if collective == "allreduce":
        return collective_time_s(ring_allreduce(size_bytes, cluster), cluster)
    if collective == "allgather":
        return collective_time_s(ring_allgather(size_bytes, cluster), cluster)
    return message_time_s(size_bytes, cluster.intra_link)


def wire_bytes(collective: str, size_bytes: float, cluster: Cluster) -> float:
    """Bytes one call puts on the wire, all ranks together (what one shared tbf carries): the
    ring's 2(n-1)/n S per rank for allreduce, (n-1)/n S for allgather, S for sendrecv."""
    if collective == "allreduce":
        return sum(bytes_by_link(ring_allreduce(size_bytes, cluster)).values())
    if collective == "allgather":
        return sum(bytes_by_link(ring_allgather(size_bytes, cluster)).values())
    return size_bytes * cluster.world_size


def fitted_cluster(cal: Calibration, catalog: Catalog, link: str, ranks: int, collective: str = "allreduce") -> Cluster:
    """One node of ``ranks`` calibrated devices on the link fitted for ``collective`` at the
    nearest measured world size (``link_for``)."""
    lk = catalog.link(link_for(cal, link, ranks, collective))
    return Cluster(nodes=1, gpus_per_node=ranks, gpu=catalog.gpu(cal.device_name), intra_link=lk, inter_link=lk)


def bucket_carries(link: str, bytes_per_iteration: float, iteration_s: float) -> bool:
    """Whether the emulated link's token bucket (real/netem.py: one tbf of rate R and burst B
    that every flow shares) lets an iteration's traffic V through at the unshaped speed: V <= B
    and V <= R x the iteration (the bucket refills between iterations). The link fits are taken
    back to back at sizes up to MiBs and pay the rate; a real link of rate R has no such bucket.
    The mlp's DDP step on 4 ranks moves 14.6 KB per iteration of ~2.8 ms: at 100 Mbit/s that is
    1.2 ms at the rate, 0 through a bucket of 133 KB that refills 35 KB per iteration (predicted
    on the rate: +26-30% in the runs of 2026-11-23). Where V > R x the iteration the bucket
    carries some iterations and empties (100 Mbit/s, 2 ranks, 8 KiB sendrecvs after a barrier:
    median 0.27 ms, 90th percentile 3.9 ms), and on average the rate holds: the mean is what
    the fits and the points are measured as (real.results.mean_iqr)."""
    from real.netem import burst_bytes, parse_rate

    rate_Bps = parse_rate(link) / 8
    return bytes_per_iteration <= burst_bytes(rate_Bps * 8) and bytes_per_iteration <= rate_Bps * iteration_s


BARRIER_BYTES = 4
"""What the held-out check counts a barrier as: the smallest allreduce (gloo's barrier is a
round of small messages among all ranks)."""


def held_out_s(cal: Calibration, catalog: Catalog, collective: str, link: str, ranks: int,
               size_bytes: float) -> tuple[float, str]:
    """(seconds, catalog link) the calibrated cost layer predicts for one collective
    microbenchmark (real/bench_comm.py) at a held-out size: on the link fitted at that world
    size; on an emulated link whose token bucket carries the benchmark's traffic
    (``bucket_carries``: each repetition is one call after a barrier, both at loopback speed),
    on the loopback fit, as the validation points are."""
    cluster = fitted_cluster(cal, catalog, link, ranks, collective)
    predicted = predict_collective_s(collective, size_bytes, cluster), cluster.intra_link.name
    if link == "loopback":
        return predicted
    free = fitted_cluster(cal, catalog, "loopback", ranks, collective)
    free_s = predict_collective_s(collective, size_bytes, free)
    barrier_s = predict_collective_s("allreduce", BARRIER_BYTES, fitted_cluster(cal, catalog, "loopback", ranks))
    if bucket_carries(link, wire_bytes(collective, size_bytes, cluster), free_s + barrier_s):
        return free_s, free.intra_link.name
    return predicted


def held_out_row(cal: Calibration, catalog: Catalog, measured: dict[str, Any]) -> dict[str, Any]:
    """One network-validation row: a microbenchmark's measurement (collective, ranks, link,
    size_bytes, time_s) beside the cost layer's prediction (``held_out_s``)."""
    n, link, collective, size = int(measured["ranks"]), measured["link"], measured["collective"], measured["size_bytes"]
    pred, name = held_out_s(cal, catalog, collective, link, n, size)
    return {"point": f"{collective}-n{n}-{link}-{size}", "collective": collective, "ranks": n, "link": link,
            "size_bytes": size, "catalog_link": name, "measured_s": measured["measured_s"],
            "measured_iqr_s": measured.get("measured_iqr_s"), "predicted_s": pred,
            "rel_error": (pred - measured["measured_s"]) / measured["measured_s"]}


def network_rows(cal: Calibration, settings: dict[str, Any], *, timeout_s: float, progress=print) -> list[dict[str, Any]]:
    """Measure collectives at held-out sizes; predict each with the fitted link of its (link, n)."""
    from real.bench_comm import measure_collectives

    catalog = calibrated_catalog(cal)
    rows = []
    links = list(settings.get("links", ["loopback"]))
    shaped_ok = True
    if any(x != "loopback" for x in links):
        from real.netem import availability

        shaped_ok, why = availability()
        if not shaped_ok:
            progress(f"network validation: shaped links skipped ({why})")
    collectives = list(settings.get("collectives", ["allreduce"]))
    for link in links:
        if link != "loopback" and not shaped_ok:
            continue
        for n in settings.get("ranks", [2]):
            progress(f"network validation: {', '.join(collectives)} on {n} ranks, link {link}")
            measured = measure_collectives(n, collectives, min_bytes=int(settings.get("min_bytes", 2048)),
                                           max_bytes=int(settings.get("max_bytes", 2 * 2**20)),
                                           iterations=int(settings.get("iterations", 6)), warmup=1,
                                           min_time_s=0.5, max_iterations=200,
                                           timeout_s=timeout_s, link=None if link == "loopback" else link)
            rows += [held_out_row(cal, catalog, {"collective": r["collective"], "ranks": n, "link": link,
                                                 "size_bytes": r["size_bytes"], "measured_s": r["time_s"],
                                                 "measured_iqr_s": r.get("time_iqr_s")})
                     for r in measured if "time_s" in r]
    return rows


FRAMEWORK_GRADIENT_BYTES = (16 * 16 + 16) * 4
"""The gradient of the framework microbenchmark's Linear(16, 16) in fp32 (files written before
it recorded ``gradient_bytes``)."""


def framework_overhead_s(cal: Calibration, ranks: int) -> float:
    """DDP's per-iteration cost beyond compute and the wire, as the simulator has to add it: the
    one-layer DDP step minus the same step without DDP (validation/microbench.py) minus the
    simulator's own prediction of that gradient's allreduce on the calibrated loopback link at
    that world size, minus the stall of an allreduce after that step's compute (the model adds
    it as ``comm_stall``, validation/stall_bench.py), at the nearest measured world size (0 with
    none, or where the model explains it all).

    Not minus the bare allreduce timed beside it: a 1 KiB allreduce on 2 shared cores reads
    0.4-1.8 ms from one launch to the next (DESIGN.md; the link fit's small sizes and this bare
    one are different launches), so subtracting a different draw than the one the link model
    carries counted the latency twice (mlp on 2 ranks: 1.0 ms of overhead on top of a 1.7 ms
    latency, where the whole DDP step of the one-layer model took 2.0 ms beyond its compute).
    As a residual of the model, the model reproduces the one-layer DDP step it was taken from."""
    found = nearest_world_size(cal.path / FRAMEWORK_FILE, ranks)
    if found is None:
        return 0.0
    k, entry = found
    wire_s = stall_s = 0.0
    if k > 1:  # one rank sends nothing in the simulator
        cluster = fitted_cluster(cal, calibrated_catalog(cal), "loopback", k)
        gradient_bytes = float(entry.get("gradient_bytes", FRAMEWORK_GRADIENT_BYTES))
        wire_s = predict_collective_s("allreduce", gradient_bytes, cluster)
        # its allreduce follows the one-layer step's compute: the model adds that stall itself
        stall_s = stall_for(cal.path, k, float(entry["local_step_s"]), gradient_bytes)
    return max(0.0, float(entry["ddp_step_s"]) - float(entry["local_step_s"]) - wire_s - stall_s)
