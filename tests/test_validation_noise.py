"""The validation tells the machine's noise from the model's error: the judgement of a point's
launches, the verdict on synthetic measurements, and which record a run replays, resumes or
starts anew (validation/noise.py, validation/record.py)."""

from __future__ import annotations

import json
import math

import pytest

from validation.noise import Launch, calibration_noise, decide, error_lower_bound, judge_point

QUIET, BUSY = 2.0, 60.0  # other processes' share of the CPU, percent


def launches(*times, others=QUIET, steal=0.0):
    return [Launch(time_s=t, others_percent=others, steal_percent=steal) for t in times]


# -- one point ------------------------------------------------------------------------------------

def test_three_quiet_launches_that_agree_are_judged_by_their_median():
    j = judge_point(launches(0.100, 0.104, 0.098), rounds=3)
    assert j.judged and j.value_s == pytest.approx(0.100) and j.reason == ""
    assert j.spread == pytest.approx((0.104 - 0.098) / 0.100)


def test_disturbed_launches_do_not_count_and_the_reason_names_the_load():
    got = launches(0.100, 0.101) + [Launch(0.180, others_percent=BUSY, others_top="python (pid 7) 98% of a CPU")]
    j = judge_point(got, rounds=3)
    assert not j.judged and j.disturbed == 1
    assert "1 of 3 launches disturbed" in j.reason and "60%" in j.reason and "python (pid 7)" in j.reason
    assert j.value_s == pytest.approx(0.101)  # compared by the median of all three meanwhile
    assert j.fastest_s == pytest.approx(0.100)


def test_stolen_cpu_disturbs_a_launch_too():
    j = judge_point(launches(0.1, 0.1) + launches(0.1, steal=25.0), rounds=3)
    assert not j.judged and "hypervisor took up to 25%" in j.reason


def test_a_spread_beyond_the_limit_is_not_judged_and_a_fourth_launch_that_agrees_settles_it():
    spread = launches(0.100, 0.130, 0.160)  # (0.16 - 0.10) / 0.13 = 46 %
    j = judge_point(spread, rounds=3, spread_percent=25)
    assert not j.judged and "agree no closer than 46%" in j.reason
    j = judge_point(spread + launches(0.135), rounds=3, spread_percent=25)  # 0.130, 0.135, 0.160: 22 %
    assert j.judged and j.value_s == pytest.approx(0.135)


def test_unrecorded_load_is_judged_by_repeatability_alone():
    j = judge_point([Launch(0.1), Launch(0.1), Launch(0.1)], rounds=3)
    assert j.judged and not j.load_recorded


def test_noise_only_slows_launches_so_the_fastest_bounds_the_error():
    assert error_lower_bound(predicted_s=1.26, fastest_s=0.017) == pytest.approx(1.26 / 0.017 - 1)
    assert error_lower_bound(predicted_s=0.09, fastest_s=0.10) == 0.0  # faster than measured: noise may explain it
    assert math.isnan(error_lower_bound(math.nan, 0.1))


# -- the verdict on synthetic measurements -------------------------------------------------------

def row(name, error, judged=True, bound=None, noise=""):
    return {"point": name, "rel_error": error, "judged": judged, "noise": noise,
            "error_lower_bound": max(0.0, error) if bound is None else bound}


THRESHOLDS = {"mape_percent": 35.0, "worst_percent": None, "min_points": 4}


def test_quiet_accurate_measurements_pass():
    d = decide([row(f"p{i}", e) for i, e in enumerate([0.05, -0.10, 0.20, -0.08, 0.12, 0.02])], **THRESHOLDS)
    assert (d.status, d.exit_status, d.judged) == ("PASS", 0, 6)


def test_a_model_error_on_quiet_measurements_fails():
    d = decide([row(f"p{i}", e) for i, e in enumerate([0.9, -0.6, 0.7, 0.5, 0.8, 1.0])], **THRESHOLDS)
    assert d.status == "FAIL" and d.exit_status == 1 and "MAPE 75.0% over the 6 judged points" in d.reasons[0]


def test_a_busy_machine_is_inconclusive_not_a_failure():
    """Every launch disturbed, the model's errors large but of the kind noise makes (the machine
    measured slower than predicted): no verdict on the model."""
    rows = [row(f"p{i}", -0.5, judged=False, bound=0.0, noise="3 of 3 launches disturbed") for i in range(6)]
    d = decide(rows, **THRESHOLDS)
    assert (d.status, d.exit_status) == ("INCONCLUSIVE", 3)
    assert d.reasons[0] == "only 0 of 6 points could be judged (need 4)"
    assert "p0: 3 of 3 launches disturbed" in d.reasons[1]


def test_a_model_error_noise_cannot_explain_fails_even_on_a_busy_machine():
    """The small CNN predicted at 1.26 s where every launch measured 0.017-0.04 s: contention
    only slows launches, so no noise makes the model right."""
    rows = [row(f"p{i}", -0.3, judged=False, bound=0.0, noise="busy") for i in range(5)]
    rows.append(row("ddp-small_cnn-n1", 30.0, judged=False, bound=1.26 / 0.017 - 1, noise="busy"))
    d = decide(rows, **THRESHOLDS)
    assert d.status == "FAIL" and "ddp-small_cnn-n1 predicted 7312% slower than its fastest launch" in d.reasons[0]


def test_enough_judged_points_decide_and_unjudged_ones_are_listed_not_counted():
    rows = [row(f"p{i}", 0.1) for i in range(4)] + [row("noisy", -0.9, judged=False, bound=0.0, noise="spread")]
    assert decide(rows, **THRESHOLDS).status == "PASS"
    rows[0] = row("p0", 2.0)  # a judged point far off: MAPE over judged 57.5 %
    assert decide(rows, **THRESHOLDS).status == "FAIL"


def test_the_worst_point_threshold_applies_to_judged_points():
    rows = [row(f"p{i}", 0.05) for i in range(5)] + [row("bad", -0.4)]
    d = decide(rows, mape_percent=20, worst_percent=25, min_points=4)
    assert d.status == "FAIL" and d.reasons == ("worst point bad at 40.0% > 25%",)


def test_a_disturbed_calibration_makes_any_measurement_inconclusive():
    rows = [row(f"p{i}", 5.0) for i in range(6)]  # predictions from a slowed calibration: all far too slow
    d = decide(rows, **THRESHOLDS, calibration_noise="4 of 20 of its launches ran while ...")
    assert d.status == "INCONCLUSIVE" and d.reasons[0].startswith("the calibration was disturbed: 4 of 20")


def test_calibration_noise_names_the_busiest_launch():
    log = [{"others_cpu_fraction": 0.01}, {"others_cpu_fraction": 0.45, "others_top": "cc1 (pid 9) 90% of a CPU"},
           {"others_cpu_fraction": 0.2}]
    text = calibration_noise(log, busy_percent=10)
    assert text.startswith("2 of 3 of its launches") and "up to 45% (cc1 (pid 9)" in text
    assert calibration_noise(log[:1], busy_percent=10) == ""


# -- which record a run replays, resumes or starts anew ----------------------------------------------

def _config(tmp_path, rounds=2):
    from validation.config import load_validation_config

    spec = {"out": str(tmp_path / "out"), "threshold": {"mape_percent": 10, "min_points": 1},
            "measure": {"rounds": rounds}, "calibration": {"dir": str(tmp_path / "out" / "cal")},
            "sweeps": [{"model": "mlp", "ranks": [1, 2]}]}
    path = tmp_path / "v.yaml"
    import yaml

    path.write_text(yaml.safe_dump(spec))
    return load_validation_config(path)


def _write_record(cfg, launches_per_point, machine=None):
    cfg.out.mkdir(parents=True, exist_ok=True)
    (cfg.out / "cal").mkdir(exist_ok=True)
    (cfg.out / "cal" / "device.yaml").write_text("device: cpu_local\n")
    rows = [{"iteration_time_s": 0.01}] * launches_per_point
    (cfg.out / "measured.json").write_text(json.dumps(
        {p.id: {"status": "measured", "row": rows[0], "rounds": rows} for p in cfg.points}))
    if machine is not None:
        for d in (cfg.out, cfg.out / "cal"):
            (d / "record.json").write_text(json.dumps({"machine": machine}))


def test_a_complete_record_is_replayed_and_an_incomplete_one_refused_by_replay(tmp_path):
    from sim.errors import ConfigError
    from validation.run import record_missing, run_validation

    cfg = _config(tmp_path)
    _write_record(cfg, launches_per_point=2)
    assert record_missing(cfg) == []
    _write_record(cfg, launches_per_point=1)
    missing = record_missing(cfg)
    assert missing == [f"2 of 2 points with fewer than 2 launches (e.g. {cfg.points[0].id})"]
    with pytest.raises(ConfigError, match=r"^--replay: .* lacks 2 of 2 points with fewer than 2 launches"):
        run_validation(cfg, replay=True, progress=lambda _: None)


def test_an_incomplete_record_of_another_machine_is_not_mixed_with_this_ones(tmp_path, monkeypatch):
    """What `validate --quick` did on a fresh clone: a committed calibration and one round from
    another machine, two more rounds measured here, compared together. Now it starts anew."""
    import validation.calib
    import validation.run

    cfg = _config(tmp_path)
    _write_record(cfg, launches_per_point=1, machine={"host": "elsewhere"})
    seen = {}

    def stop(directory, settings, *, recalibrate, progress, busy_percent=None):
        seen["recalibrate"] = recalibrate
        raise RuntimeError("stop here")

    monkeypatch.setattr(validation.calib, "ensure_calibration", stop)
    said: list[str] = []
    with pytest.raises(RuntimeError, match="stop here"):
        validation.run.run_validation(cfg, progress=said.append)
    assert seen["recalibrate"] is True
    assert "comes from elsewhere" in said[0] and "calibrating and measuring this machine anew" in said[0]


def test_an_incomplete_record_of_this_machine_is_resumed(tmp_path, monkeypatch):
    import validation.calib
    import validation.run
    from real.results import machine

    cfg = _config(tmp_path)
    _write_record(cfg, launches_per_point=1, machine=machine())
    seen = {}

    def stop(directory, settings, *, recalibrate, progress, busy_percent=None):
        seen["recalibrate"], seen["busy"] = recalibrate, busy_percent
        raise RuntimeError("stop here")

    monkeypatch.setattr(validation.calib, "ensure_calibration", stop)
    with pytest.raises(RuntimeError):
        validation.run.run_validation(cfg, progress=lambda _: None)
    assert seen == {"recalibrate": False, "busy": 10.0}


def test_noisy_points_are_re_measured_up_to_the_budget(tmp_path, monkeypatch):
    """Base rounds, then one more launch per pass for each point the noise left unjudged, at
    most measure.max_rounds launches; a point that settles stops being measured."""
    import real.measure
    from validation.run import judgement, measure_all

    cfg = _config(tmp_path, rounds=3)
    a, b = (p.id for p in cfg.points)
    plan = {a: iter([(0.1, QUIET), (0.1, BUSY), (0.1, QUIET), (0.1, QUIET)]),  # settles at launch 4
            b: iter([(0.1, BUSY)] * 10)}  # always busy: 5 launches (rounds 3 + 2) and no more
    calls: list[str] = []

    def fake(spec, **kw):
        pid = next(p.id for p in cfg.points if p.ranks == spec["cluster"]["gpus"])
        calls.append(pid)
        t, others = next(plan[pid])
        return {"iteration_time_s": t, "others_cpu_percent": others}

    monkeypatch.setattr(real.measure, "measure_point", fake)
    measured = measure_all(cfg, remeasure=True, progress=lambda _: None)
    assert calls.count(a) == 4 and calls.count(b) == 5
    assert judgement(cfg, measured[a]).judged and not judgement(cfg, measured[b]).judged


@pytest.mark.parametrize(("cal_busy", "point_busy", "status", "verdict"), [
    (0.01, QUIET, 0, "Verdict: PASS"),
    (0.55, QUIET, 3, "Verdict: INCONCLUSIVE (the calibration was disturbed: 1 of 2 of its launches"),
    (0.01, BUSY, 3, "Verdict: INCONCLUSIVE (only 0 of 2 points could be judged (need 2)"),
])
def test_the_command_exits_with_the_verdict_and_says_why(tmp_path, cal_busy, point_busy, status, verdict):
    """`scalebench validate` on a complete record whose launches carry their load: quiet -> PASS
    (0); a busy calibration or busy points -> INCONCLUSIVE (3), the reason in the summary."""
    from real.calibrated_links import calibrated_catalog
    from scalebench.cli import main
    from sim.calibration import load_calibration
    from tests.test_validation import _calibration, _write
    from validation.config import load_validation_config
    from validation.points import predict

    cal_dir = tmp_path / "cal"
    _calibration(cal_dir)
    (cal_dir / "record.json").write_text(json.dumps({"launches": [
        {"kind": "layer_profile", "others_cpu_fraction": 0.01}, {"kind": "comm", "others_cpu_fraction": cal_busy}]}))
    spec = {"out": str(tmp_path / "out"), "threshold": {"mape_percent": 10, "min_points": 2},
            "measure": {"rounds": 2}, "calibration": {"dir": str(cal_dir)}, "sweeps": [{"model": "mlp", "ranks": [1, 2]}]}
    path = _write(tmp_path, spec)
    cfg = load_validation_config(path)
    cal = load_calibration(cal_dir)
    catalog = calibrated_catalog(cal)
    cache = {}
    for p in cfg.points:
        t = predict(p, cal, catalog)["iteration_time_s"] / 1.02
        rows = [{"iteration_time_s": t, "others_cpu_percent": point_busy}, {"iteration_time_s": t * 1.01,
                                                                             "others_cpu_percent": point_busy}]
        cache[p.id] = {"status": "measured", "row": rows[0], "rounds": rows}
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "measured.json").write_text(json.dumps(cache))
    (tmp_path / "out" / "summary.md").write_text("the record's own summary")
    before = {f: f.read_bytes() for f in tmp_path.rglob("*") if f.is_file()}
    assert main(["validate", "--config", str(path), "--replay"]) == status
    # a replay leaves the record as measured and writes its report apart (never committed), with
    # no absolute path of this machine in it
    assert {f: f.read_bytes() for f in before} == before
    written = sorted(f.relative_to(tmp_path).as_posix() for f in tmp_path.rglob("*") if f.is_file() and f not in before)
    assert written and all(f.startswith("out/replay/") for f in written), written
    assert verdict in (tmp_path / "out" / "replay" / "summary.md").read_text()
    for f in written:
        if f.endswith((".md", ".csv")):
            assert str(tmp_path) not in (tmp_path / f).read_text(), f
