"""What the development set's loaders share: a prediction row, the CSV reader, where the shipped
files are, and the Horovod benchmark's scenario (validation/devset.py and devset_frameworks.py
both build on these; kept apart so neither imports the other)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.errors import ConfigError

DEVSET_DIR = Path(__file__).resolve().parent / "devset"


@dataclass(frozen=True)
class Prediction:
    group: str
    case: str
    measured: float
    predicted: float
    naive: float
    unit: str
    """'s' (errors in %), 'GB/s' (errors in %) or 'eff' (errors in percentage points)."""
    gated: bool = True
    """Inside the rows the README's floor covers."""
    gpus: int = 0
    """The row's GPU count, where it has one (targets that hold at some GPU counts only)."""
    scenario: Any = None
    """The sim.scenario.Scenario predicted, for rows that are a training iteration: with ``result``
    and ``measured_iteration_s``, what ``validate --suite devset --explain`` explains
    (validation/devset_explain.py)."""
    result: Any = None
    """Its sim.result.IterationResult."""
    measured_iteration_s: float | None = None
    """The measurement as one iteration's time: what ``--explain`` sets the predicted terms beside."""

    def error(self, value: float | None = None) -> float:
        value = self.predicted if value is None else value
        if self.unit == "eff":
            return 100.0 * (value - self.measured)
        return 100.0 * (value - self.measured) / self.measured


def read_rows(path: Path) -> list[dict[str, str]]:
    """A devset CSV, read bounded (sim.fileio: a named pipe or a device in --data is one line, not a hang)."""
    import io

    from sim.fileio import read_input_text

    try:
        text = read_input_text("--data", path, what=f"a directory holding {path.name}")
    except ConfigError as err:
        raise ConfigError("--data", str(path.parent), err.allowed) from None
    return list(csv.DictReader(io.StringIO(text, newline="")))


HOROVOD_HOST = "broadwell_ep_x2"
"""Uber's servers: 'Pascal GPUs, 4 per server', 25 GbE; their CPUs are not stated (assumed: a
two-socket Broadwell-EP server of 2017, sim/data/hosts.yaml)."""
HOROVOD_NCCL_VERSION = "2.0"
"""Horovod's 2017 post ran 'NCCL2'; in October 2017 that was 2.0 (validation/devset.py's docstring says why)."""


def horovod_scenario(model: str, gpus: int, inter_link: str, ideal_per_gpu: float, batch: int = 64):
    from sim.calibration import throughput_calibrated_scenario

    spec = {
        "name": f"horovod-{model}-{gpus}-{inter_link}",
        "workload": {"model": model, "batch_size": batch, "data": "synthetic"},  # tf_cnn_benchmarks' default
        "cluster": {"gpus": gpus, "gpus_per_node": 4, "gpu": "p100_pcie", "intra_link": "pcie3",
                    "inter_link": inter_link, "host": HOROVOD_HOST},
        "strategy": {"framework": "horovod", "precision": "fp32", "nccl_version": HOROVOD_NCCL_VERSION},
    }
    return throughput_calibrated_scenario(spec, {"single_gpu_samples_per_s": ideal_per_gpu, "batch_size": batch})
