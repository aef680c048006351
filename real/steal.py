"""CPU time the hypervisor gave away while we measured ("steal", /proc/stat), and relaunching
a measurement that lost too much of it.

On the shared 2-core VMs this project runs on, the hypervisor takes a share of the CPU the
guest wanted: 5-second windows under load showed a median of 3.4 %, a 90th percentile of 12 %
and episodes of 25-46 % lasting tens of seconds (2026-11-22, /proc/stat sampled every 5 s during
a quick validation). A launch measured inside such an episode ran 1.5-1.7x slow (a calibration's
2-rank step at 95-101 ms where later launches read 55-64 ms) and a small allreduce's latency
read 1.5-1.8 ms where held-out sizes read 0.6-0.7 ms minutes later. Those numbers describe the
neighbours, not the machine, so a launch that lost more than ``STEAL_LIMIT`` of its CPU is run
again (at most ``ATTEMPTS`` times, the least-stolen kept) and every result says what it lost.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

STEAL_LIMIT = 0.10
"""Fraction of the CPU time the guest wanted (busy + stolen) above which a launch is retried:
about the 90th percentile of 5-s windows under load here, so a quiet launch is rarely repeated."""
ATTEMPTS = 3
"""Launches at most per measurement (the first included)."""

PROC_STAT = Path("/proc/stat")


def cpu_counters(path: Path = PROC_STAT) -> tuple[int, int] | None:
    """(stolen, wanted) clock ticks since boot, all CPUs: wanted = user + nice + system + irq +
    softirq + steal (proc(5): the 'cpu' line; guest time is already inside user). None where
    /proc/stat is missing or has no steal column (not Linux, or a kernel before 2.6.11)."""
    try:
        first = path.read_text(encoding="ascii").splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if not first or first[0] != "cpu" or len(first) < 9:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in first[1:9])
    return steal, user + nice + system + irq + softirq + steal


def steal_fraction(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """Stolen / wanted ticks between two ``cpu_counters`` readings; None if unknown or idle."""
    if before is None or after is None:
        return None
    wanted = after[1] - before[1]
    if wanted <= 0:
        return None
    return max(0.0, (after[0] - before[0]) / wanted)


def least_stolen(run: Callable[[], T], *, limit: float = STEAL_LIMIT, attempts: int = ATTEMPTS,
                 progress: Callable[[str], object] | None = None, others: Callable[[T], float | None] | None = None,
                 others_limit: float = 1.0, others_attempts: int = ATTEMPTS) -> tuple[T, float | None, int]:
    """Call ``run`` until one call lost at most ``limit`` of its CPU to steal, at most ``attempts``
    times; return (the least-stolen result, its steal fraction, calls made). Where steal cannot
    be read, ``run`` is called once. With ``others`` (a result's share of the CPU other processes
    used, real/load.py), a call is also repeated while that share passes ``others_limit``, at most
    ``others_attempts`` times in all; the kept call is then the least disturbed by either."""
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    best: tuple[T, float | None, float] | None = None
    for attempt in range(1, attempts + 1):
        before = cpu_counters()
        result = run()
        fraction = steal_fraction(before, cpu_counters())
        busy = (others(result) if others is not None else None) or 0.0
        busy = 0.0 if busy != busy else busy  # NaN: unknown
        score = max(fraction or 0.0, busy)
        if best is None or score < best[2]:
            best = (result, fraction, score)
        stolen = fraction is not None and fraction > limit
        crowded = busy > others_limit and attempt < others_attempts
        if not stolen and not crowded:
            return best[0], best[1], attempt
        if progress is not None and attempt < attempts:
            why = (f"the hypervisor took {fraction:.0%} of the CPU" if stolen
                   else f"other processes used {busy:.0%} of the CPU")
            progress(f"{why} during that launch (limit {limit if stolen else others_limit:.0%}): launching again")
    assert best is not None
    return best[0], best[1], attempts


def steal_columns(raw: dict[str, Any]) -> dict[str, Any]:
    """A result row's columns for what the hypervisor took during the kept launch and how many
    launches it took (``launch`` puts both into the raw result)."""
    fraction = raw.get("cpu_steal_fraction")
    return {"cpu_steal_percent": float("nan") if fraction is None else round(100 * fraction, 2),
            "launches": raw.get("launches", 1)}
