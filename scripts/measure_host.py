"""Measure the host figures a sim/data/hosts.yaml entry holds, on this machine, with its hardware.

    python scripts/measure_host.py [--gib 2] [--repeats 5] > results/hosts/NAME.txt

Prints the machine (CPU model, cores, kernel, date, load average) and, each on one core:
- one TCP stream's rate (scripts/measure_tcp_stream.py: a sender and a receiver process over
  loopback, at loopback's MTU and, as root, at MTU 1500 in a network namespace): tcp_stream_Gbps;
- memcpy of a 64 MiB buffer (numpy.copyto, bytes copied per second): memcpy_GBps;
- a float32 sum c = a + b of 64 MiB arrays, counted as memory traffic (two reads and one write per
  element, as sim/costs/backends/gloo.py charges a reduction): reduce_GBps.
Medians of ``--repeats`` runs; the memory figures run pinned to one core where the OS allows.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def memory_rates_Bps(repeats: int) -> tuple[float, float]:
    """(memcpy bytes copied per second, float32 a + b traffic per second) on one core."""
    import numpy as np

    n = 16 * 2**20
    a, b, c = np.ones(n, np.float32), np.ones(n, np.float32), np.empty(n, np.float32)
    np.add(a, b, out=c)
    np.copyto(c, a)
    copy_s = _median_s(lambda: np.copyto(c, a), repeats)
    add_s = _median_s(lambda: np.add(a, b, out=c), repeats)
    return n * 4 / copy_s, 3 * n * 4 / add_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=2.0, help="GiB per TCP run (default 2)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per figure; medians are printed (default 5)")
    args = parser.parse_args(argv)
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if cores:
        os.sched_setaffinity(0, {min(cores)})  # the memory figures on one core
    print(f"date: {datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds')}")
    print(f"cpu: {_cpu_model()}; {os.cpu_count()} cores visible; kernel {platform.release()}; "
          f"python {platform.python_version()}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    copy_Bps, reduce_Bps = memory_rates_Bps(max(args.repeats, 9))
    print(f"cores: {os.cpu_count()}   (os.cpu_count(): the logical CPUs; give the physical cores if hyperthreads are on)")
    print(f"memcpy_GBps: {copy_Bps / 1e9:.2f}   (numpy.copyto of 64 MiB, one core, median)")
    print(f"reduce_GBps: {reduce_Bps / 1e9:.2f}   (float32 c = a + b of 64 MiB, 3 x 4 bytes per element, one core, median)")
    if cores:
        os.sched_setaffinity(0, cores)  # the TCP stream's sender and receiver each on a core of their own
    script = Path(__file__).resolve().parent / "measure_tcp_stream.py"
    sys.stdout.flush()
    subprocess.run([sys.executable, str(script), "--gib", str(args.gib), "--repeats", str(args.repeats)], check=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
