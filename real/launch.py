"""Start N ranks on this machine and watch them.

Each rank is ``python -m real.worker JOB.json`` with the torch.distributed environment
variables set (optionally inside a network namespace: ``ip netns exec NAME ...``). The
launcher's watchdog ends the run, naming the rank to blame, when

- a rank exits nonzero: every other rank is killed and the failure names that rank;
- the run makes no progress: no rank finished a step (``heartbeat<rank>``, touched at every
  step) for ``timeout_s``, or a rank's liveness file (``alive<rank>``, rewritten every half
  second by a thread of the rank, real/worker.py) is that old. ``blame`` names the rank: one
  that is stopped (SIGSTOP), one whose liveness went quiet while its peers', blocked waiting for
  it, stayed fresh, or one that is neither stepping nor waiting in a barrier (the file says
  which) while the others wait; where every rank waits, a collective hung (which gloo's own
  timeout, ``timeout_s`` + a grace, does not always end);
- a rank does not join the group and make its first step within the start limit (ranks import
  torch together: timeout + 30 s + START_S_PER_RANK_PER_CPU per rank per CPU);
- the whole run passes ``deadline_s``.

Rank 0 writes its result atomically to ``out`` (JSON); nothing else is written.

Nothing outlives the launcher (real/lifecycle.py): ranks die with it (PR_SET_PDEATHSIG) and
its reaper kills their process groups and removes the run's temporary directory if the launcher
itself is killed outright. At most ``max_ranks()`` ranks start: what this machine's memory and
cores can hold.

Every rank is a process group of its own (a kill reaches it and whatever it started) in the
launcher's session, and binds itself to its cores where that pays (real/binding.py). Not a
session of its own: with the scheduler's autogroups on (/proc/sys/kernel/sched_autogroup_enabled)
every session is a CPU-share group, and a rank woken on a core another rank's group holds waits
for that group's slice. Measured here, 4 bound ranks on 2 cores, a 1 KiB allreduce: 3.1-3.4 ms with a session per
rank (as torchrun starts them), 1.05 ms with all ranks in one session; 2 ranks: 0.20 ms either way.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

POLL_S = 0.1
RANK_MEMORY_BYTES = 512 * 2**20
"""Resident memory of one rank, rounded up: 309-471 MiB measured here (the largest RSS of 4 ranks
of mlp, small_cnn and small_transformer, torch 2.13.0 CPU, 2026-11-25)."""
RANKS_PER_CPU = 8
"""Most ranks per logical CPU: 16 ranks of the mlp on 2 cores took 59 s for 5 iterations here,
most of it 16 torch imports sharing the cores (2026-11-25, load average 5-12); beyond that a run
spends minutes starting and each rank gets less than an eighth of a core."""
START_S_PER_RANK_PER_CPU = 15.0
"""Time allowed for ranks to import torch and join the group, per rank per CPU, beyond the
timeout (16 ranks on 2 cores took about 50 s to start here)."""


class RunFailed(RuntimeError):
    """A rank died, hung or timed out; the message says which and why."""


@dataclass(frozen=True)
class RankExit:
    rank: int
    status: int
    stderr_tail: str


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def memory_available_bytes() -> int | None:
    """MemAvailable of /proc/meminfo (proc(5)), or None."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def max_ranks() -> tuple[int, str]:
    """(the most ranks this machine can run at once, why): RANKS_PER_CPU per CPU, and as many
    RANK_MEMORY_BYTES as the available memory holds."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    by_cpu = cpus * RANKS_PER_CPU
    free = memory_available_bytes()
    by_memory = free // RANK_MEMORY_BYTES if free is not None else by_cpu
    why = f"{cpus} CPUs x {RANKS_PER_CPU} ranks per CPU = {by_cpu}"
    if free is not None:
        why += (f"; {free / 2**30:.1f} GiB available / {RANK_MEMORY_BYTES / 2**20:.0f} MiB per rank = {by_memory}")
    return max(1, min(by_cpu, by_memory)), why


def check_nproc(nproc: int, field: str = "--gpus") -> int:
    """``nproc`` if this machine can run that many ranks, else a ConfigError saying why."""
    from sim.errors import ConfigError, require_positive

    require_positive(field, nproc, integer=True)
    most, why = max_ranks()
    if nproc > most:
        raise ConfigError(field, nproc, f"at most {most} ranks on this machine ({why})")
    return nproc


def rank_environment(job: dict[str, Any], rank: int, nproc: int, port: int) -> dict[str, str]:
    """A rank's environment: this process's, torch.distributed's variables, and the job's own
    (``job["env"]``: the NCCL variables of the strategy, real.config.nccl_environment)."""
    from real.lifecycle import PARENT_ENV

    return {**os.environ, **{k: str(v) for k, v in (job.get("env") or {}).items()},
            "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "PYTHONUNBUFFERED": "1", PARENT_ENV: str(os.getpid())}


def launch(job: dict[str, Any], nproc: int, *, timeout_s: float, deadline_s: float,
           netns: str | None = None, on_started=None) -> dict[str, Any]:
    """Run ``job`` on ``nproc`` ranks; return rank 0's result dict or raise RunFailed.

    A run that lost more than real.steal.STEAL_LIMIT of its CPU to the hypervisor is run again
    (at most real.steal.ATTEMPTS times; the least-stolen result is kept). The result carries
    ``cpu_steal_fraction`` (None where /proc/stat has no steal), ``launches`` and what other
    processes did meanwhile (real/load.py: ``others_cpu_fraction``, ``loadavg_1m``)."""
    from real.binding import binding_enabled
    from real.lifecycle import reap_stale_dirs
    from real.load import BUSY_ATTEMPTS, LAUNCH_LOG, LoadSample, busy_limit, busy_progress
    from real.steal import least_stolen

    binding_enabled()  # a bad SCALEBENCH_BIND_CORES is refused here, before any rank starts
    check_nproc(nproc)
    reap_stale_dirs()

    def once() -> dict[str, Any]:
        with LoadSample() as load:
            result = _launch_once(job, nproc, timeout_s=timeout_s, deadline_s=deadline_s, netns=netns,
                                  on_started=on_started)
        sample = load.as_dict()
        LAUNCH_LOG.append({"kind": job.get("kind", ""), "ranks": nproc, **sample})
        return {**result, **sample}  # each launch carries its own sample

    limit = busy_limit()
    result, fraction, launches = least_stolen(
        once, others=lambda r: r.get("others_cpu_fraction"), others_limit=1.0 if limit is None else limit,
        others_attempts=BUSY_ATTEMPTS if limit is not None else 1, progress=busy_progress())
    return {**result, "cpu_steal_fraction": fraction, "launches": launches}


def _launch_once(job: dict[str, Any], nproc: int, *, timeout_s: float, deadline_s: float,
                 netns: str | None, on_started) -> dict[str, Any]:
    from real.lifecycle import hold, release, tmp_dir

    work = tmp_dir()
    hold("dir", work)
    procs: list[subprocess.Popen] = []
    logs = []
    try:
        job = {**job, "heartbeat_dir": str(work), "out": str(work / "result.json"), "timeout_s": timeout_s}
        job_file = work / "job.json"
        job_file.write_text(json.dumps(job), encoding="utf-8")
        port = free_port()
        try:
            for rank in range(nproc):
                env = rank_environment(job, rank, nproc, port)
                cmd = [sys.executable, "-m", "real.worker", str(job_file)]
                if netns:
                    cmd = ["ip", "netns", "exec", netns, *cmd]  # ip execs the command: same pid
                log = open(work / f"rank{rank}.log", "w+b")  # noqa: SIM115 - closed in finally
                logs.append(log)
                procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                              process_group=0))  # the launcher's session: see above
                hold("pgid", procs[-1].pid)
            if on_started is not None:
                on_started([p.pid for p in procs])
            _watch(procs, work, timeout_s, deadline_s)
        except BaseException as err:
            _kill_all(procs)
            if isinstance(err, RunFailed):
                raise RunFailed(f"{err}{_tails(logs)}") from None
            raise
        finally:
            _kill_all(procs)
            for p in procs:
                release("pgid", p.pid)
            for log in logs:
                log.close()
        out = work / "result.json"
        if not out.exists():
            raise RunFailed("rank 0 exited 0 but wrote no result" + _tails(logs))
        return json.loads(out.read_text(encoding="utf-8"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        release("dir", work)


def _age_s(path: Path, now: float) -> float | None:
    try:
        return now - path.stat().st_mtime
    except OSError:
        return None


def _state(pid: int) -> str:
    """Words for a process' state letter in /proc/PID/stat (proc(5))."""
    try:
        letter = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "its state unknown"
    return {"T": "its process is stopped (SIGSTOP or a debugger)", "t": "its process is stopped by a tracer",
            "D": "its process is in uninterruptible sleep (I/O)", "Z": "its process is a zombie",
            "R": "its process is runnable but got no CPU", "S": "its process sleeps"}.get(letter, f"state {letter}")


def _liveness(work: Path, rank: int) -> tuple[bool, str]:
    """(waiting in a barrier, phase) from the rank's liveness file ("wait|run <phase>")."""
    try:
        state, _, phase = (work / f"alive{rank}").read_text().strip().partition(" ")
    except OSError:
        return False, ""
    return state == "wait", phase


def _waiting(work: Path, rank: int) -> bool:
    return _liveness(work, rank)[0]


def _in(work: Path, rank: int) -> str:
    phase = _liveness(work, rank)[1]
    return f" in {phase}" if phase else ""


def _stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def blame(procs: list[subprocess.Popen], work: Path, running: list[int], idle_s: float, timeout_s: float) -> str:
    """Why the run is stuck, naming the rank to blame: one that is stopped (SIGSTOP), one whose
    liveness thread went quiet (frozen, or holding the GIL), one that is neither waiting in a
    barrier nor stepping while its peers wait; else a hung collective."""
    now = time.time()
    for rank in running:
        if _stopped(procs[rank].pid):
            age = _age_s(work / f"alive{rank}", now) or 0.0
            return f"rank {rank} stopped responding for {age:.0f} s ({_state(procs[rank].pid)})"
    quiet = [(age, r) for r in running if (age := _age_s(work / f"alive{r}", now)) is not None and age > timeout_s / 2]
    if quiet:
        age, rank = max(quiet)
        return f"rank {rank} stopped responding for {age:.0f} s ({_state(procs[rank].pid)})"
    culprits = [r for r in running if not _waiting(work, r)]
    if culprits and len(culprits) < len(running):
        return (f"rank {culprits[0]} made no progress{_in(work, culprits[0])} for {idle_s:.0f} s while the other "
                "ranks waited for it")
    return f"no rank made progress{_in(work, running[0])} for {idle_s:.0f} s (a collective hung, or a peer died)"


def _watch(procs: list[subprocess.Popen], work: Path, timeout_s: float, deadline_s: float) -> None:
    """Poll the ranks until they all exit 0; raise RunFailed (module docstring: the rules)."""
    start = time.monotonic()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    start_limit_s = timeout_s + 30 + START_S_PER_RANK_PER_CPU * len(procs) / cpus
    while True:
        codes = [p.poll() for p in procs]
        failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
        running = [r for r, c in enumerate(codes) if c is None]
        if failed:
            rank, code = min(failed, key=lambda rc: (rc[1] >= 0, rc[0]))  # signal deaths first
            why = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
            stopped = [r for r in running if _stopped(procs[r].pid)]
            if stopped and code > 0:  # it gave up waiting for a stopped peer
                raise RunFailed(f"rank {stopped[0]} stopped responding ({_state(procs[stopped[0]].pid)}); rank "
                                f"{rank} gave up waiting for it ({why}); all ranks were stopped")
            raise RunFailed(f"rank {rank} failed ({why}); the other ranks were stopped")
        if not running:
            return
        now_mono, now = time.monotonic(), time.time()
        if now_mono - start > deadline_s:
            raise RunFailed(f"the run passed its deadline of {deadline_s:.0f} s; all ranks were stopped")
        beats = [_age_s(work / f"heartbeat{r}", now) for r in range(len(procs))]
        alive = [_age_s(work / f"alive{r}", now) for r in range(len(procs))]
        if any(beats[r] is None for r in running):  # still starting: importing, joining, setting up
            if now_mono - start > start_limit_s:
                late = next(r for r in running if beats[r] is None)
                what = "make its first step" if (work / f"joined{late}").exists() else (
                    "join the process group" if alive[late] is not None else "start")
                raise RunFailed(f"rank {late} did not {what} within {start_limit_s:.0f} s; all ranks were stopped")
            quiet = [r for r in running if alive[r] is not None and alive[r] > timeout_s]  # type: ignore[operator]
            if quiet:
                raise RunFailed(f"{blame(procs, work, running, 0.0, timeout_s)}; all ranks were stopped")
        else:
            idle = min(b for b in beats if b is not None)
            stale = any(alive[r] is not None and alive[r] > timeout_s for r in running)  # type: ignore[operator]
            if idle > timeout_s or stale:
                raise RunFailed(f"{blame(procs, work, running, idle, timeout_s)}; all ranks were stopped")
        time.sleep(POLL_S)


def _kill_all(procs: list[subprocess.Popen]) -> None:
    """SIGKILL each rank's process group (the rank and anything it started), then reap."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                p.kill()
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=10)


def _tails(logs: list, lines: int = 4) -> str:
    parts = []
    for rank, log in enumerate(logs):
        with contextlib.suppress(ValueError, OSError):
            log.flush()
            log.seek(0)
            text = log.read().decode(errors="replace").strip().splitlines()
            keep = [t for t in text if t.strip()][-lines:]
            if keep:
                parts.append("".join(f"\n  [rank {rank}] {line}" for line in keep))
    return "".join(parts)
