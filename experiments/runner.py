"""Run an experiment's points: simulated ones in parallel workers, measured ones one at a time.

Executors: ``process`` (concurrent.futures.ProcessPoolExecutor, the default), ``dask``
(an existing dask.distributed cluster, or a local one) and ``ray``, the last two only if the
package is importable. Each finished point is written to ``points/<id>.json`` atomically by
this (the parent) process as soon as it arrives; ``results.csv`` is rebuilt at the end, and
also when the run is interrupted, so Ctrl-C keeps every finished point.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.config import Experiment, Point, Skipped, expand
from experiments.points import axis_columns, point_id, provenance, run_real_point, run_sim_chunk
from experiments.store import ResultDir
from sim.errors import ConfigError

EXECUTORS = ("process", "dask", "ray")
TARGET_CHUNKS_PER_JOB = 8
"""Split the sim points into about this many tasks per worker: few round trips, steady progress."""


@dataclass(frozen=True)
class RunSummary:
    out_dir: Path
    planned: int
    reused: int
    computed: int
    skipped: list[Skipped]
    rows: int
    wall_s: float


def make_executor(kind: str, jobs: int, address: str | None = None) -> cf.Executor:
    if kind == "process":
        return cf.ProcessPoolExecutor(max_workers=jobs, initializer=_ignore_sigint)
    if kind == "dask":
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError:
            raise ConfigError("--executor", "dask", "process (dask.distributed is not installed: pip install 'dask[distributed]')") from None
        import tempfile

        scratch = None if address else tempfile.mkdtemp(prefix="scalebench-dask-")  # not dask's shared /tmp default
        if scratch is not None:
            import dask

            dask.config.set({"temporary-directory": scratch})  # the scheduler's and nannies' lock files go there too
        cluster = None if address else LocalCluster(n_workers=jobs, threads_per_worker=1, dashboard_address=None,
                                                    local_directory=scratch)
        client = Client(address or cluster)
        return _DaskExecutor(client, cluster, scratch)
    if kind == "ray":
        try:
            import ray
        except ImportError:
            raise ConfigError("--executor", "ray", "process (ray is not installed: pip install ray)") from None
        return _RayExecutor(ray, address)
    raise ConfigError("--executor", kind, EXECUTORS)


class _DaskExecutor(cf.Executor):
    """A dask client's executor that also closes the client, and the local cluster it started
    (and removes its scratch directory), when the sweep ends: no worker process or file outlives the run."""

    def __init__(self, client: Any, cluster: Any, scratch: str | None = None):
        self._client, self._cluster, self._scratch = client, cluster, scratch
        self._executor = client.get_executor()

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[override]
        return self._executor.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._executor.shutdown(wait=wait)
        self._client.close()
        if self._cluster is not None:
            self._cluster.close()
        if self._scratch is not None:
            import shutil

            shutil.rmtree(self._scratch, ignore_errors=True)


def _ignore_sigint() -> None:
    """Workers leave Ctrl-C to the parent, which stops the sweep and keeps the finished points."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _RayExecutor(cf.Executor):
    """concurrent.futures view of Ray tasks (ObjectRef.future() is a concurrent.futures.Future)."""

    def __init__(self, ray: Any, address: str | None):
        self._ray = ray
        if not ray.is_initialized():
            ray.init(address=address)
        self._remote = ray.remote(run_sim_chunk)

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[override]
        if fn is not run_sim_chunk:
            raise ValueError("the Ray executor only runs run_sim_chunk")
        return self._remote.remote(*args, **kwargs).future()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        return None


def _chunks(items: list[dict[str, Any]], jobs: int) -> Iterator[list[dict[str, Any]]]:
    size = max(1, min(16, len(items) // max(1, jobs * TARGET_CHUNKS_PER_JOB)))
    for i in range(0, len(items), size):
        yield items[i:i + size]


def plan(experiment: Experiment, measure: Callable[..., dict[str, Any]] | None = None) -> tuple[list[Point], list[Skipped]]:
    """The points a run would compute and the combinations it would skip, with every check a run
    makes before it starts (``--dry-run`` shows exactly this): the scenario's own, the measured
    points' harness options, and that the harness is there (unless ``measure`` stands in for it)."""
    points, skipped = expand(experiment)
    real_specs = [p.spec for p in points if p.source == "real"]
    if real_specs:
        from experiments.points import check_real_specs, load_measure

        if measure is None:  # the harness will measure: its own arguments too
            load_measure()
        check_real_specs(real_specs, experiment.real if measure is None else None)
    return points, skipped


def run_experiment(
    experiment: Experiment,
    out_dir: str | Path,
    *,
    jobs: int | None = None,
    executor: str = "process",
    address: str | None = None,
    force: bool = False,
    progress: bool = True,
    measure: Callable[..., dict[str, Any]] | None = None,
    log: Callable[[str], None] = print,
) -> RunSummary:
    """Run every point not yet in ``out_dir`` (all of them with ``force``)."""
    start = time.perf_counter()
    points, skipped = plan(experiment, measure)
    ids = [point_id(p, experiment) for p in points]
    by_id: dict[str, Point] = dict(zip(ids, points, strict=False))
    if len(by_id) < len(ids):
        log(f"{len(ids) - len(by_id)} points resolve to an identical config and run once")
    order = list(dict.fromkeys(ids))
    store = ResultDir(out_dir)
    if any(p.source == "real" for p in points) and measure is None:
        from experiments.points import load_measure

        measure = load_measure()
    store.write_meta(experiment, order, skipped)
    finished = store.finished_ids()
    stale = len(finished - set(order))
    if stale:
        log(f"{stale} finished points in {store.points_dir} belong to no point of this config: kept, not in results.csv")
    done = set() if force else finished & set(order)
    done_rows = {pid: store.readable_point(pid) for pid in done}
    broken = sorted(pid for pid, point in done_rows.items() if point is None)
    if broken:
        log(f"{len(broken)} point files are unreadable (truncated or corrupt, e.g. {store.point_path(broken[0])}): "
            "computing them again")
        done -= set(broken)
    todo = [pid for pid in order if pid not in done]
    for s in skipped:
        log(f"skipped {_axes_text(s.axes)}: {s.reason}")
    log(f"{experiment.name}: {len(order)} points ({len(done)} already done, {len(todo)} to run, "
        f"{len(skipped)} invalid combinations skipped) -> {store.path}")
    stamp = provenance()
    older = {done_rows[pid]["row"].get("git_revision") for pid in done} - {stamp["git_revision"]}  # type: ignore[index]
    if older:
        log(f"reusing points computed at git revision {', '.join(sorted(map(str, older)))} "
            f"(now {stamp['git_revision']}); --force recomputes them")

    def finish(pid: str, columns: dict[str, Any]) -> None:
        point = by_id[pid]
        row = {"point_id": pid, "source": point.source, "repetition": point.repetition,
               **axis_columns(point.axes), **columns, **stamp}
        store.write_point(pid, row, point.spec)

    computed = 0
    refused: list[Skipped] = []
    sim_todo = [pid for pid in todo if by_id[pid].source == "sim"]
    real_todo = [pid for pid in todo if by_id[pid].source == "real"]
    jobs = max(1, jobs or os.cpu_count() or 1)
    bar = _progress(len(todo), experiment.name, progress)
    try:
        for pid, columns in _run_sim(sim_todo, by_id, experiment, jobs, executor, address):
            bar.update(1)
            if isinstance(columns, ConfigError):  # refused by the simulator itself: skipped, reported
                refused.append(Skipped(by_id[pid].axes, str(columns)))
                log(f"skipped {_axes_text(by_id[pid].axes)}: {columns}")
                continue
            finish(pid, columns)
            computed += 1
        for pid in real_todo:
            finish(pid, run_real_point(by_id[pid].spec, experiment.real, measure))
            computed += 1
            bar.update(1)
    finally:
        bar.close()
        if refused:
            store.write_meta(experiment, order, skipped + refused)
        rows = store.rebuild_csv(order)
    return RunSummary(store.path, len(order), len(done), computed, skipped + refused, rows, time.perf_counter() - start)


def _axes_text(axes: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in axes.items())


def _run_sim(pids: list[str], by_id: dict[str, Point], experiment: Experiment, jobs: int, executor: str,
             address: str | None) -> Iterator[tuple[str, dict[str, Any] | ConfigError]]:
    payloads = [{"point_id": pid, "spec": by_id[pid].spec, "calibration": experiment.calibration,
                 "iterations": experiment.iterations, "plan": experiment.plan} for pid in pids]
    if not payloads:
        return
    if jobs == 1 and executor == "process":
        for payload in payloads:
            yield from run_sim_chunk([payload])
        return
    pool = make_executor(executor, jobs, address)
    try:
        futures = [pool.submit(run_sim_chunk, chunk) for chunk in _chunks(payloads, jobs)]
        for future in cf.as_completed(futures):
            yield from future.result()
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _progress(total: int, name: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=name, unit="point", disable=not enabled or total == 0, dynamic_ncols=True)
