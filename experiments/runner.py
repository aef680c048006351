"""Run an experiment's points: simulated ones in parallel workers, measured ones one at a time.

Executors: ``process`` (concurrent.futures.ProcessPoolExecutor, the default), ``dask``
(an existing dask.distributed cluster, or a local one) and ``ray``, the last two only if the
package is importable. Each finished point is written to ``points/<id>.json`` atomically by
this (the parent) process as soon as it arrives; ``results.csv`` is rebuilt at the end, and
also when the run is interrupted.

Ctrl-C (or SIGTERM) stops a run within about two seconds and keeps every point that finished,
in flight included: the workers are told to stop (SIGINT), hand back the finished points of the
chunk they were computing, and are killed after ``SALVAGE_S``; the run says how many points it
kept. Workers die with the run however it ends (PR_SET_PDEATHSIG, real/lifecycle.py). Runs that
share a results directory lock each point before computing it (experiments/point_locks.py) and
wait for the points another run holds, so each point is computed once and every run ends with
the full table.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.config import Experiment, Point, Skipped, expand
from experiments.point_locks import PointLocks
from experiments.points import (
    PointFailed,
    PointOutcome,
    axis_columns,
    point_id,
    provenance,
    run_real_point,
    run_sim_chunk,
)
from experiments.store import ResultDir
from sim.errors import ConfigError

EXECUTORS = ("process", "dask", "ray")
TARGET_CHUNKS_PER_JOB = 8
"""Split the sim points into about this many tasks per worker: few round trips, steady progress."""
IN_FLIGHT_PER_JOB = 2
"""Chunks submitted ahead per worker: points are locked when submitted, so runs sharing a
directory share the work instead of one run locking every point at once."""
SALVAGE_S = 1.5
"""After Ctrl-C, how long the workers get to hand back the finished points of their chunk."""
WAIT_POLL_S = 0.2


@dataclass(frozen=True)
class RunSummary:
    out_dir: Path
    planned: int
    reused: int
    computed: int
    skipped: list[Skipped]
    rows: int
    wall_s: float
    by_others: int = 0
    """Points another run (sharing the results directory) computed while this one waited."""
    failed: list[Skipped] = field(default_factory=list)
    """Points whose computation raised (not a refusal of their input), with the reason: the sweep
    went on without them (meta.json ``failed``), and the next run tries them again."""


def make_executor(kind: str, jobs: int, address: str | None = None) -> cf.Executor:
    if kind == "process":
        return cf.ProcessPoolExecutor(max_workers=jobs, initializer=_worker_init, initargs=(os.getpid(),))
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


_BUSY = False
"""In a worker: True while it computes a chunk (``_worker_chunk``)."""


def _worker_init(parent_pid: int) -> None:
    """A pool worker dies with the run (SIGKILL included) and takes SIGINT (the terminal's Ctrl-C,
    or the run's own on interrupt) as "hand back what you finished" while it computes a chunk;
    between chunks it ignores it (the parent stops the sweep)."""
    from real.lifecycle import die_with_parent

    die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, _worker_sigint)


def _worker_sigint(signum, frame) -> None:
    if _BUSY:
        raise KeyboardInterrupt


def _worker_chunk(payloads: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """``run_sim_chunk`` in a pool worker: on SIGINT, the points finished so far."""
    global _BUSY
    done: list[tuple[str, dict[str, Any]]] = []
    try:
        _BUSY = True
        for payload in payloads:
            done.extend(run_sim_chunk([payload]))
    except KeyboardInterrupt:
        pass
    finally:
        _BUSY = False
    return done


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


@dataclass(frozen=True)
class PlannedPoint:
    """One point a run would take up: its id, what chose it, and whether it is already done."""

    point_id: str
    point: Point
    done: bool


def dry_run(experiment: Experiment, out_dir: str | Path, *, force: bool = False,
            measure: Callable[..., dict[str, Any]] | None = None) -> tuple[list[PlannedPoint], list[Skipped]]:
    """What ``run_experiment`` would do, doing none of it: every distinct point in run order, each
    marked done (a readable point file in ``out_dir``, and no ``force``) or to compute, and the
    combinations it would skip with their reasons. Writes nothing."""
    points, skipped = plan(experiment, measure)
    store = ResultDir(out_dir)
    finished = set() if force else store.finished_ids()
    planned: dict[str, PlannedPoint] = {}
    for point in points:
        pid = point_id(point, experiment)
        if pid not in planned:
            planned[pid] = PlannedPoint(pid, point, pid in finished and store.readable_point(pid) is not None)
    return list(planned.values()), skipped


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
    """Run every point not yet in ``out_dir`` (all of them with ``force``, which also takes over at once
    the point locks this host cannot check: experiments/point_locks.py)."""
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
    # The points' files as they are now, taken before this run decides what it has to compute: a point
    # another run sharing the directory writes after this instant differs from it, whatever this run
    # is doing then (a snapshot taken later missed a point written in between, computed it twice).
    before_all = {pid: _mtime(store.point_path(pid)) for pid in order}
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
        log(f"skipped {axes_text(s.axes)}: {s.reason}")
    log(f"{experiment.name}: {len(order)} points ({len(done)} already done, {len(todo)} to run, "
        f"{len(skipped)} invalid combinations skipped) -> {store.path}")
    stamp = provenance()
    older = {done_rows[pid]["row"].get("git_revision") for pid in done} - {stamp["git_revision"]}  # type: ignore[index]
    if older:
        log(f"reusing points computed at git revision {', '.join(sorted(map(str, older)))} "
            f"(now {stamp['git_revision']}); --force recomputes them")

    locks = PointLocks(store.points_dir, force=force, log=log)
    ours: set[str] = set()
    refused: list[Skipped] = []
    failed: list[Skipped] = []
    failed_ids: set[str] = set()
    before = {pid: before_all[pid] for pid in todo}  # --force, or unreadable: files to replace

    def written_meanwhile(pid: str) -> bool:
        """Another run sharing the directory wrote the point since this run started."""
        now = _mtime(store.point_path(pid))
        return now is not None and now != before.get(pid)

    def take(pid: str) -> bool:
        """Lock ``pid`` for this run, unless another run holds it or has already written it."""
        if not locks.acquire(pid):
            return False
        if pid not in ours and written_meanwhile(pid):
            locks.release(pid)
            return False
        return True

    def finish(pid: str, columns: PointOutcome) -> None:
        point = by_id[pid]
        if isinstance(columns, ConfigError):  # refused by the simulator itself: skipped, reported
            refused.append(Skipped(point.axes, str(columns)))
            log(f"skipped {axes_text(point.axes)}: {columns}")
        elif isinstance(columns, PointFailed):  # raised: recorded with its reason, the sweep goes on
            failed.append(Skipped({**point.axes, "point_id": pid}, columns.reason))
            failed_ids.add(pid)
            log(f"failed {axes_text(point.axes)} (point {pid}): {columns.reason}")
            locks.release(pid)
            bar.update(1)
            return
        else:
            row = {"point_id": pid, "source": point.source, "repetition": point.repetition,
                   **axis_columns(point.axes), **columns, **stamp}
            try:
                store.write_point(pid, row, point.spec)
            except KeyboardInterrupt:  # Ctrl-C: held until a write is in place (sim.fileio); it may have come before, so write, then stop
                store.write_point(pid, row, point.spec)
                ours.add(pid)
                raise
        ours.add(pid)
        locks.release(pid)
        bar.update(1)

    def compute_here(pid: str) -> None:
        """One point in this process (a point whose other run died while holding it)."""
        if by_id[pid].source == "sim":
            for got, columns in run_sim_chunk([_payload(pid, by_id, experiment)]):
                finish(got, columns)
        else:
            finish(pid, measure_here(pid))

    def measure_here(pid: str) -> PointOutcome:
        """One measured point: its columns, or why it was refused or failed (the sweep goes on)."""
        try:
            return run_real_point(by_id[pid].spec, experiment.real, measure)
        except ConfigError as err:
            return err
        except Exception as err:  # noqa: BLE001 - a run that failed (RunFailed) or a defect: recorded, shown
            return PointFailed.of(err)

    sim_todo = [pid for pid in todo if by_id[pid].source == "sim"]
    real_todo = [pid for pid in todo if by_id[pid].source == "real"]
    jobs = max(1, jobs or os.cpu_count() or 1)
    bar = _progress(len(todo), experiment.name, progress)
    try:
        _run_sim(sim_todo, by_id, experiment, jobs, executor, address, take, finish)
        for pid in real_todo:
            if take(pid):
                finish(pid, measure_here(pid))
        _wait_for_others([pid for pid in todo if pid not in ours and pid not in failed_ids], store, locks, take, compute_here, log,
                         written_meanwhile)
    except KeyboardInterrupt:
        kept = len(store.finished_ids() & set(order))
        log(f"interrupted: kept {kept} of {len(order)} points in {store.points_dir} ({len(ours) - len(refused)} "
            f"finished in this run); the same command computes the other {len(order) - kept - len(refused)}")
        raise
    finally:
        locks.release_all()
        bar.close()
        if refused or failed:
            store.write_meta(experiment, order, skipped + refused, failed)
        rows = store.rebuild_csv(order)
    return RunSummary(store.path, len(order), len(done), len(ours) - len(refused), skipped + refused, rows,
                      time.perf_counter() - start, len(todo) - len(ours) - len(failed), failed)


def axes_text(axes: dict[str, Any]) -> str:
    """``cluster.gpus=8, cluster.inter_link=ib_edr``: what chose a point, on one line."""
    return ", ".join(f"{k}={v}" for k, v in axes.items())


def _wait_for_others(others: list[str], store: ResultDir, locks: PointLocks, take: Callable[[str], bool],
                     compute_here: Callable[[str], None], log, written: Callable[[str], bool]) -> None:
    """Points another run locked (``others``, not computed here): wait until it writes them
    (``written``); compute here any whose lock went stale (its run died) before it did."""
    waiting = [pid for pid in others if not (written(pid) and not locks.held_elsewhere(pid))]
    if not waiting:
        return
    owners = sorted({text.split()[0] for pid in waiting if (text := locks.owner(pid))})
    log(f"{len(waiting)} points are being computed by another run into {store.path} (pid "
        f"{', '.join(owners) or '?'}): waiting for them")
    while waiting:
        still = []
        for pid in waiting:
            if written(pid) and not locks.held_elsewhere(pid):
                continue
            if take(pid):  # its run died (or let it go) before writing it: compute it here
                compute_here(pid)
            elif not (written(pid) and not locks.held_elsewhere(pid)):
                still.append(pid)
        waiting = still
        if waiting:
            time.sleep(WAIT_POLL_S)


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _payload(pid: str, by_id: dict[str, Point], experiment: Experiment) -> dict[str, Any]:
    return {"point_id": pid, "spec": by_id[pid].spec, "calibration": experiment.calibration,
            "iterations": experiment.iterations, "plan": experiment.plan}


def _run_sim(pids: list[str], by_id: dict[str, Point], experiment: Experiment, jobs: int, executor: str,
             address: str | None, take: Callable[[str], bool],
             finish: Callable[[str, PointOutcome], None]) -> None:
    """Compute the points of ``pids`` this run can ``take``, calling ``finish`` for each as it arrives."""
    if not pids:
        return
    pending = deque(pids)
    size = max(1, min(16, len(pids) // max(1, jobs * TARGET_CHUNKS_PER_JOB)))

    def next_chunk(n: int) -> list[dict[str, Any]]:
        chunk = []
        while pending and len(chunk) < n:
            pid = pending.popleft()
            if take(pid):
                chunk.append(_payload(pid, by_id, experiment))
        return chunk

    if jobs == 1 and executor == "process":
        while chunk := next_chunk(1):
            for pid, columns in run_sim_chunk(chunk):
                finish(pid, columns)
        return
    pool = make_executor(executor, jobs, address)
    task = _worker_chunk if executor == "process" else run_sim_chunk
    in_flight: set[cf.Future] = set()
    try:
        while True:
            while len(in_flight) < IN_FLIGHT_PER_JOB * jobs and (chunk := next_chunk(size)):
                in_flight.add(pool.submit(task, chunk))
            if not in_flight:
                break
            finished, in_flight = cf.wait(in_flight, return_when=cf.FIRST_COMPLETED)
            for future in finished:
                for pid, columns in future.result():
                    finish(pid, columns)
    except KeyboardInterrupt:
        _salvage(pool, in_flight, finish)
        raise
    except BaseException:
        _stop_pool(pool)
        raise
    pool.shutdown(wait=True)


def _workers(pool: cf.Executor) -> list[Any]:
    """A process pool's worker processes (CPython's ProcessPoolExecutor._processes; none for others)."""
    return list((getattr(pool, "_processes", None) or {}).values())


def _salvage(pool: cf.Executor, in_flight: set[cf.Future], finish) -> None:
    """Interrupted: ask the workers for what they finished, keep it, stop them, within SALVAGE_S."""
    for proc in _workers(pool):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signal.SIGINT)
    if in_flight:
        finished, _ = cf.wait(in_flight, timeout=SALVAGE_S)
        for future in finished:
            if not future.cancelled() and future.exception() is None:
                for pid, columns in future.result():
                    finish(pid, columns)
    _stop_pool(pool)


def _stop_pool(pool: cf.Executor) -> None:
    """Kill the workers at once (they hold no result worth waiting for) and let the pool go."""
    for proc in _workers(pool):
        with contextlib.suppress(ProcessLookupError, OSError, AttributeError):
            proc.kill()
    pool.shutdown(wait=False, cancel_futures=True)


def _progress(total: int, name: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=name, unit="point", disable=not enabled or total == 0, dynamic_ncols=True)
