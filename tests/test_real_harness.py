"""The real harness on 2 gloo ranks: rows, loss parity, reliability, bad arguments.

Each launch costs ~10 s here (torch imports on 2 shared cores); runs are tiny (mlp, a few steps).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")

from real.binding import BIND_ENV, describe, rank_cpus, worth_binding  # noqa: E402
from real.launch import RunFailed  # noqa: E402
from real.measure import measure_point, metrics_from_ranks, run_spec  # noqa: E402
from real.seed_mlp import SEED_SPEC, data_parallel_losses, reference_losses  # noqa: E402
from sim.config import scenario_columns, scenario_from_dict  # noqa: E402
from sim.errors import ConfigError  # noqa: E402

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
    diff = row["iteration_time_s"] - row["compute_time_s"]
    assert math.isclose(row["exposed_comm_measured_s"], diff)
    if diff >= 0:
        assert math.isclose(row["exposed_comm_time_s"], diff)
    elif row["exposed_comm_below_noise"]:
        assert row["exposed_comm_time_s"] == 0.0  # never a negative time
    else:
        assert math.isnan(row["exposed_comm_time_s"])
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
    assert row["iteration_time_s"] == pytest.approx(1.75)  # slowest per iteration: 1.5, 2.0 -> mean
    assert row["iteration_time_median_s"] == pytest.approx(1.75)
    assert row["compute_time_s"] == pytest.approx(0.5)
    assert row["baseline_time_s"] == pytest.approx(0.4)
    bimodal = {"world": 2, "ranks": [{"iteration": [1.0, 1.0, 4.0]}, {"iteration": [0.5, 1.0, 1.0]}]}
    row = metrics_from_ranks(bimodal, 8)
    assert row["iteration_time_s"] == pytest.approx(2.0)  # the mean of 1, 1, 4: what three steps add up to
    assert row["iteration_time_median_s"] == pytest.approx(1.0)


def test_measure_point_row_and_environment():
    spec = {"workload": {"model": "mlp", "batch_size": 8}, "cluster": {"gpus": 2, "gpu": "cpu"},
            "strategy": {"bucket_mib": 0.001, "overlap": False}}
    row = measure_point(spec, iterations=3, warmup=1, timeout_s=30)
    from real.config import real_scenario

    measured = {"gpu": "cpu", "intra_link": "loopback", "inter_link": "loopback"}  # what ran, not the sim's names
    for key, value in scenario_columns(real_scenario(spec)[0]).items():
        assert row[key] == measured.get(key, value)
    assert row["nodes"] == 1 and row["gpus_per_node"] == 2  # both ranks on this machine
    assert row["source"] == "real" and row["backend"] == "gloo" and row["link"] == "loopback"
    assert row["torch_version"] == torch.__version__ and row["git_revision"]
    assert row["buckets"] >= 2  # a 1 KiB bucket cap splits the mlp's 2.4 KiB of gradients
    # bound as real/binding.py maps this machine's CPUs (on 2 CPUs: one single-thread rank per
    # CPU, which stays unbound)
    threads, cpus = max(1, (os.cpu_count() or 1) // 2), sorted(os.sched_getaffinity(0))
    expected = describe(2, threads, cpus) if worth_binding(2, threads, len(cpus)) else "unbound"
    assert row["cpu_binding"] == expected


def test_ddp_reports_the_buckets_it_reduces_which_the_simulator_plans():
    """Overlap on: the buckets DDP rebuilds after its first iteration (its logging data keeps the
    single starting bucket), the same sizes as the simulator's plan for that bucket cap."""
    from sim.engine.plan import build_plan

    spec = {"workload": {"model": "mlp", "batch_size": 8}, "cluster": {"gpus": 2, "gpu": "cpu"},
            "strategy": {"bucket_mib": 0.001, "first_bucket_mib": 0.001, "overlap": True}}
    scenario, _, raw = run_spec(spec, iterations=3, warmup=1, timeout_s=30)
    planned = [int(b.n_bytes) for b in build_plan(scenario_from_dict(spec)).buckets]
    assert len(planned) >= 2  # a 1 KiB cap splits the mlp's 2.4 KiB of gradients
    assert raw["ranks"][0]["bucket_bytes"] == planned
    assert metrics_from_ranks(raw, 8)["buckets"] == len(planned)


def test_ranks_run_on_the_cpus_they_report(monkeypatch):
    """Each launched rank's own affinity is what the map says (not only the map)."""
    from real.launch import launch

    allowed = sorted(os.sched_getaffinity(0))
    ranks = len(allowed) + 1  # more ranks than CPUs: bound
    job = {"kind": "affinity_probe", "backend": "gloo", "threads": 1}
    out = launch(job, ranks, timeout_s=60, deadline_s=120)
    assert out["affinities"] == [rank_cpus(r, ranks, 1, allowed) for r in range(ranks)]
    assert out["omp_proc_bind"] == "true"
    monkeypatch.setenv(BIND_ENV, "0")
    free = launch(job, ranks, timeout_s=60, deadline_s=120)
    assert free["affinities"] == [allowed] * ranks and free["cpu_binding"] == "unbound"


@pytest.mark.parametrize("value, bound", [("1", True), (" 1 ", True), ("", True), ("0", False)])
def test_bind_cores_takes_1_or_0_and_binds_when_unset(monkeypatch, value, bound):
    from real.binding import binding_enabled

    monkeypatch.setenv(BIND_ENV, value)
    assert binding_enabled() is (bound and hasattr(os, "sched_setaffinity"))
    monkeypatch.delenv(BIND_ENV)
    assert binding_enabled() is hasattr(os, "sched_setaffinity")


@pytest.mark.parametrize("value", ["off", "false", "yes", "2"])
def test_bind_cores_refuses_any_other_value_before_a_rank_starts(monkeypatch, value):
    from real.launch import launch

    monkeypatch.setenv(BIND_ENV, value)
    start = time.monotonic()
    with pytest.raises(ConfigError, match=rf"^{BIND_ENV}: got '{value}'; allowed: 1 \(bind .* or 0 \(no binding\)$"):
        launch({"kind": "affinity_probe", "backend": "gloo", "threads": 1}, 2, timeout_s=30, deadline_s=30)
    assert time.monotonic() - start < 2  # refused in the parent: no rank was started


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
    with pytest.raises(RunFailed, match=r"rank 1 made no progress in ddp iterations for \d+ s while the other ranks "
                                        r"waited for it"):
        run_spec(spec, iterations=5, warmup=1, timeout_s=8)
    assert time.monotonic() - start < 8 + 40  # the timeout plus start-up on a loaded machine
    assert not _workers_alive()


def _workers_alive() -> bool:
    """Any rank this test process started still running (or not reaped)? Other users' runs don't count."""
    import os
    from pathlib import Path

    me = str(os.getpid())
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text()
            cmd = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == me and b"real.worker" in cmd:
            return True
    return False


@pytest.mark.parametrize("argv", [
    ["--gpus", "0"],
    ["--model", "resnet50"],
    ["--strategy", "pipeline", "--model", "mlp", "--gpus", "8", "--micro-batches", "1"],
    ["--strategy", "nonsense"],
    ["--codec", "fp9"],
    ["--backend", "mpi"],
    ["--link", "fast"],
    ["--backend", "nccl", "--strategy", "ps_sync", "--gpus", "3"],
    ["--backend", "nccl", "--gpus", "64"],  # more local ranks than CUDA devices (none on CI)
    ["--topology", "ring"],
    ["--max-bytes", "12XB"],
    ["--gpu", "h100"],  # simulate's flag: a measurement here is this machine's
    ["--nproc", "2"],  # one spelling per flag: --gpus
])
def test_bad_arguments_exit_2_with_one_line(argv, capsys):
    from scalebench.cli import main

    assert main(["real", *argv]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0]


def test_bad_arguments_exit_status_of_the_command():
    out = subprocess.run([sys.executable, "-m", "scalebench", "real", "--iterations", "0"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_missing_float8_is_a_config_error(monkeypatch):
    from real.config import _require_float8
    from sim.errors import ConfigError

    monkeypatch.delattr(torch, "float8_e5m2")
    with pytest.raises(ConfigError, match="float8_e5m2"):
        _require_float8("fp8_e5m2")


def test_calibrate_bad_arguments_exit_2(capsys):
    from scalebench.cli import main

    assert main(["calibrate", "--ranks", "1"]) == 2
    assert main(["calibrate", "--models", "resnet50"]) == 2
    assert main(["calibrate", "--links", "fast"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 3


@pytest.mark.slow
def test_calibrate_writes_what_the_simulator_loads(tmp_path):
    """End to end (about a minute): measure, write, load into a scenario, simulate."""
    from scalebench.cli import main
    from sim.calibration import apply_calibration, load_calibration
    from sim.catalog import load_catalog_file
    from sim.simulate import simulate

    assert main(["calibrate", "--out", str(tmp_path), "--models", "mlp", "--colocated", "1", "2",
                 "--max-bytes", "65536", "--iterations", "3"]) == 0
    cal = load_calibration(tmp_path)
    catalog = load_catalog_file(cal.catalog_file)
    assert "cpu_local" in catalog.gpus and "gloo_loopback" in catalog.links
    spec = {"workload": {"model": "mlp", "batch_size": 64},
            "cluster": {"gpus": 2, "gpus_per_node": 2, "gpu": "cpu_local", "intra_link": "gloo_loopback",
                        "inter_link": "gloo_loopback"}}
    scenario = apply_calibration(scenario_from_dict(spec, catalog), cal)
    assert all(layer.fwd_time_s > 0 and layer.bwd_time_s > 0 for layer in scenario.workload.layers)
    assert simulate(scenario).iteration_time_s > 0


def test_in_situ_collectives_time_the_collective_not_the_compute_before_it():
    """``busy_s``: every rank computes 60 ms before each timed allreduce; the burst is outside
    the timing (a 1 KiB allreduce on loopback is a few ms at most), the result still checked."""
    from real.bench_comm import measure_collectives

    (row,) = measure_collectives(2, ["allreduce"], min_bytes=1024, max_bytes=1024, iterations=3, warmup=1,
                                 busy_s=0.06)
    assert row["wrong"] == 0 and row["repetitions"] >= 3
    assert 0 < row["time_s"] < 0.03


def test_exposed_communication_below_the_noise_is_said_so_never_a_negative_time():
    """By hand: iterations 10, 12, 14 ms (mean 12, variance 4e-6 s^2), compute 11, 13, 15 ms (mean
    13): difference -1 ms; noise 2 sqrt(4e-6/3 + 4e-6/3) = 3.27 ms: below the noise, reported 0.
    Compute 20, 22, 24 ms: -10 ms beyond the noise: not measured (NaN). A busy machine printed
    'exposed communication -5.68 ms' (issue 29)."""
    from real.cli import _exposed
    from real.measure import exposed_communication
    from sim.units import human_seconds

    def table(out):
        return _exposed(out, lambda k: human_seconds(out[k]) if out[k] == out[k] else "-")

    within = exposed_communication([0.010, 0.012, 0.014], [0.011, 0.013, 0.015])
    assert within["exposed_comm_measured_s"] == pytest.approx(-0.001)
    assert within["exposed_comm_noise_s"] == pytest.approx(2 * math.sqrt(2 * 4e-6 / 3))
    assert within["exposed_comm_below_noise"] and within["exposed_comm_time_s"] == 0.0
    assert "below the noise" in table(within) and "~0" in table(within)
    beyond = exposed_communication([0.010, 0.012, 0.014], [0.020, 0.022, 0.024])
    assert math.isnan(beyond["exposed_comm_time_s"]) and not beyond["exposed_comm_below_noise"]
    assert "not measured: compute alone took 10.00 ms longer" in table(beyond)
    clear = exposed_communication([0.030, 0.031, 0.032], [0.010, 0.011, 0.012])
    assert clear["exposed_comm_time_s"] == pytest.approx(0.020) and not clear["exposed_comm_below_noise"]
    assert table(clear).split()[0:2] == ["20.00", "ms"]
