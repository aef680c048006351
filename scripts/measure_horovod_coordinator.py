"""Measure what Horovod 2017's coordinator spends per negotiation message (rank 0's CPU time).

Builds ``scripts/horovod_coordinator_bench.cc`` (Horovod 0.9-0.13.2's BackgroundThreadLoop: one
MPI message per ready tensor from every worker to rank 0, received with MPI_Probe(ANY_SOURCE) +
MPI_Recv and counted in a hash table; each fused response sent to every worker with MPI_Send)
with Open MPI's ``mpicxx`` and runs it over Open MPI's TCP transport on loopback (Horovod's docs
ran ``mpirun -mca btl ^openib``: the control plane over TCP even on a RoCE network). Prints rank
0's time per received request and per sent response message (medians over the repeats), for
2, 3 and 4 ranks. ``sim.costs.coordination.OPENMPI_TCP_REQUEST_S`` and ``..._RESPONSE_S`` are this
script's figures.

    python scripts/measure_horovod_coordinator.py [--tensors 300] [--repeats 30]

Needs Open MPI (Debian: ``apt-get install openmpi-bin libopenmpi-dev``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "horovod_coordinator_bench.cc"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=300, help="requests per worker per cycle")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--responses", type=int, default=8, help="fused responses per cycle")
    args = parser.parse_args(argv)
    if not (shutil.which("mpicxx") and shutil.which("mpirun")):
        print("needs Open MPI's mpicxx and mpirun (apt-get install openmpi-bin libopenmpi-dev)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        binary = Path(tmp) / "horovod_coordinator_bench"
        subprocess.run(["mpicxx", "-O2", "-o", str(binary), str(SOURCE)], check=True)
        for ranks in (2, 3, 4):
            run = subprocess.run(
                ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), "--mca", "btl", "tcp,self",
                 "--mca", "btl_tcp_if_include", "lo", str(binary), str(args.tensors), str(args.repeats),
                 str(args.responses)],
                capture_output=True, text=True, timeout=600, check=True)
            print(run.stdout.strip().splitlines()[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
