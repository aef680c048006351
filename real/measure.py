"""``measure_point(spec) -> row``: one scenario run for real, as one result row.

The row has the simulator's columns (``sim.config.scenario_columns`` and the metrics of
``sim.result.IterationResult.metrics()``) where they are measurable, ``source="real"``, the
interquartile ranges, and environment columns (real/results.py). Definitions:
- iteration_time_s: mean over iterations of the slowest rank's iteration (warm-up excluded;
  the mean, not the median, is what a run's steps add up to: ``real.results.mean_iqr``), with
  its IQR and, for reference, its median (``iteration_time_median_s``);
- compute_time_s: the same with communication removed (every rank at once, sharing the cores);
  forward/backward/optimizer likewise;
- exposed_comm_time_s = iteration_time_s - compute_time_s, a difference of two measured means
  (``exposed_communication``): its noise ``exposed_comm_noise_s`` = 2 x the standard error of that
  difference, sqrt(s_it^2 / n_it + s_comp^2 / n_comp) (about 95 %); a difference below the noise is
  reported as such (``exposed_comm_below_noise``), a negative one within the noise as 0 (it
  cannot be negative; ``exposed_comm_measured_s`` keeps the raw difference), and one negative
  beyond the noise as not measured (NaN: compute alone was slower than whole iterations, the
  machine's load changed between the phases);
- comm_time_s: the iteration's gradient reduction replayed alone (DDP's bucket sizes);
- baseline_time_s: rank 0's compute-only iteration with the other ranks idle (T1);
- iteration_cpu_time_s: CPU time of the rank's process (all threads) per iteration, slowest rank,
  mean: on a shared machine it moves less than wall time when other work competes for cores;
- throughput = world x batch / iteration; speedup = world x T1 / TN; efficiency = T1 / TN.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from real.config import measured_labels, real_scenario
from real.load import load_columns
from real.results import environment_columns, mean_iqr, slowest_per_iteration, step_summary
from real.steal import steal_columns
from sim.config import scenario_columns
from sim.errors import ConfigError, require_positive

NAN = float("nan")


def job_for(spec: dict[str, Any], options, iterations: int, warmup: int, *, min_time_s: float = 0.0,
            max_iterations: int = 0) -> dict[str, Any]:
    kind = "ps_async" if options.strategy == "ps_async" else "train"
    return {"kind": kind, "spec": spec, "iterations": iterations, "warmup": warmup, "min_time_s": min_time_s,
            "max_iterations": max_iterations, "backend": options.backend, "device": options.device,
            "threads": options.threads}


def measure_point(spec: dict, *, iterations: int = 20, warmup: int = 3, timeout_s: float = 60,
                  link: str | None = None, topology: str = "shared", min_time_s: float = 0.0,
                  max_iterations: int = 0, trace_path: str | None = None, profile_path: str | None = None) -> dict:
    """Run ``spec`` (a scenario dict, optionally with a ``real:`` section) and return its row.

    Each timed phase runs at least ``iterations`` repetitions and, with ``min_time_s``, as many
    more as fill that time (at most ``max_iterations``; real/timing.py). With ``trace_path``, one
    more iteration is recorded phase by phase and written there as a timeline (sim/trace.py's
    format, real/phases.py). With ``profile_path``, rank 0's next iterations are recorded with
    torch.profiler and the Chrome trace written there (real/profiled.py)."""
    scenario, options, raw = run_spec(spec, iterations=iterations, warmup=warmup, timeout_s=timeout_s,
                                      link=link, topology=topology, min_time_s=min_time_s,
                                      max_iterations=max_iterations, trace=trace_path is not None,
                                      profile_path=profile_path)
    row = row_from_raw(scenario, options, raw, iterations=iterations, warmup=warmup, link=link, topology=topology)
    if trace_path is not None:
        from sim.fileio import atomic_write_json

        atomic_write_json(trace_path, measured_trace(scenario, options, raw, row))
    return row


def measured_trace(scenario, options, raw: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """The recorded iteration of every rank as a timeline (sim.trace.trace_document's format)."""
    from sim.trace import trace_document

    processes, flows = [], []
    for rank, data in enumerate(raw["ranks"]):
        traced = data.get("trace") or {}
        spans = traced.get("spans", [])
        processes.append((rank + 1, f"rank {rank}", spans))
        flows += [(rank + 1, s["args"]["ready_ms"] * 1e-3, rank + 1, s["start_s"], s["name"])
                  for s in spans if s["lane"] == "comm" and "ready_ms" in s.get("args", {})]
    longest = max((r.get("trace", {}).get("iteration_s", 0.0) for r in raw["ranks"]), default=0.0)
    other = {"source": "real", "scenario": scenario.name, "iteration_time_s": longest, "world_size": len(raw["ranks"]),
             "strategy": options.strategy, "backend": options.backend, "mean_iteration_time_s": row["iteration_time_s"],
             "limits": "one iteration after the timed ones, every rank's phases on its own clock from a common "
                       "barrier (offset by the barrier's skew); bucket starts inferred (one collective at a time); "
                       "see real/phases.py"}
    return trace_document(scenario.name, processes, flows, other)


def row_from_raw(scenario, options, raw: dict[str, Any], *, iterations: int, warmup: int, link: str | None,
                 topology: str, one_machine: bool = True) -> dict[str, Any]:
    row = {**scenario_columns(scenario), **metrics_from_ranks(raw, scenario.workload.batch_size)}
    timed = len(raw["ranks"][0].get("iteration", [])) or iterations
    row.update({"source": "real", "real_strategy": options.strategy, "compression": options.compression,
                "device": options.device, "iterations": timed, "warmup": warmup})
    row.update(environment_columns(backend=options.backend, link=link, topology=topology, threads=raw.get("threads"),
                                   cpu_binding=raw.get("cpu_binding"), device=options.device))
    row.update(measured_labels(options.backend, link, row.get("gpu_model", ""), one_machine=one_machine,
                               device=options.device))  # what ran, not the scenario's names
    row.update(steal_columns(raw))
    row.update(load_columns(raw))
    return row


MAX_TIMED_ITERATIONS = 100_000
"""Iterations of a measured phase at most (assumed: the default is 20; 100,000 of a 1 ms step are
minutes per phase; a billion ran for ever, found by scripts/bad_input_driver.py)."""
MAX_TIMEOUT_S = 86_400.0
"""A step without progress for a day is a hang (assumed; 1e30 s overflowed the launcher's C int, issue 29)."""
TOPOLOGIES = ("shared", "per_link")


def check_run_options(*, iterations: Any, warmup: Any, timeout_s: Any, link: Any = None, topology: Any = "shared",
                      min_time_s: Any = 0.0, max_iterations: Any = 0, where: str = "") -> None:
    """measure_point's own arguments, checked before anything starts (``where``: the config
    section they came from, e.g. ``real.``)."""
    require_positive(f"{where}iterations", iterations, integer=True, maximum=MAX_TIMED_ITERATIONS,
                     why="timed iterations per phase; the harness' default is 20")
    require_positive(f"{where}warmup", warmup, integer=True, allow_zero=True, maximum=MAX_TIMED_ITERATIONS,
                     why="untimed iterations first; the default is 3")
    require_positive(f"{where}timeout_s", timeout_s, maximum=MAX_TIMEOUT_S, why="a day without progress")
    if topology not in TOPOLOGIES:
        raise ConfigError(f"{where}topology", topology, TOPOLOGIES)
    if link:
        if not isinstance(link, str):
            raise ConfigError(f"{where}link", link, "a rate such as 100mbit, 1gbit or 10gbit")
        from real.netem import check_link

        try:
            check_link(link)
        except ConfigError as err:  # named --link there: name the config's field here
            if not where:
                raise
            raise ConfigError(f"{where}link", err.value, err.allowed) from None
    require_positive(f"{where}min_time_s", min_time_s, allow_zero=True)
    require_positive(f"{where}max_iterations", max_iterations, integer=True, allow_zero=True)


def run_spec(spec: dict, *, iterations: int, warmup: int, timeout_s: float, link: str | None = None,
             topology: str = "shared", min_time_s: float = 0.0,
             max_iterations: int = 0, trace: bool = False,
             profile_path: str | None = None) -> tuple[Any, Any, dict[str, Any]]:
    """Validate, launch and return (scenario, options, rank 0's gathered per-rank data)."""
    check_run_options(iterations=iterations, warmup=warmup, timeout_s=timeout_s, link=link, topology=topology,
                      min_time_s=min_time_s, max_iterations=max_iterations)
    scenario, options = real_scenario(spec)
    world = scenario.cluster.world_size
    from real.launch import check_nproc

    check_nproc(world, "cluster.gpus")
    if options.strategy == "pipeline" and world < 2:
        raise ConfigError("cluster.gpus", world, "at least 2 pipeline stages")
    job = job_for(spec, options, iterations, warmup, min_time_s=min_time_s, max_iterations=max_iterations)
    job["link"], job["topology"] = link, topology
    if options.backend == "nccl":  # the strategy's algorithm, protocol and socket settings, as NCCL reads them
        from real.config import nccl_environment

        job["env"] = nccl_environment(scenario)
    if trace:
        if options.strategy == "ps_async":
            raise ConfigError("--trace", "ps_async", "a synchronous strategy (ddp, ps_sync, pipeline)")
        job["trace"] = True
    if profile_path is not None:
        if options.strategy == "ps_async":
            raise ConfigError("--profile", "ps_async", "a synchronous strategy (ddp, ps_sync, pipeline)")
        from pathlib import Path

        from sim.fileio import check_writable

        check_writable("--profile", profile_path)  # before measuring: the ranks write it at the end
        job["profile"] = str(Path(profile_path).resolve())
    deadline_s = training_deadline_s(timeout_s, warmup, max(iterations, max_iterations))
    from real.launch import launch

    if link:
        from real.netem import Namespace

        with Namespace(link, topology if world > 1 else "shared") as ns:
            raw = launch(job, world, timeout_s=timeout_s, deadline_s=deadline_s, netns=ns.name)
    else:
        raw = launch(job, world, timeout_s=timeout_s, deadline_s=deadline_s)
    return scenario, options, raw


def training_deadline_s(timeout_s: float, warmup: int, iterations: int) -> float:
    """The launcher's backstop for a training run: every step of its four phases (baseline,
    compute-only, the iteration, communication-only) may take up to ``timeout_s`` (each step is
    watched on its own: real/launch.py), plus start-up. A run of many iterations is not cut short
    by a deadline meant for a few (``--iterations 600 --timeout 10`` used to be, at 60 s)."""
    return 30 + timeout_s * (3 + 4 * (warmup + iterations))


def exposed_communication(iteration_s: list[float], compute_s: list[float]) -> dict[str, Any]:
    """Exposed communication from the iterations' and the compute-only steps' times (each the
    slowest rank's per repetition): the difference of their means and its noise (module
    docstring). Never a negative time."""
    if not iteration_s or not compute_s:
        return {"exposed_comm_time_s": NAN, "exposed_comm_noise_s": NAN, "exposed_comm_measured_s": NAN,
                "exposed_comm_below_noise": False}
    diff = statistics.fmean(iteration_s) - statistics.fmean(compute_s)
    var = sum(statistics.variance(xs) / len(xs) for xs in (iteration_s, compute_s) if len(xs) > 1)
    noise = 2 * math.sqrt(var)
    below = abs(diff) <= noise
    value = diff if diff >= 0 else (0.0 if below else NAN)
    return {"exposed_comm_time_s": value, "exposed_comm_noise_s": noise, "exposed_comm_measured_s": diff,
            "exposed_comm_below_noise": below}


def metrics_from_ranks(raw: dict[str, Any], batch_size: int) -> dict[str, Any]:
    ranks = raw["ranks"]
    world = int(raw["world"])
    samplers = int(raw.get("workers", world))  # ranks that consume samples (not a PS server; 1 for a pipeline)
    iteration = slowest_per_iteration([r["iteration"] for r in ranks])
    it_s, it_iqr = mean_iqr(iteration)
    out: dict[str, Any] = {"world_size": world}
    compute = [r["compute"] for r in ranks if r.get("compute")]
    if compute and len(compute) == len(ranks):
        step = step_summary(compute)
        comp_s, comp_iqr = step["total_s"], step["total_iqr_s"]
        fwd_s, bwd_s, opt_s = step["fwd_s"], step["bwd_s"], step["opt_s"]
        exposed = exposed_communication(iteration, slowest_per_iteration([[sum(row) for row in rows] for rows in compute]))
    else:
        comp_s = comp_iqr = fwd_s = bwd_s = opt_s = NAN
        exposed = exposed_communication([], [])
    comm = [r["comm"] for r in ranks if r.get("comm")]
    comm_s, comm_iqr = mean_iqr(slowest_per_iteration(comm)) if comm and len(comm) == len(ranks) else (NAN, NAN)
    baseline = ranks[0].get("baseline")
    base_s = mean_iqr([sum(row) for row in baseline])[0] if baseline else NAN
    eff = base_s / it_s if it_s > 0 else NAN
    out.update({
        "iteration_time_s": it_s,
        "compute_time_s": comp_s,
        **exposed,
        "comm_time_s": comm_s,
        "forward_time_s": fwd_s,
        "backward_time_s": bwd_s,
        "optimizer_time_s": opt_s,
        "throughput_samples_per_s": samplers * batch_size / it_s,
        "baseline_time_s": base_s,
        "speedup": samplers * eff,
        "scaling_efficiency": eff,
        "bytes_intra": NAN,
        "bytes_inter": NAN,
        "buckets": len(ranks[0].get("bucket_bytes", [])) or NAN,
        "events": NAN,
        "fidelity": "real",
        "data_parallel": samplers,
        # simulator columns that are not measured separately here
        "codec_time_s": NAN,
        "coordination_time_s": NAN,
        "data_time_s": NAN,
        "data_wait_time_s": NAN,
        "bubble_time_s": NAN,
        "tp_comm_time_s": NAN,
        "pp_comm_time_s": NAN,
        "model_comm_time_s": NAN,
        "recompute_time_s": NAN,
        "memory_bytes": NAN,
        "staleness_mean": NAN,
        # measured, these are inside exposed_comm_time_s (iteration - compute-only step)
        "overlap_slowdown_time_s": NAN,
        "straggler_wait_time_s": NAN,
        "straggler_scale": NAN,
        "iteration_time_iqr_s": it_iqr,
        "iteration_time_median_s": statistics.median(iteration) if iteration else NAN,
        "iteration_cpu_time_s": _slowest_mean(ranks, "iteration_cpu"),
        "compute_time_iqr_s": comp_iqr,
        "comm_time_iqr_s": comm_iqr,
        "final_loss": _final_loss(ranks),
        "comm_path": ranks[0].get("comm_path", ""),
    })
    for key in ("staleness_mean", "staleness_max", "pipeline_stages", "microbatches"):
        if key in raw:
            out[key] = raw[key]
    return out


def _slowest_mean(ranks: list[dict[str, Any]], key: str) -> float:
    """CPU seconds of the process (all its threads) per iteration: slowest rank, mean."""
    if not all(r.get(key) for r in ranks):
        return NAN
    return mean_iqr(slowest_per_iteration([r[key] for r in ranks]))[0]


def _final_loss(ranks: list[dict[str, Any]]) -> float:
    """The last step's loss of the first rank that computed one (a pipeline's last stage)."""
    for r in ranks:
        losses = [v for v in r.get("losses", []) if v == v]
        if losses:
            return losses[-1]
    return NAN
