"""Nothing outlives the command that started it: processes die with their parent, and what a
parent killed outright (SIGKILL) cannot clean up is cleaned up by a reaper.

- ``die_with_parent``: a rank (or a pool worker) asks the kernel for SIGKILL when its parent
  dies (prctl(PR_SET_PDEATHSIG), Linux; proc(5) PR_SET_PDEATHSIG: "the parent" is the thread
  that forked it, so ranks are started from the thread that waits for them), and exits at once
  if the parent is already gone (it died between fork and this call).
- ``Reaper``: one small process per command (``python -m real.lifecycle``), in a session of its
  own so that signals to the command's process group miss it. The command tells it, through a
  pipe, what it holds (rank process groups, temporary directories, network namespaces) and what
  it has released. The pipe reaches end of file however the command ends, SIGKILL included;
  the reaper then kills, deletes and removes whatever is still registered, and exits.
- ``reap_stale_dirs``: temporary directories are named ``scalebench-real-<owner pid>-*``; those
  of owners that are gone (a reaper that was killed too, a reboot without a tmpfs) are removed
  at the next start. Network namespaces carry the owner's pid the same way (real/netem.py).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

PR_SET_PDEATHSIG = 1
"""<linux/prctl.h>: #define PR_SET_PDEATHSIG 1."""
TMP_PREFIX = "scalebench-real-"
PARENT_ENV = "SCALEBENCH_PARENT_PID"
"""Set by the launcher in each rank's environment: the pid the rank must die with."""


def die_with_parent(parent_pid: int | None = None, sig: int = signal.SIGKILL) -> bool:
    """Have the kernel send ``sig`` to this process when its parent dies; exit (status 1) at once
    if the parent (``parent_pid``) is already gone. False where prctl is not available."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        ok = libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        ok = False
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)  # the parent died before the request took effect: nobody waits for us
    return ok


def die_with_parent_from_env() -> None:
    """``die_with_parent`` for a rank started with PARENT_ENV in its environment (``child_env``)."""
    parent = os.environ.get(PARENT_ENV, "")
    if parent.isdigit():
        die_with_parent(int(parent))


def exit_skipping_teardown(status: int) -> None:
    """Flush and end the rank process without the interpreter's teardown: objects still holding
    gloo threads (a DDP reducer, a process group) abort it at exit now and then ("terminate called
    without an active exception", DESIGN.md), which turned finished runs into failed ones."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def child_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` plus PARENT_ENV = this process: the rank it starts dies with it."""
    return {**env, PARENT_ENV: str(os.getpid())}


def parent_gone(parent_pid: int) -> bool:
    """The fallback check where prctl is missing: a process whose parent died is re-parented."""
    return os.getppid() != parent_pid


def tmp_dir() -> Path:
    """A new temporary directory named after this process (``reap_stale_dirs`` can tell its owner)."""
    return Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-"))


@contextlib.contextmanager
def held_tmp_dir():
    """``tmp_dir()`` for the block, registered with the reaper and removed afterwards."""
    path = tmp_dir()
    hold("dir", path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        release("dir", path)


def owner_pid(name: str, prefix: str) -> int | None:
    """The pid in ``<prefix><pid>-...``, or None."""
    if not name.startswith(prefix):
        return None
    head = name[len(prefix):].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def pid_alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists() if Path("/proc").is_dir() else _kill0(pid)


def _kill0(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_stale_dirs(root: str | Path | None = None) -> list[Path]:
    """Remove ``scalebench-real-<pid>-*`` directories under ``root`` (the temp dir) whose owner
    process is gone; return them."""
    root = Path(root or tempfile.gettempdir())
    removed = []
    for path in root.glob(f"{TMP_PREFIX}*"):
        pid = owner_pid(path.name, TMP_PREFIX)
        if pid is not None and pid != os.getpid() and path.is_dir() and not pid_alive(pid):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (clock ticks after boot): with the pid, names one process for
    good. None when there is no such process, or only its zombie (dead, not yet reaped)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]


class Reaper:
    """The command's reaper (one per process, started on first use). ``hold`` and ``release``
    register and unregister a resource: ("pgid", pid), ("dir", path), ("file", path), ("glob",
    pattern: every file it matches) or ("netns", name)."""

    _instance: Reaper | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self._proc = subprocess.Popen([sys.executable, "-m", "real.lifecycle", str(os.getpid())],
                                      stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      start_new_session=True, cwd=str(Path(__file__).resolve().parents[1]))
        self._pipe: IO[bytes] = self._proc.stdin  # type: ignore[assignment]

    @classmethod
    def get(cls) -> Reaper | None:
        """This process' reaper, started if need be; None where it cannot start (it is a safety
        net: the command still cleans up after itself on every ordinary exit)."""
        with cls._lock:
            if cls._instance is None or cls._instance._proc.poll() is not None:
                try:
                    cls._instance = Reaper()
                except OSError:
                    return None
            return cls._instance

    def _send(self, op: str, kind: str, value: Any, extra: str | None = None) -> None:
        with self._lock, contextlib.suppress(OSError, ValueError):
            self._pipe.write((json.dumps([op, kind, str(value), extra]) + "\n").encode())
            self._pipe.flush()

    def hold(self, kind: str, value: Any) -> None:
        self._send("+", kind, value, start_time(int(value)) if kind == "pgid" else None)

    def release(self, kind: str, value: Any) -> None:
        self._send("-", kind, value)


def hold(kind: str, value: Any) -> None:
    reaper = Reaper.get()
    if reaper is not None:
        reaper.hold(kind, value)


def release(kind: str, value: Any) -> None:
    reaper = Reaper._instance
    if reaper is not None:
        reaper.release(kind, value)


def clean_up(held: dict[tuple[str, str], str | None]) -> None:
    """Kill the registered process groups (if they are still the processes registered), delete
    the namespaces, remove the directories."""
    for (kind, value), started in held.items():
        if kind == "pgid" and started is not None and start_time(int(value)) == started:
            with contextlib.suppress(OSError):
                os.killpg(int(value), signal.SIGKILL)
    deadline = time.monotonic() + 5
    for (kind, value) in held:  # let the killed ranks go before their namespace and files
        while kind == "pgid" and time.monotonic() < deadline and start_time(int(value)) is not None:
            time.sleep(0.05)
    for (kind, value) in held:
        if kind == "netns":
            subprocess.run(["ip", "netns", "del", value], capture_output=True, timeout=30, check=False)
    for (kind, value) in held:
        if kind == "dir":
            shutil.rmtree(value, ignore_errors=True)
        elif kind == "file":
            with contextlib.suppress(OSError):
                os.unlink(value)
        elif kind == "glob":
            for path in glob.glob(value):
                with contextlib.suppress(OSError):
                    os.unlink(path)


def _serve(stream: IO[bytes]) -> None:
    held: dict[tuple[str, str], str | None] = {}
    for line in stream:
        try:
            op, kind, value, extra = json.loads(line)
        except (ValueError, TypeError):
            continue
        if op == "+":
            held[(kind, value)] = extra
        else:
            held.pop((kind, value), None)
    clean_up(held)  # end of file: the command is gone, however it ended


if __name__ == "__main__":
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # only the end of the pipe ends the reaper
    _serve(sys.stdin.buffer)
