"""The real harness on 2 gloo ranks: rows, loss parity, reliability, bad arguments.

Each launch costs ~10 s here (torch imports on 2 shared cores); runs are tiny (mlp, a few steps).
"""

from __future__ import annotations

import math
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")

from real.launch import RunFailed  # noqa: E402
from real.measure import measure_point, metrics_from_ranks, run_spec  # noqa: E402
from real.seed_mlp import SEED_SPEC, data_parallel_losses, reference_losses  # noqa: E402
from sim.config import scenario_columns, scenario_from_dict  # noqa: E402

pytestmark = pytest.mark.torch

STEPS = 6
LOSS_RTOL = 1e-5
"""DP vs one process: the same sums in another order; fp32 rounding over a few steps."""


@pytest.fixture(scope="module")
def dp_run():
    return run_spec(SEED_SPEC, iterations=STEPS - 1, warmup=1, timeout_s=30)


def test_data_parallel_matches_single_process_loss(dp_run):
    _, _, raw = dp_run
    dp = data_parallel_losses(raw)
    single = reference_losses(SEED_SPEC, STEPS)
    assert len(dp) == STEPS
    assert dp == pytest.approx(single, rel=LOSS_RTOL)
    assert dp[-1] < dp[0]  # it learns


def test_row_has_the_simulated_columns(dp_run):
    scenario, _, raw = dp_run
    row = metrics_from_ranks(raw, scenario.workload.batch_size)
    sim_row_keys = {"world_size", "iteration_time_s", "compute_time_s", "exposed_comm_time_s", "comm_time_s",
                    "forward_time_s", "backward_time_s", "optimizer_time_s", "throughput_samples_per_s",
                    "baseline_time_s", "speedup", "scaling_efficiency", "bytes_intra", "bytes_inter",
                    "buckets", "events", "fidelity"}
    assert sim_row_keys <= set(row)
    assert row["iteration_time_s"] > 0 and row["compute_time_s"] > 0
    assert row["iteration_time_iqr_s"] >= 0
    assert math.isclose(row["exposed_comm_time_s"], row["iteration_time_s"] - row["compute_time_s"])
    assert math.isclose(row["throughput_samples_per_s"], 2 * 32 / row["iteration_time_s"])
    assert len(raw["ranks"][0]["iteration"]) == STEPS - 1  # warm-up excluded


def test_sim_metrics_list_is_what_we_claim():
    """The row's metric keys cover IterationResult.metrics() (checked on a simulated result)."""
    from sim.simulate import simulate

    sim_row = simulate(scenario_from_dict({"workload": {"model": "mlp"}, "cluster": {"gpus": 2, "gpu": "cpu"}})).metrics()
    raw = {"world": 2, "ranks": [{"iteration": [1.0, 2.0], "compute": [[0.1, 0.2, 0.1]] * 2, "comm": [0.5, 0.5],
                                  "losses": [1.0], "baseline": [[0.1, 0.2, 0.1]] * 2},
                                 {"iteration": [1.5, 1.0], "compute": [[0.2, 0.2, 0.1]] * 2, "comm": [0.4, 0.6]}]}
    row = metrics_from_ranks(raw, 8)
    assert set(sim_row) <= set(row)
    assert row["iteration_time_s"] == pytest.approx(1.75)  # slowest per iteration: 1.5, 2.0 -> median
    assert row["compute_time_s"] == pytest.approx(0.5)
    assert row["baseline_time_s"] == pytest.approx(0.4)


def test_measure_point_row_and_environment():
    spec = {"workload": {"model": "mlp", "batch_size": 8}, "cluster": {"gpus": 2, "gpu": "cpu"},
            "strategy": {"bucket_mib": 0.001, "overlap": False}}
    row = measure_point(spec, iterations=3, warmup=1, timeout_s=30)
    scenario = scenario_from_dict({k: v for k, v in spec.items()}, extra_keys=("real",))
    for key, value in scenario_columns(scenario).items():
        assert row[key] == value
    assert row["source"] == "real" and row["backend"] == "gloo" and row["link"] == "loopback"
    assert row["torch_version"] == torch.__version__ and row["git_revision"]
    assert row["buckets"] >= 2  # a 1 KiB bucket cap splits the mlp's 2.4 KiB of gradients


def test_killed_rank_stops_everyone_within_the_timeout():
    spec = {**SEED_SPEC, "real": {"baseline": False, "fault": {"rank": 1, "iteration": 2}}}
    start = time.monotonic()
    with pytest.raises(RunFailed, match=r"rank 1 failed \(killed by signal 9\)"):
        run_spec(spec, iterations=5, warmup=1, timeout_s=15)
    assert time.monotonic() - start < 15 + 20  # the timeout plus start-up on a loaded machine
    assert not _workers_alive()


def test_hung_rank_is_stopped_by_the_watchdog():
    spec = {**SEED_SPEC, "real": {"baseline": False, "fault": {"rank": 1, "iteration": 2, "mode": "hang"}}}
    start = time.monotonic()
    with pytest.raises(RunFailed, match=r"rank \d (failed|made no progress)"):
        run_spec(spec, iterations=5, warmup=1, timeout_s=6)
    assert time.monotonic() - start < 6 + 25
    assert not _workers_alive()


def _workers_alive() -> bool:
    out = subprocess.run(["pgrep", "-f", "real.worker /tmp/scalebench-real-"], capture_output=True, text=True)
    return bool(out.stdout.strip())


@pytest.mark.parametrize("argv", [
    ["--nproc", "0"],
    ["--workload", "resnet50"],
    ["--strategy", "pipeline", "--workload", "mlp", "--nproc", "8", "--microbatches", "1"],
    ["--strategy", "nonsense"],
    ["--compression", "fp9"],
    ["--backend", "mpi"],
])
def test_bad_arguments_exit_2_with_one_line(argv, capsys):
    from scalebench.cli import main

    assert main(["real", *argv]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0]


def test_bad_arguments_exit_status_of_the_command():
    out = subprocess.run([sys.executable, "-m", "scalebench", "real", "--nproc", "-1"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_missing_float8_is_a_config_error(monkeypatch):
    from real.config import _require_float8
    from sim.errors import ConfigError

    monkeypatch.delattr(torch, "float8_e5m2")
    with pytest.raises(ConfigError, match="float8_e5m2"):
        _require_float8("fp8_e5m2")
