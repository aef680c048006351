"""Start N ranks on this machine and watch them.

Each rank is ``python -m real.worker JOB.json`` with the torch.distributed environment
variables set (optionally inside a network namespace: ``ip netns exec NAME ...``). The
launcher's watchdog ends the run when

- a rank exits nonzero: every other rank is killed and the failure names that rank;
- a rank's heartbeat file (touched at every step) is older than ``timeout_s``: a hung
  collective, which gloo's own process-group timeout does not always end on this machine;
- the whole run passes ``deadline_s``.

Rank 0 writes its result atomically to ``out`` (JSON); nothing else is written.

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
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

POLL_S = 0.1


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


def launch(job: dict[str, Any], nproc: int, *, timeout_s: float, deadline_s: float,
           netns: str | None = None, on_started=None) -> dict[str, Any]:
    """Run ``job`` on ``nproc`` ranks; return rank 0's result dict or raise RunFailed.

    A run that lost more than real.steal.STEAL_LIMIT of its CPU to the hypervisor is run again
    (at most real.steal.ATTEMPTS times; the least-stolen result is kept). The result carries
    ``cpu_steal_fraction`` (None where /proc/stat has no steal) and ``launches``."""
    from real.binding import binding_enabled
    from real.steal import least_stolen

    binding_enabled()  # a bad SCALEBENCH_BIND_CORES is refused here, before any rank starts

    def once() -> dict[str, Any]:
        return _launch_once(job, nproc, timeout_s=timeout_s, deadline_s=deadline_s, netns=netns, on_started=on_started)

    result, fraction, launches = least_stolen(once)
    return {**result, "cpu_steal_fraction": fraction, "launches": launches}


def _launch_once(job: dict[str, Any], nproc: int, *, timeout_s: float, deadline_s: float,
                 netns: str | None, on_started) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="scalebench-real-") as tmp:
        work = Path(tmp)
        job = {**job, "heartbeat_dir": str(work), "out": str(work / "result.json"), "timeout_s": timeout_s}
        job_file = work / "job.json"
        job_file.write_text(json.dumps(job), encoding="utf-8")
        port = free_port()
        procs = []
        logs = []
        try:
            for rank in range(nproc):
                env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc),
                       "LOCAL_WORLD_SIZE": str(nproc), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                       "PYTHONUNBUFFERED": "1"}
                cmd = [sys.executable, "-m", "real.worker", str(job_file)]
                if netns:
                    cmd = ["ip", "netns", "exec", netns, *cmd]
                log = open(work / f"rank{rank}.log", "w+b")  # noqa: SIM115 - closed in finally
                logs.append(log)
                procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                              process_group=0))  # the launcher's session: see above
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
            for log in logs:
                log.close()
        out = work / "result.json"
        if not out.exists():
            raise RunFailed("rank 0 exited 0 but wrote no result" + _tails(logs))
        return json.loads(out.read_text(encoding="utf-8"))


def _watch(procs: list[subprocess.Popen], work: Path, timeout_s: float, deadline_s: float) -> None:
    start = time.monotonic()
    while True:
        codes = [p.poll() for p in procs]
        failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            rank, code = min(failed, key=lambda rc: (rc[1] >= 0, rc[0]))  # signal deaths first
            why = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
            raise RunFailed(f"rank {rank} failed ({why}); the other ranks were stopped")
        if all(c == 0 for c in codes):
            return
        now = time.monotonic()
        if now - start > deadline_s:
            raise RunFailed(f"the run passed its deadline of {deadline_s:.0f} s; all ranks were stopped")
        for rank, code in enumerate(codes):
            beat = work / f"heartbeat{rank}"
            if code is None and beat.exists() and time.time() - beat.stat().st_mtime > timeout_s:
                raise RunFailed(f"rank {rank} made no progress for {timeout_s:.0f} s (a peer died or a "
                                "collective hung); all ranks were stopped")
            if code is None and not beat.exists() and now - start > timeout_s + 30:
                raise RunFailed(f"rank {rank} did not start within {timeout_s + 30:.0f} s")
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
        log.flush()
        log.seek(0)
        text = log.read().decode(errors="replace").strip().splitlines()
        keep = [t for t in text if t.strip()][-lines:]
        if keep:
            parts.append("".join(f"\n  [rank {rank}] {line}" for line in keep))
    return "".join(parts)
