"""'scalebench validate --suite extrapolate': calibrated on each devset series' runs up to two
nodes, the rest predicted beside Ernest (NNLS) and the zero-shot model; exit 1 where Ernest wins."""

from __future__ import annotations

import math

import pytest

from scalebench.cli import main
from validation import extrapolate
from validation.ernest import ernest_features, ernest_time_s, fit_ernest
from validation.extrapolate import Series, evaluate_series, run_extrapolate


def test_ernest_weak_scaling_makes_the_parallel_term_the_batch():
    """scale = m x batch, so scale / m = batch whatever m is (the paper's term becomes a constant)."""
    assert [ernest_features(m, 32)[1] for m in (1, 8, 512)] == [32, 32, 32]
    assert ernest_features(8, 32) == [1.0, 32.0, math.log(8), 8.0]


def test_ernest_recovers_its_own_form():
    """Times made by t = 0.2 + 0.05 ln m + 0.001 m: NNLS predicts 64 machines by hand."""
    gpus = [1, 2, 4, 8, 16]
    times = [0.2 + 0.05 * math.log(m) + 0.001 * m for m in gpus]
    theta = fit_ernest(gpus, times, batch=32)
    assert all(t >= 0 for t in theta)
    assert ernest_time_s(theta, 64, 32) == pytest.approx(0.2 + 0.05 * math.log(64) + 0.064, rel=1e-9)


@pytest.fixture(scope="module")
def horovod():
    results, notes = run_extrapolate()
    return [r for r in results if r.series.name.startswith("horovod")], notes


def test_horovod_series_are_calibrated_on_two_nodes_and_beat_ernest(horovod):
    results, _ = horovod
    assert {r.series.name for r in results} == {f"horovod {m} {k}" for m in ("InceptionV3", "ResNet-101")
                                                for k in ("TCP", "RDMA")}
    for r in results:
        assert r.calibrated_on == (1, 8)  # one GPU, and 8 GPUs on 2 nodes of 4
        assert [p.gpus for p in r.points] == [16, 32, 64, 128]
        # both within the 2 pp: the zero-shot model (with the wait for the slowest GPU and the
        # overlap slowdown) at 0.6-1.4 pp, the calibration at 0.6-1.3 pp; it carries the 8-GPU bar's
        # +4 % residual (digitized to +-8 %) as an inter-node overhead to 128 GPUs, so it is not the
        # lower of the two in every series
        assert r.beats_ernest and r.median_pp("ours") <= 2.0 and r.median_pp("zero_shot") <= 2.0


def test_the_zero_shot_column_is_the_devset_suites_own_prediction(horovod):
    from validation.devset import run_devset

    preds, _ = run_devset()
    devset = {(p.group, p.case): p.predicted for p in preds if p.group.startswith("horovod")}
    for r in horovod[0]:
        label, kind = r.series.name.split()[1:]
        for p in r.points:
            assert p.zero_shot == pytest.approx(devset[(f"horovod {label}", f"{kind} {p.gpus} GPUs")], rel=1e-9)


def test_the_table_and_exit_status(capsys, monkeypatch):
    assert main(["validate", "--suite", "extrapolate"]) == 0
    out = capsys.readouterr().out
    assert "| horovod InceptionV3 TCP | 1, 8 | 16, 32, 64, 128 |" in out and "PASS" in out

    def ernest_wins(data_dir):  # throughputs that follow Ernest's form exactly; our scenario knows nothing of them
        times = {m: 0.4 + 0.02 * math.log(m) for m in (1, 4, 8, 16, 32)}
        spec = {"workload": {"model": "resnet50", "batch_size": 32},
                "cluster": {"gpus_per_node": 4, "gpu": "v100", "intra_link": "nvlink2", "inter_link": "ib_edr"},
                "strategy": {"precision": "fp32"}}
        throughput = {m: 32 * m / t for m, t in times.items()}
        return [Series("made by Ernest", spec, 32, 4, throughput, {m: 0.001 * v for m, v in throughput.items()},
                       {m: m * throughput[1] for m in throughput}, lambda m: m * throughput[1])]

    monkeypatch.setattr(extrapolate, "SERIES_BUILDERS", {"made": ernest_wins})
    assert main(["validate", "--suite", "extrapolate"]) == 1
    assert "FAIL: Ernest's median error is lower in made by Ernest" in capsys.readouterr().out


def test_only_runs_up_to_two_nodes_feed_the_calibration():
    spec = {"workload": {"model": "resnet50", "batch_size": 32},
            "cluster": {"gpus_per_node": 2, "gpu": "v100", "intra_link": "nvlink2", "inter_link": "ib_edr"},
            "strategy": {"precision": "fp32"}}
    throughput = {1: 100.0, 2: 190.0, 4: 370.0, 8: 700.0, 16: 1300.0}
    s = Series("tiny", spec, 32, 2, throughput, {m: 1.0 for m in throughput}, {m: 100.0 * m for m in throughput},
               lambda m: 100.0 * m)
    r = evaluate_series(s)
    assert r.calibrated_on == (1, 2, 4) and [p.gpus for p in r.points] == [8, 16]


def test_known_gaps_still_lose_to_ernest():
    results, _ = run_extrapolate()
    for r in results:
        if r.series.name in extrapolate.KNOWN_GAPS:
            assert not r.beats_ernest, f"{r.series.name} beats Ernest now: take it out of KNOWN_GAPS"


@pytest.mark.parametrize("flag", ["--all", "--quick", "--replay"])
def test_flags_of_other_suites_are_refused(flag, capsys):
    assert main(["validate", "--suite", "extrapolate", flag]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_the_horovod_spec_is_the_devset_suites_scenario():
    """Our spec, given the same one-GPU figure, simulates as the devset's horovod_scenario does."""
    from sim.calibration import throughput_calibrated_scenario
    from sim.simulate import simulate
    from validation.devset_rows import horovod_scenario
    from validation.extrapolate import horovod_spec

    spec = horovod_spec("resnet101", "tcp_25gbe")
    spec["cluster"]["gpus"] = 32
    ours = throughput_calibrated_scenario(spec, {"single_gpu_samples_per_s": 117.0, "batch_size": 64})
    theirs = horovod_scenario("resnet101", 32, "tcp_25gbe", 117.0)
    assert simulate(ours).iteration_time_s == simulate(theirs).iteration_time_s
