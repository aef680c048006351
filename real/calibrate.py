"""Measure this machine and write the calibration directory the simulator loads (sim/calibration.py).

1. device: copy bandwidth, sgemm rate and a tiny op's latency (this process, all threads);
2. per-layer forward/backward times of each CPU-sized workload alone and with k co-located
   ranks (k processes running the same profile at once, the same threads per rank for every k),
   and the whole compute-only training step with k co-located ranks at the harness' threads
   (the layer profile gives the shares, the step the totals: sim/calibration.py);
3. collective microbenchmarks per link setting (real/bench_comm.py) and their alpha-beta fits
   (real/fit.py), the allreduce fit becoming the catalog's link entry.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

import yaml

from real.bench_comm import measure_collectives
from real.launch import launch
from real.results import cpu_model, git_revision, write_rows
from sim.fileio import atomic_write_text
from sim.fit import fit_alpha_beta, link_parameters

DEFAULT_BATCH = {"mlp": 64, "small_cnn": 32, "small_transformer": 8}
DEVICE_NAME = "cpu_local"


def device_microbench(size_bytes: int = 64 * 2**20, repeats: int = 7) -> dict[str, float]:
    """copy_Bps: bytes copied / s (memcpy convention); sgemm_flops: 2 n^3 / t at n = 1024;
    op_latency_s: a 1-element add (the floor of a tiny layer)."""
    import torch

    src = torch.ones(size_bytes // 4)
    dst = torch.empty_like(src)

    def best(fn) -> float:
        fn()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    copy_s = best(lambda: dst.copy_(src))
    a = torch.randn(1024, 1024)
    mm_s = best(lambda: a @ a)
    one = torch.ones(1)
    tiny_s = best(lambda: [one.add(one) for _ in range(1000)]) / 1000
    return {"copy_Bps": size_bytes / copy_s, "sgemm_flops": 2 * 1024**3 / mm_s, "op_latency_s": tiny_s,
            "threads": torch.get_num_threads()}


def profile_colocated(models: list[str], batches: dict[str, int], k: int, *, iterations: int, warmup: int,
                      timeout_s: float, threads: int = 1) -> list[dict[str, Any]]:
    """Run the layer profile on k processes at once; per model, the mean over ranks."""
    job = {"kind": "layer_profile", "models": models, "batch_sizes": None, "iterations": iterations,
           "warmup": warmup, "backend": "gloo", "threads": threads}
    out = []
    for model in models:
        job = {**job, "models": [model], "batch_sizes": [batches[model]]}
        raw = launch(job, k, timeout_s=timeout_s, deadline_s=timeout_s * 4 + 60)
        per_rank = [r[0] for r in raw["ranks"]]
        first = per_rank[0]
        out.append({**first, "fwd_s": _rank_mean(per_rank, "fwd_s"), "bwd_s": _rank_mean(per_rank, "bwd_s"),
                    "iteration_wall_s": statistics.fmean(r["iteration_wall_s"] for r in per_rank),
                    "iteration_cpu_s": statistics.fmean(r["iteration_cpu_s"] for r in per_rank)})
    return out


def profile_steps(models: list[str], batches: dict[str, int], k: int, *, iterations: int, warmup: int,
                  timeout_s: float, min_time_s: float = 1.0, max_iterations: int = 200) -> dict[str, dict[str, Any]]:
    """The whole compute-only step of each model on k co-located ranks at the harness' threads
    (real/profile_layers.py ``run_step_profile``); per model: forward, backward, optimizer, total."""
    from sim.workload import load_workload, zoo_names

    out = {}
    for model in models:
        optimizer = load_workload(model).optimizer if model in zoo_names() else "momentum"
        job = {"kind": "step_profile", "models": [model], "batch_sizes": [batches[model]], "iterations": iterations,
               "warmup": warmup, "min_time_s": min_time_s, "max_iterations": max_iterations, "backend": "gloo",
               "threads": 0, "optimizer": optimizer}
        raw = launch(job, k, timeout_s=timeout_s, deadline_s=timeout_s * 4 + 60)
        out[model] = {**{key: v for key, v in raw["rows"][0].items() if key not in ("model", "batch_size")},
                      "cpu_steal_fraction": raw["cpu_steal_fraction"], "launches": raw["launches"]}
    return out


def profile_step_round(models: list[str], batches: dict[str, int], colocated: tuple[int, ...], *, iterations: int,
                       warmup: int, timeout_s: float, min_time_s: float, max_iterations: int, progress=print,
                       label: str = "") -> dict[str, dict[int, dict[str, Any]]]:
    """One launch of the whole compute-only step per k in ``colocated`` (and 1): {model: {k: entry}}."""
    out: dict[str, dict[int, dict[str, Any]]] = {m: {} for m in models}
    for k in sorted(set(colocated) | {1}):
        progress(f"whole compute-only steps with {k} co-located rank(s){label}")
        for m, entry in profile_steps(models, batches, k, iterations=iterations, warmup=warmup, timeout_s=timeout_s,
                                      min_time_s=min_time_s, max_iterations=max_iterations).items():
            out[m][k] = entry
    return out


def median_round(entries: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The entry whose ``key`` is the median of the rounds (the lower one of an even count), with
    every round's value beside it (``rounds_<key>``). Rounds are separate launches minutes apart:
    on a shared 2-core machine a whole launch can run 1.5-1.7x slow (observed: a 2-rank step of
    95 ms in one calibration, 58 ms in the next), which a median over repetitions inside one
    launch cannot see."""
    if not entries:
        raise ValueError("median_round needs at least one round")
    ordered = sorted(entries, key=lambda e: e[key])
    return {**ordered[(len(ordered) - 1) // 2], f"rounds_{key}": [e[key] for e in entries]}


def median_per_size(launches: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per (collective, size): the launch whose time is the median (``median_round``);
    a small allreduce on 2 shared cores reads 0.4-1.8 ms from one launch to the next, while the
    repetitions inside a launch agree far better. Rows without a time (unsupported) come from
    the first launch."""
    timed: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for rows in launches:
        for row in rows:
            if "time_s" in row:
                timed.setdefault((row["collective"], row["size_bytes"]), []).append(row)
    out = [median_round(entries, "time_s") for entries in timed.values()]
    return out + [row for row in launches[0] if "time_s" not in row]


def _rank_mean(per_rank: list[dict[str, Any]], key: str) -> list[float]:
    return [statistics.fmean(r[key][i] for r in per_rank) for i in range(len(per_rank[0][key]))]


def _zoo_mapping(model: str, names: list[str], params: list[int]) -> list[list[int]] | None:
    """Group torch children onto the simulator zoo's layer names, when the zoo has the model."""
    from real.layers import group_children
    from sim.workload import load_workload, zoo_names

    if model not in zoo_names():
        return None
    groups = group_children(params, len(load_workload(model).layers))
    return groups


def _layer_entry(model: str, profiles: dict[int, dict[str, Any]]) -> dict[str, Any]:
    alone = profiles[1]
    groups = _zoo_mapping(model, alone["layers"], alone["param_counts"])
    if groups is None:
        names, groups = alone["layers"], [[i] for i in range(len(alone["layers"]))]
    else:
        from sim.workload import load_workload

        names = [layer.name for layer in load_workload(model).layers]
    colocated = {}
    for k, p in sorted(profiles.items()):
        colocated[k] = {"fwd_s": [sum(p["fwd_s"][i] for i in g) for g in groups],
                        "bwd_s": [sum(p["bwd_s"][i] for i in g) for g in groups],
                        "iteration_wall_s": p["iteration_wall_s"], "iteration_cpu_s": p["iteration_cpu_s"],
                        "threads_per_rank": p["threads"]}
    return {"layers": names, "torch_children": [[alone["layers"][i] for i in g] for g in groups],
            "colocated": colocated}


def calibrate(out_dir: str | Path, *, models: list[str] | None = None, colocated: tuple[int, ...] = (1, 2, 4),
              comm_ranks: tuple[int, ...] = (2,), links: tuple[str | None, ...] = (None,),
              collectives: tuple[str, ...] = ("allreduce", "allgather", "reduce_scatter", "broadcast", "sendrecv"),
              max_bytes: int = 64 * 2**20, iterations: int = 10, warmup: int = 2, timeout_s: float = 60,
              threads: int = 1, min_time_s: float = 0.5, max_iterations: int = 200, step_rounds: int = 3,
              comm_rounds: int = 1, progress=print) -> dict[str, Any]:
    out = Path(out_dir)
    models = models or list(DEFAULT_BATCH)
    batches = {m: DEFAULT_BATCH.get(m, 16) for m in models}
    progress("device microbenchmarks")
    dev = device_microbench()
    profiles: dict[str, dict[int, dict[str, Any]]] = {m: {} for m in models}
    for k in sorted(set(colocated) | {1}):
        progress(f"per-layer times with {k} co-located rank(s)")
        for entry in profile_colocated(models, batches, k, iterations=iterations, warmup=warmup, timeout_s=timeout_s,
                                       threads=threads):
            profiles[entry["model"]][k] = entry
    rounds: dict[str, dict[int, list[dict[str, Any]]]] = {m: {} for m in models}
    for r in range(step_rounds):
        for m, by_k in profile_step_round(models, batches, colocated, iterations=iterations, warmup=warmup,
                                          timeout_s=timeout_s, min_time_s=2 * min_time_s,
                                          max_iterations=max_iterations, progress=progress,
                                          label=f", round {r + 1}/{step_rounds}").items():
            for k, entry in by_k.items():
                rounds[m].setdefault(k, []).append(entry)
    steps = {m: {k: median_round(entries, "total_s") for k, entries in by_k.items()} for m, by_k in rounds.items()}
    slowdown = {k: statistics.fmean(profiles[m][k]["iteration_wall_s"] / profiles[m][1]["iteration_wall_s"]
                                    for m in models) for k in sorted(profiles[models[0]])}
    workloads = {m: {batches[m]: {**_layer_entry(m, profiles[m]), "steps": steps[m]}} for m in models}
    comm_rows, fits, catalog_links = [], [], {}
    for link in links:
        for n in comm_ranks:
            launches = []
            for r in range(comm_rounds):
                progress(f"collectives on {n} ranks, link {link or 'loopback'}"
                         + (f", round {r + 1}/{comm_rounds}" if comm_rounds > 1 else ""))
                launches.append(measure_collectives(n, list(collectives), max_bytes=max_bytes, iterations=iterations,
                                                    warmup=warmup, timeout_s=timeout_s, link=link,
                                                    min_time_s=min_time_s, max_iterations=max_iterations))
            rows = median_per_size(launches)
            comm_rows.extend(rows)
            for c in collectives:
                sel = [r for r in rows if r["collective"] == c and r.get("wrong") == 0]
                if len(sel) < 2:
                    continue
                f = fit_alpha_beta([r["size_bytes"] for r in sel], [r["time_s"] for r in sel])
                a_s, b_Bps = link_parameters(f, c, n)
                name = f"gloo_{'tbf_' + link if link else 'loopback'}"
                fits.append({"name": name, "backend": "gloo", "collective": c, "link": link or "loopback",
                             "world_size": n, "form": "t = alpha + size / bandwidth_alg (fit), mapped to the "
                             "simulator's closed form at this n (real/fit.py)",
                             "alpha_us": f.alpha_s * 1e6, "bandwidth_alg_GBps": f.bandwidth_Bps / 1e9,
                             "link_latency_us": a_s * 1e6, "link_bandwidth_GBps": b_Bps / 1e9,
                             "rms_relative_error": f.rms_relative_error, "points": f.points})
                if c == "allreduce" and name not in catalog_links:
                    catalog_links[name] = {
                        "kind": "loopback", "bandwidth_GBps": round(b_Bps / 1e9, 6), "latency_us": 0,
                        "software_latency_us": round(a_s * 1e6, 3), "efficiency": 1.0,
                        "source": f"scalebench calibrate {time.strftime('%Y-%m-%d')}: gloo allreduce on {n} ranks, "
                                  f"{link or 'unshaped'} loopback, fit t = alpha + S/B (rms rel. error "
                                  f"{f.rms_relative_error:.2f}) mapped onto the ring form at n={n}; {cpu_model()}; "
                                  "no added latency (netem unavailable)"}
    mem_GiB = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    catalog = {
        "gpus": {DEVICE_NAME: {
            "kind": "cpu",  # collectives default to gloo on it, as the harness runs them (not NCCL)
            "peak_tflops": {"fp32": round(dev["sgemm_flops"] / 1e12, 6)}, "efficiency": 1.0,
            "memory_bandwidth_GBps": round(2 * dev["copy_Bps"] / 1e9, 3), "memory_GiB": round(mem_GiB, 1),
            "launch_overhead_us": round(dev["op_latency_s"] * 1e6, 3),
            "source": f"scalebench calibrate {time.strftime('%Y-%m-%d')} on {cpu_model()}, {os.cpu_count()} cores, "
                      f"{dev['threads']} threads: peak = measured 1024^3 sgemm rate; memory bandwidth = 2 x copy "
                      "bytes/s (read + write); launch overhead = a 1-element add"}},
        "links": catalog_links,
    }
    device = {
        "device": DEVICE_NAME, "cpu_model": cpu_model(), "cores": os.cpu_count(), "git_revision": git_revision(),
        "measured": dev, "colocation_slowdown": slowdown,
        "slowdown_model": "per-rank time with k co-located ranks = alone x s(k); measured k as listed, linear "
                          "between them, s(k_max) x k / k_max beyond (processor sharing)",
        "threads_per_rank": threads,
        "threads_note": "every k measured with the same torch threads per rank, so s(k) is the sharing alone; "
                        "the harness runs cores // ranks threads per rank (1 for 2+ ranks on 2 cores). Two "
                        "threads on a loaded 2-core machine spin in OpenMP barriers (measured: 30x slower)",
        "workloads": workloads,
    }
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "catalog.yaml", yaml.safe_dump(catalog, sort_keys=False))
    atomic_write_text(out / "device.yaml", yaml.safe_dump(device, sort_keys=False))
    atomic_write_text(out / "links.yaml", yaml.safe_dump({"fits": fits}, sort_keys=False))
    if comm_rows:
        write_rows(out / "comm.csv", comm_rows)
    return {"dir": str(out), "slowdown": slowdown, "links": catalog_links, "device": dev}
