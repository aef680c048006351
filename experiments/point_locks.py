"""Which run computes which point, when several runs share one results directory.

Before computing a point a run creates ``points/<id>.lock`` (O_CREAT | O_EXCL: one run wins)
holding its pid, the process' start time and the host. Another run skips a locked point and,
once its own work is done, waits for the holder's ``points/<id>.json``; a lock whose owner
is gone (same host, no process with that pid and start time) is stale and taken over, so a run
killed outright never blocks the next one. Two concurrent ``scalebench run``s into one directory
therefore compute each point once and both end with the full table. Locks are removed when the
point is written, on every exit, and by the reaper after SIGKILL (real/lifecycle.py), which also
removes the temporary file of a point that was being written (``.<id>.json.*.tmp``, sim.fileio);
without the reaper (no [real] extra) the next run that takes the point removes it: a point whose
stale lock it takes over is looked for then, any other's in one listing of the directory taken at
its first lock (a killed run's files are there before the run that meets them starts; a scan
per point cost a directory listing each, 4.6 ms a point in a directory of 5,000).

A lock that cannot be proved alive or dead from here (another host's run on a shared file system,
or a file that is not a lock of ours: "abc def host", no pid) used to be waited for without end
(issue 29). A holder now touches its locks every HEARTBEAT_S while it holds them, so such a lock
is taken over once it has gone UNPROVABLE_LOCK_S without a touch, or at once with ``--force``
(``force=True``); the run says which lock it waits for and until when (``log``).

Why not the filelock package (judged for issue 29): its FileLock is fcntl.flock on a lock file,
which the kernel releases when the holder dies (no stale locks: what it does better), but flock is
a no-op on NFS mounted with ``nolock`` (tox-dev/filelock#6; results directories are often on
shared filesystems) and its fallback, SoftFileLock, is this module's O_EXCL file without an owner
in it, so without stale-lock takeover. A lock here must also say who holds it (pid, start time,
host: the run reports points computed by another run, and waits for their files) and the reaper
has to clean a half-written point's temporary file after SIGKILL whatever locks it. Kept by hand.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

SUFFIX = ".lock"
HEARTBEAT_S = 60.0
"""How often a run touches the locks it holds (mtime), from a thread of its own."""
UNPROVABLE_LOCK_S = 600.0
"""A lock this host cannot check (another host's, or not a lock of ours) is taken over after this
long without a touch: 10 heartbeats missed (assumed: a run whose locks went 10 minutes untouched
is gone; a live one touches them every HEARTBEAT_S whatever its points cost)."""


def _start_time(pid: int) -> str:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return ""
    return "" if fields[0] == "Z" else fields[19]


def _hold(kind: str, value: str, release: bool = False) -> None:
    """Tell this process' reaper (if the harness is installed) about a lock file."""
    try:
        from real import lifecycle
    except ImportError:
        return
    (lifecycle.release if release else lifecycle.hold)(kind, value)


class PointLocks:
    def __init__(self, points_dir: str | Path, *, force: bool = False, log: Callable[[str], None] | None = None):
        self.dir = Path(points_dir)
        self.mine: set[str] = set()
        self.me = f"{os.getpid()} {_start_time(os.getpid())} {socket.gethostname()}"
        self.force = force
        """Take over at once a lock that cannot be proved alive (``run --force``)."""
        self.log = log or (lambda line: None)
        self._leftovers: dict[str, list[Path]] | None = None
        self._reported: set[str] = set()
        self._heartbeat: threading.Thread | None = None
        self._stop = threading.Event()

    def path(self, pid: str) -> Path:
        return self.dir / f"{pid}{SUFFIX}"

    def temp_files(self, pid: str) -> str:
        """The glob of the point's temporary files while it is written (sim.fileio's names)."""
        return str(self.dir / f".{pid}.json.*.tmp")

    def owner(self, pid: str) -> str | None:
        """The lock's text ("pid start host"), or None when the point is not locked."""
        try:
            return self.path(pid).read_text(encoding="utf-8").strip()
        except OSError:
            return None

    def stale(self, text: str) -> bool:
        """A lock of this host whose process is gone (or whose pid now names another process)."""
        parts = text.split()
        if len(parts) != 3 or parts[2] != socket.gethostname() or not parts[0].isdigit():
            return len(parts) != 3  # unreadable: stale; another host's or not ours: unprovable()
        return _start_time(int(parts[0])) != parts[1]

    def unprovable(self, text: str) -> bool:
        """A lock this host can neither prove alive nor dead: another host's, or three words that are
        not "pid start-time host"."""
        parts = text.split()
        return len(parts) == 3 and (parts[2] != socket.gethostname() or not parts[0].isdigit())

    def _abandoned(self, pid: str, text: str) -> bool:
        """An unprovable lock to take over: with --force, or untouched for UNPROVABLE_LOCK_S.
        Said once per lock: whose it is and when it will be taken over."""
        age = self._age(pid)
        if self.force or age is None or age >= UNPROVABLE_LOCK_S:
            self.log(f"{self.path(pid)}: taking over a lock that cannot be checked from {socket.gethostname()} "
                     f"({text!r}, {'--force' if self.force else f'untouched for {_minutes(age)}'})")
            return True
        if pid not in self._reported:
            self._reported.add(pid)
            whose = ("not a lock of scalebench's: no process id" if not text.split()[0].isdigit()
                     else "a run on another host")
            self.log(f"{self.path(pid)} is held by {text!r} ({whose}), which this host cannot check: waiting until "
                     f"{time.strftime('%H:%M:%S', time.localtime(time.time() + UNPROVABLE_LOCK_S - age))} "
                     f"({_minutes(UNPROVABLE_LOCK_S)} without a touch), or take it over now with --force")
        return False

    def _age(self, pid: str) -> float | None:
        try:
            return time.time() - self.path(pid).stat().st_mtime
        except OSError:
            return None

    def acquire(self, pid: str) -> bool:
        """True if this run now holds the point (it was free, stale, or already ours)."""
        if pid in self.mine:
            return True
        self.dir.mkdir(parents=True, exist_ok=True)
        if self._leftovers is None:  # before this run takes any point: none of its own files yet
            self._leftovers = {}
            for tmp in self.dir.glob(".*.json.*.tmp"):
                self._leftovers.setdefault(tmp.name[1:].split(".json.", 1)[0], []).append(tmp)
        took_over = False
        for _ in range(2):
            try:
                fd = os.open(self.path(pid), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                text = self.owner(pid)
                if text is None or text == "" or self.stale(text) or (self.unprovable(text)
                                                                       and self._abandoned(pid, text)):
                    if text == "" and self._young(pid):  # "": being written, or truncated
                        return False
                    with contextlib.suppress(OSError):
                        self.path(pid).unlink()
                    took_over = True
                    continue
                return False
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(self.me + "\n")
            self.mine.add(pid)
            self._beat()
            _hold("file", str(self.path(pid)))
            _hold("glob", self.temp_files(pid))
            leftovers = self._leftovers.pop(pid, [])  # a run killed mid-write
            if took_over:  # its run may have died after the listing
                leftovers = list(self.dir.glob(Path(self.temp_files(pid)).name))
            for leftover in leftovers:
                with contextlib.suppress(OSError):
                    leftover.unlink()
            return True
        return False

    def _young(self, pid: str, seconds: float = 5.0) -> bool:
        import time

        try:
            return time.time() - self.path(pid).stat().st_mtime < seconds
        except OSError:
            return False

    def held_elsewhere(self, pid: str) -> bool:
        """Another live run holds the point (or one this host cannot check, until it is abandoned)."""
        text = self.owner(pid)
        return text is not None and text != self.me and not self.stale(text)

    def _beat(self) -> None:
        """Start the thread that touches this run's locks every HEARTBEAT_S (once)."""
        if self._heartbeat is not None:
            return
        self._stop.clear()

        def touch() -> None:
            while not self._stop.wait(HEARTBEAT_S):
                for pid in list(self.mine):
                    with contextlib.suppress(OSError):
                        os.utime(self.path(pid))

        self._heartbeat = threading.Thread(target=touch, name="point-locks-heartbeat", daemon=True)
        self._heartbeat.start()

    def release(self, pid: str) -> None:
        if pid in self.mine:
            self.mine.discard(pid)
            with contextlib.suppress(OSError):
                self.path(pid).unlink()
            _hold("file", str(self.path(pid)), release=True)
            _hold("glob", self.temp_files(pid), release=True)

    def release_all(self) -> None:
        for pid in list(self.mine):
            self.release(pid)
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=1.0)
            self._heartbeat = None


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "ever"
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"
