"""What the rest of the machine did while we measured: other processes' share of the CPU and the
load average, sampled around each launch (real/launch.py).

    others_cpu_fraction = (busy CPU time of the whole machine - our own CPU time) / (wall x CPUs)

Busy time is user + nice + system of /proc/stat's "cpu" line (proc(5); guest time is inside
user). Not irq and softirq: the kernel accounts the loopback traffic of our own collectives there,
to no process, so counting it would make our own allreduces look like a neighbour. Our own time
is this process' CPU time and its reaped children's (os.times: the ranks are reaped before the
sample ends). 0.05 means other
processes used 5 % of all the machine's cores during the launch. ``others_top`` names the
busiest of them (pids alive at both ends of the window, their utime + stime from
/proc/PID/stat), which the validation report quotes when it calls a measurement disturbed.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
NAN = float("nan")
BUSY_LIMIT = 0.10
"""Other processes' share of the machine's CPU above which a launch counts as disturbed: on 2
cores, a fifth of a core taken from 2 ranks that use both. An idle machine's daemons use 1-2 %
here; a competing job pinned to one core, 50 %."""
BUSY_ATTEMPTS = 2
"""Launches at most per measurement while ``retry_when_busy`` is on (the first included)."""
LAUNCH_LOG: list[dict[str, Any]] = []
"""What every launch of this process measured of the rest of the machine, in order (real/launch.py
appends; the validation reads the part its calibration or measurement made)."""
_retry_busy: list[tuple[float, Any]] = []


@contextlib.contextmanager
def retry_when_busy(limit: float = BUSY_LIMIT, progress=None):
    """Within the block, a launch during which other processes used more than ``limit`` of the
    CPU is launched again (at most BUSY_ATTEMPTS times; the least disturbed is kept), as a launch
    that lost CPU to the hypervisor always is (real/steal.py). The validation and the calibration
    turn it on; a single `scalebench real` measurement does not (it records the load instead).
    ``progress`` (a callable taking a line) hears of every relaunch."""
    _retry_busy.append((limit, progress))
    try:
        yield
    finally:
        _retry_busy.pop()


def busy_limit() -> float | None:
    """The limit of the innermost ``retry_when_busy`` block, or None outside any."""
    return _retry_busy[-1][0] if _retry_busy else None


def busy_progress():
    """The ``progress`` of the innermost ``retry_when_busy`` block (None outside any)."""
    return _retry_busy[-1][1] if _retry_busy else None


def busy_ticks(path: Path = Path("/proc/stat")) -> int | None:
    """Busy clock ticks of all CPUs since boot, or None off Linux."""
    try:
        fields = path.read_text(encoding="ascii").splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 4:
        return None
    user, nice, system = (int(x) for x in fields[1:4])
    return user + nice + system


def own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def process_ticks(exclude: set[int]) -> dict[int, tuple[str, int]]:
    """{pid: (command, utime + stime ticks)} of every process but ``exclude`` and their children."""
    out = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) in exclude:
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            text = (entry / "stat").read_text()
            comm = text[text.index("(") + 1:text.rindex(")")]
            rest = text.rsplit(")", 1)[1].split()
            if int(rest[1]) in exclude:  # ppid: our own children (the reaper, ranks)
                continue
            out[int(entry.name)] = (comm, int(rest[11]) + int(rest[12]))
    return out


def fraction(busy: int | None, busy_end: int | None, own_s: float, wall_s: float, cpus: int) -> float:
    """Other processes' share of the machine's CPU over a window (see the module docstring);
    NaN when unknown, clipped at 0 (tick rounding)."""
    if busy is None or busy_end is None or wall_s <= 0 or cpus <= 0:
        return NAN
    return max(0.0, ((busy_end - busy) / CLK_TCK - own_s) / (wall_s * cpus))


class LoadSample:
    """``with LoadSample() as s: <launch>``; then ``s.as_dict()``."""

    def __enter__(self) -> LoadSample:
        self._me = {os.getpid()}
        self._procs = process_ticks(self._me)
        self._busy, self._own, self._wall = busy_ticks(), own_cpu_s(), time.monotonic()
        self._load_start = _loadavg()
        self.result: dict[str, Any] = {}
        return self

    def __exit__(self, *exc) -> None:
        wall = time.monotonic() - self._wall
        cpus = os.cpu_count() or 1
        share = fraction(self._busy, busy_ticks(), own_cpu_s() - self._own, wall, cpus)
        after = process_ticks(self._me)
        top = sorted(((after[p][1] - self._procs[p][1], p, after[p][0]) for p in after if p in self._procs
                      and after[p][0] == self._procs[p][0]), reverse=True)[:3]
        busiest = [f"{comm} (pid {pid}) {100 * ticks / CLK_TCK / wall:.0f}% of a CPU"
                   for ticks, pid, comm in top if wall > 0 and ticks / CLK_TCK / wall >= 0.05]
        self.result = {"others_cpu_fraction": share, "loadavg_1m": max(self._load_start, _loadavg()),
                       "others_top": "; ".join(busiest), "window_s": wall}

    def as_dict(self) -> dict[str, Any]:
        return dict(self.result)


def _loadavg() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return NAN


def load_columns(raw: dict[str, Any]) -> dict[str, Any]:
    """A result row's columns for what other processes did during the kept launch."""
    share = raw.get("others_cpu_fraction")
    return {"others_cpu_percent": NAN if share is None or share != share else round(100 * share, 2),
            "loadavg_1m": raw.get("loadavg_1m", NAN), "others_top": raw.get("others_top", "")}
