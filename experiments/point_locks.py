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
from pathlib import Path

SUFFIX = ".lock"


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
    def __init__(self, points_dir: str | Path):
        self.dir = Path(points_dir)
        self.mine: set[str] = set()
        self.me = f"{os.getpid()} {_start_time(os.getpid())} {socket.gethostname()}"
        self._leftovers: dict[str, list[Path]] | None = None

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
            return len(parts) != 3  # unreadable: stale; another host's: not ours to judge
        return _start_time(int(parts[0])) != parts[1]

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
                if text is None or text == "" or self.stale(text):  # "" : being written, or truncated
                    if text == "" and self._young(pid):
                        return False
                    with contextlib.suppress(OSError):
                        self.path(pid).unlink()
                    took_over = True
                    continue
                return False
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(self.me + "\n")
            self.mine.add(pid)
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
        """Another live run holds the point."""
        text = self.owner(pid)
        return text is not None and text != self.me and not self.stale(text)

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
