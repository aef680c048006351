"""The launcher's watchdog blames the rank that stopped, and leaves a healthy run alone.

Fast cases drive ``real.launch._watch`` with stand-in ranks (``sleep`` processes) whose
liveness and step files a thread writes the way real/worker.py does; the end-to-end cases run
the real harness (torch).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from real.launch import RunFailed, _watch

TIMEOUT_S = 1.0


class FakeRanks:
    """Two stand-in ranks: ``state[r]`` is "step" (beats), "run" (alive, no steps) or "wait"
    (alive, waiting in a barrier), or None (its thread is gone: stopped)."""

    def __init__(self, work: Path, states: list[str | None], lifetime_s: float = 30.0):
        self.work, self.state = work, list(states)
        self.procs = [subprocess.Popen(["sleep", str(lifetime_s)]) for _ in states]
        self._stop = threading.Event()
        for r in range(len(states)):
            (work / f"heartbeat{r}").touch()  # every rank joined and took a first step
        self._write()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _write(self) -> None:
        for r, state in enumerate(self.state):
            if state is None:
                continue
            (self.work / f"alive{r}").write_text("wait" if state == "wait" else "run")
            if state == "step":
                (self.work / f"heartbeat{r}").touch()

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            self._write()

    def close(self) -> None:
        self._stop.set()
        for p in self.procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
            p.wait()


@pytest.fixture
def ranks(tmp_path):
    made = []

    def make(states, **kw):
        made.append(FakeRanks(tmp_path, states, **kw))
        return made[-1]

    yield make
    for r in made:
        r.close()


def test_a_rank_waiting_out_its_peers_long_phase_is_not_a_hang(ranks, tmp_path):
    """Rank 0 steps alone (the one-rank baseline) for 3 timeouts while rank 1 waits without a
    step of its own: the run progresses, nothing is stopped; both end normally."""
    fake = ranks(["step", "wait"], lifetime_s=3 * TIMEOUT_S)
    _watch(fake.procs, tmp_path, TIMEOUT_S, deadline_s=60)
    assert [p.returncode for p in fake.procs] == [0, 0]


def test_a_stopped_rank_is_blamed_not_its_waiting_peer(ranks, tmp_path):
    fake = ranks(["step", "step"])
    time.sleep(0.3)
    fake.state = ["wait", None]  # rank 1 stopped mid-step; rank 0 waits for it in the next barrier
    os.kill(fake.procs[1].pid, signal.SIGSTOP)
    with pytest.raises(RunFailed, match=r"^rank 1 stopped responding for \d+ s \(its process is stopped \(SIGSTOP"):
        _watch(fake.procs, tmp_path, TIMEOUT_S, deadline_s=60)


def test_a_rank_that_neither_steps_nor_waits_is_the_one_the_others_wait_for(ranks, tmp_path):
    fake = ranks(["wait", "run"])
    with pytest.raises(RunFailed, match=r"^rank 1 made no progress for \d+ s while the other ranks waited for it"):
        _watch(fake.procs, tmp_path, TIMEOUT_S, deadline_s=60)


def test_every_rank_waiting_is_a_hung_collective(ranks, tmp_path):
    fake = ranks(["wait", "wait"])
    with pytest.raises(RunFailed, match=r"^no rank made progress for \d+ s \(a collective hung"):
        _watch(fake.procs, tmp_path, TIMEOUT_S, deadline_s=60)


def test_a_rank_that_gives_up_on_a_stopped_peer_blames_the_peer(ranks, tmp_path):
    fake = ranks(["step", "step"])
    os.kill(fake.procs[1].pid, signal.SIGSTOP)
    fake.procs[0].kill()
    fake.procs[0].wait()
    fake.procs[0] = subprocess.Popen(["false"])  # rank 0 timed out in gloo: exit status 1
    fake.procs[0].wait()
    with pytest.raises(RunFailed, match=r"^rank 1 stopped responding .*; rank 0 gave up waiting for it \(exit status 1\)"):
        _watch(fake.procs, tmp_path, TIMEOUT_S, deadline_s=60)


# ---- end to end --------------------------------------------------------------------------------


@pytest.mark.torch
def test_sigstopped_rank_is_blamed_end_to_end():
    pytest.importorskip("torch")
    from real.measure import run_spec
    from real.seed_mlp import SEED_SPEC

    pids: list[int] = []
    spec = {**SEED_SPEC, "real": {"baseline": False}}

    def stop_rank_1_when_it_steps(started: list[int]) -> None:
        pids.extend(started)

        def stopper() -> None:
            end = time.monotonic() + 120
            while time.monotonic() < end and not _stepped(started[1]):
                time.sleep(0.05)
            os.kill(started[1], signal.SIGSTOP)

        threading.Thread(target=stopper, daemon=True).start()

    from real import launch as launch_module

    real_launch = launch_module.launch

    def launch_with_hook(job, nproc, **kw):
        return real_launch(job, nproc, **{**kw, "on_started": stop_rank_1_when_it_steps})

    launch_module.launch = launch_with_hook
    try:
        with pytest.raises(RunFailed, match=r"rank 1 stopped responding for \d+ s \(its process is stopped"):
            run_spec(spec, iterations=100000, warmup=1, timeout_s=8)
    finally:
        launch_module.launch = real_launch
    time.sleep(0.5)
    assert not [p for p in pids if _running(p)]


def _stepped(pid: int) -> bool:
    """The rank's heartbeat file exists (it took a step): read from its job file's directory."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    job = next((Path(a.decode()) for a in cmdline if a.endswith(b"job.json")), None)
    return job is not None and (job.parent / "heartbeat1").exists()


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.torch
@pytest.mark.slow
def test_a_baseline_longer_than_the_timeout_is_a_healthy_run():
    """`scalebench real --iterations 600 --timeout 10` used to be stopped while rank 1 waited out
    rank 0's one-rank baseline. Here the baseline runs at least 6 s (min_time_s) against a 3 s
    timeout, and the run completes."""
    pytest.importorskip("torch")
    from real.measure import measure_point
    from real.seed_mlp import SEED_SPEC

    spec = {**SEED_SPEC, "real": {"baseline": True}}
    row = measure_point(spec, iterations=5, warmup=1, timeout_s=3, min_time_s=6, max_iterations=100000)
    assert row["baseline_time_s"] > 0 and row["iteration_time_s"] > 0
