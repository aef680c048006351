"""Issue 29's bad input, command by command: each case failed on the code before it (accepted
silently, a traceback, a hang or a weak message) and is now one line on stderr naming the field,
exit status 2, nothing written (``check_one_line_error``); the cases with a right answer other than
an error are tests of their own below."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from scalebench.cli import main
from tests.conftest import MINI_EXPERIMENT
from tests.test_bad_input import _real, _results, check_one_line_error

HEAD = "layer,kind,param_count,fwd_flops,bwd_flops,activation_elems"
SIM = ["simulate", "--model", "mlp", "--gpus", "4", "--gpus-per-node", "2"]

CASES = {
    # flags that do not apply to what was asked: said, not ignored
    "schedule-without-pp": ({}, [*SIM, "--schedule", "gpipe"], "--schedule: got 'gpipe'; allowed: only with pipeline"),
    "ps-servers-with-a-ring": ({}, [*SIM, "--ps-servers", "4", "--collective", "ring"],
                               "--ps-servers: got 4; allowed: only with strategy.collective ps (here ring"),
    "ps-mode-with-a-ring": ({}, [*SIM, "--ps-mode", "sync", "--collective", "ring"], "--ps-mode: got 'sync'"),
    "flow-engine-on-the-fast-path": ({}, [*SIM, "--flow-engine", "event"],
                                     "--flow-engine: got 'event'; allowed: only with simulation.fidelity detailed"),
    "placement-on-one-switch": ({}, [*SIM, "--placement", "random"], "--placement: got 'random'; allowed: only on a fabric"),
    "tf-ps-with-a-ring": ({}, [*SIM, "--framework", "tf_ps", "--collective", "ring"],
                          "strategy.collective: got 'ring'; allowed: ps with framework tf_ps"),
    "nccl-on-cpus": ({}, [*SIM, "--gpu", "cpu", "--backend", "nccl"],
                     "strategy.backend: got 'nccl'; allowed: gloo or mpi on cpu"),
    "address-without-executor": ({"mini.yaml": MINI_EXPERIMENT}, ["run", "mini.yaml", "--address", "127.0.0.1:8786", "--dry-run"],
                                 "--address: got '127.0.0.1:8786'; allowed: only with --executor dask or ray"),
    "gpu-cv-without-stragglers": ({}, [*SIM, "--no-stragglers", "--gpu-cv", "0.05"],
                                  "--gpu-cv: got 0.05; allowed: only with stragglers on"),
    "explain-iteration-cv-without-stragglers": ({}, ["explain", *SIM[1:], "--no-stragglers", "--iteration-cv", "0.05",
                                                     "--measured-iteration-s", "0.001"],
                                                "--iteration-cv: got 0.05; allowed: only with stragglers on"),
    "explain-schedule-without-pp": ({}, ["explain", *SIM[1:], "--schedule", "gpipe", "--measured-iteration-s", "0.001"],
                                    "--schedule: got 'gpipe'; allowed: only with pipeline"),
    "bench-async-flag-without-async": ({}, ["bench", "--async-workers", "0", "--async-iterations", "5"],
                                       "--async-iterations: got 5; allowed: only with the asynchronous run"),
    "bench-plan-flag-without-plan": ({}, ["bench", "--plan-repeats", "0", "--plan-gpus", "0"],
                                     "--plan-gpus: got 0; allowed: only with the plan search"),
    # typo guards: nonsense in was a number out
    "gpus-per-node-1e6": ({}, ["simulate", "--model", "mlp", "--gpus", "8", "--gpus-per-node", "1000000"],
                          "cluster.gpus_per_node: got 1000000; allowed: a positive integer at most 1,024"),
    "nics-1000-on-4-gpus": ({}, ["simulate", "--model", "mlp", "--gpus", "16", "--gpus-per-node", "4",
                                 "--nics-per-node", "1000"], "cluster.nics_per_node: got 1000; allowed: a positive "
                                                             "integer at most 16 (4 per GPU"),
    "bucket-1e30": ({}, [*SIM, "--bucket-mib", "1e30"], "strategy.bucket_mib: got 1e+30"),
    "oversubscription-1e30": ({"c.yaml": "workload: mlp\ncluster: {oversubscription: 1e30}\n"}, ["simulate", "c.yaml"],
                              "cluster.oversubscription: got 1e+30"),
    "single-gpu-time-1e30": ({}, [*SIM, "--single-gpu-iteration-time-s", "1e30"],
                             "calibration.single_gpu_iteration_time_s: got 1e+30"),
    "idle-1e30": ({}, ["collective", "-b", "8", "-e", "8", "--idle-ms", "1e30"], "--idle-ms: got 1e+30"),
    "collective-backend-empty": ({}, ["collective", "-b", "8", "-e", "8", "--backend", ""], "--backend: got ''"),
    "bench-async-workers-2^20": ({}, ["bench", "--async-workers", "1048576"],
                                 "--async-workers: got 1048576; allowed: a positive integer at most 65,536"),
    "bench-async-steps": ({}, ["bench", "--async-workers", "65536", "--async-iterations", "101"],
                          "--async-iterations: got 101; allowed: at most 100 with 65,536 workers"),
    "bench-async-jitter-nan": ({}, ["bench", "--async-jitter-cv", "nan"], "--async-jitter-cv: got nan"),
    # explain's measurement: a day per iteration is a typo, one faster than a kernel launch (v100: 5 us in
    # sim/data/gpus.yaml) cannot be; 64 samples per GPU x 4 replicas at 1e30 samples/s would be 2.56e-28 s
    "explain-iteration-1e30": ({}, ["explain", *SIM[1:], "--measured-iteration-s", "1e30"],
                               "--measured-iteration-s: got 1e+30; allowed: a finite positive number at most 86400"),
    "explain-iteration-1ns": ({}, ["explain", *SIM[1:], "--measured-iteration-s", "1e-9"],
                              "--measured-iteration-s: got 1e-09; allowed: an iteration of at least one kernel launch "
                              "on v100 (5 us"),
    "explain-throughput-1e30": ({}, ["explain", *SIM[1:], "--measured-samples-per-s", "1e30"],
                                "--measured-samples-per-s: got 1e+30; allowed: an iteration of at least one kernel "
                                "launch on v100 (5 us, its catalog's launch_overhead_us): this one would take 2.56e-28 s"),
    # files
    "empty-catalog-list": ({"k.yaml": ""}, ["list", "links", "--catalog", "k.yaml"],
                           "catalog: got 'k.yaml'; allowed: a catalog file with at least one entry under gpus: or "
                           "links: (it is empty"),
    "empty-catalog-collective": ({"k.yaml": ""}, ["collective", "--catalog", "k.yaml"], "catalog: got 'k.yaml'"),
    "empty-catalog-simulate": ({"k.yaml": ""}, ["simulate", "--catalog", "k.yaml"], "catalog: got 'k.yaml'"),
    "catalog-that-adds-nothing": ({"k.yaml": "links: {}\n"}, ["simulate", "--catalog", "k.yaml"], "(it adds nothing"),
    "regress-baselines-missing": ({}, ["regress", "--baselines", "nope"],
                                  "--baselines: got 'nope'; allowed: a directory of baselines (convnet_allreduce.csv"),
    "regress-baselines-a-file": ({"b.csv": "x"}, ["regress", "--baselines", "b.csv"], "not a file"),
    "regress-baselines-empty": ({"d/x.txt": "x"}, ["regress", "--baselines", "d"], "it has none of them"),
    "points-path-is-a-file": ({"mini.yaml": MINI_EXPERIMENT, "results/mini/points": "x"}, ["run", "mini.yaml", "--no-progress"],
                              "--results: got 'results/mini/points'; allowed: a directory where `scalebench run` keeps "
                              "its points"),
    "nccl-tests-2.7-ranks": ({"t.csv": "op,size,time,nranks\nallreduce,1024,10,2.7\nallreduce,2048,12,2.7\n"},
                             ["calibrate", "--from-nccl-tests", "t.csv", "--out", "o"],
                             "t.csv:2: nranks: got '2.7'; allowed: an integer of at least 2"),  # H4's reader now
    "timeline-without-events": ({"t.json": '{"traceEvents": []}'}, ["plot", "--timeline", "t.json"],
                                "--timeline: got 't.json'; allowed: a timeline with at least one span"),
    "timeline-nan-timestamp": ({"t.json": '{"traceEvents": [{"name": "x", "ph": "X", "ts": NaN, "dur": 1, "pid": 1, '
                                          '"tid": 1}]}'}, ["plot", "--timeline", "t.json"],
                               "--timeline t.json span 0 ('x') ts: got nan; allowed: a finite number of microseconds"),
    "timeline-negative-duration": ({"t.json": '{"traceEvents": [{"name": "x", "ph": "X", "ts": 0, "dur": -5, "pid": 1, '
                                              '"tid": 1}]}'}, ["plot", "--timeline", "t.json"], "dur: got -5"),
    "timeline-text-timestamp": ({"t.json": '{"traceEvents": [{"name": "x", "ph": "X", "ts": "a", "dur": 1, "pid": 1, '
                                           '"tid": 1}]}'}, ["plot", "--timeline", "t.json"], "ts: got 'a'"),
}
REAL_CASES = {
    "real-topology-without-link": ["--topology", "per_link"],
    "real-threads-0": ["--threads", "0"],
    "real-comm-with-bench": ["--comm", "--bench"],
    "real-collectives-without-comm": ["--collectives", "allreduce"],
    "real-max-bytes-without-comm": ["--max-bytes", "1M"],
    "real-model-with-comm": ["--comm", "--model", "mlp"],
    "real-iterations-with-bench": ["--bench", "--iterations", "3"],
    "real-link-0mbit": ["--link", "0mbit"],
    "real-link-empty": ["--link", ""],
    "real-timeout-1e30": ["--timeout", "1e30", "--model", "mlp", "--gpus", "1"],
}
REAL_FIELDS = {"real-topology-without-link": "--topology: got 'per_link'; allowed: only with --link",
               "real-threads-0": "--threads: got 0", "real-comm-with-bench": "--comm: got True; allowed: one of --comm",
               "real-collectives-without-comm": "--collectives: got ['allreduce']; allowed: only with --comm",
               "real-max-bytes-without-comm": "--max-bytes: got 1048576; allowed: only with --comm",
               "real-model-with-comm": "--model: got 'mlp'; allowed: nothing with --comm",
               "real-iterations-with-bench": "--iterations: got 3; allowed: nothing with --bench",
               "real-link-0mbit": "--link: got '0mbit'; allowed: a rate from 1mbit to 1000gbit",
               "real-link-empty": "--link: got ''", "real-timeout-1e30": "timeout_s: got 1e+30"}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_issue_29_bad_input_is_one_line(case, tmp_path, monkeypatch, capsys):
    files, argv, expected = CASES[case]
    check_one_line_error(tmp_path, monkeypatch, capsys, files, argv, expected)


@pytest.mark.parametrize("case", REAL_CASES, ids=list(REAL_CASES))
def test_real_flags_that_do_not_apply(case, tmp_path, monkeypatch, capsys):
    _real(tmp_path, tmp_path)
    start = time.monotonic()
    check_one_line_error(tmp_path, monkeypatch, capsys, {}, ["real", *REAL_CASES[case], "--out", "r.csv"],
                         REAL_FIELDS[case])
    assert time.monotonic() - start < 30  # refused before anything is launched


def test_a_config_key_that_does_nothing_gets_a_note(tmp_path, monkeypatch, capsys):
    """In a config file (a sweep's base may set a schedule for its pp > 1 points), a key that does
    nothing for this one run is said on stderr; the run goes on."""
    monkeypatch.chdir(tmp_path)
    Path("c.yaml").write_text("workload: mlp\nstrategy: {schedule: gpipe, ps_servers: 3}\n"
                              "simulation: {flow_engine: event}\nvariability: {stragglers: false, gpu_cv: 0.02}\n")
    assert main(["simulate", "c.yaml"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "scalebench simulate: note: strategy.schedule 'gpipe' does nothing here: only with pipeline stages "
        "(strategy.pp > 1): one stage has no schedule",
        "scalebench simulate: note: strategy.ps_servers 3 does nothing here: only with strategy.collective ps (here "
        "auto: no parameter servers)",
        "scalebench simulate: note: simulation.flow_engine 'event' does nothing here: only with simulation.fidelity "
        "detailed (the fast path runs no flows)",
        "scalebench simulate: note: variability.gpu_cv 0.02 does nothing here: only with stragglers on "
        "(variability.stragglers false, --no-stragglers: every rank at its nominal speed, no spread)"]


def test_a_sweep_may_set_a_schedule_for_its_pipeline_points(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("e.yaml").write_text("name: e\nworkload: mlp\ncluster: {gpus: 4, gpus_per_node: 4}\n"
                              "strategy: {schedule: gpipe, micro_batches: 4}\n"
                              "sweep: {strategy.pp: [1, 2], strategy.kind: [hybrid]}\n")
    assert main(["run", "e.yaml", "--dry-run"]) == 0
    assert "e: 2 points (0 already done, 2 to run, 0 invalid combinations skipped)" in capsys.readouterr().out


def test_micro_batches_without_stages_say_what_they_are(tmp_path, monkeypatch, capsys):
    """Issue 29: --micro-batches 4 without --pp moved 98.3 -> 83.2 % while the header said
    data_parallel, 0 buckets, bubble -0.0 us. Gradient accumulation is legitimate: the header says it."""
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--micro-batches", "4"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].count("data_parallel with 4 micro-batches (gradients accumulated, reduced once after "
                                     "the last micro-batch's backward, not overlapped with it)") == 1
    assert "in 0 buckets" not in out and "bubble" not in out
    assert "communication (busy)" in out and "after the last micro-batch" in out


def test_the_fast_path_says_what_it_takes_from_a_fabric(tmp_path, monkeypatch, capsys):
    """Issue 29 thought --fabric ignored on the fast path; it takes the ring's busiest tier and its
    switch hops from it (sim.costs.tiers.ring_view), and now says so."""
    assert main(["simulate", "--model", "mlp", "--gpus", "64", "--gpus-per-node", "8", "--fabric", "fat_tree"]) == 0
    out = capsys.readouterr().out
    assert "fabric 2-tier fat tree" in out and "the fast path sees it as the ring's busiest tier" in out


def test_a_measured_run_is_named_after_what_runs():
    """Issue 29: the timeline example's measured side was titled small_cnn-2xv100 though it ran on the CPU."""
    from real.cli import spec_from_args
    from scalebench.cli import build_parser

    def name(*argv):
        return spec_from_args(build_parser().parse_args(["real", *argv]))["name"]

    assert name("--gpus", "2", "--model", "small_cnn") == "small_cnn-2xcpu-loopback"
    assert name("--gpus", "4", "--model", "mlp", "--link", "1gbit") == "mlp-4xcpu-1gbit"


def test_the_timeline_example_simulates_gloo_on_the_calibrated_cpu(tmp_path, monkeypatch, capsys):
    """Issue 29: the README's simulated side ran 'nccl auto' on cpu_local (the calibration's catalog
    gave it no kind: cpu). The committed catalog says cpu, and calibrate writes it."""
    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--model", "small_cnn", "--gpus", "2", "--gpus-per-node", "2", "--gpu", "cpu_local",
                 "--intra-link", "gloo_loopback", "--catalog", str(root / "results/calibration/catalog.yaml"),
                 "--trace", "sim.json"]) == 0
    assert ", gloo auto, " in capsys.readouterr().out.splitlines()[0]
    from sim.catalog import load_catalog_file

    assert load_catalog_file(root / "results/calibration/catalog.yaml").gpu("cpu_local").kind == "cpu"


def test_a_huge_plan_says_how_long_it_will_take(monkeypatch, capsys):
    """Issue 29: plan --max-gpus 1048576 simulated 150,000 candidates for 50-61 s without a word.
    A search past SAY_ABOVE_CANDIDATES says up front how many and how long (and draws a bar on a terminal)."""
    import scalebench.commands.plan_text as plan_text
    import sim.planner

    def search(request, progress):  # stands in for plan_search: reports as it does, at the start and on the way
        progress(0, 90_000)
        progress(45_000, 90_000)
        progress(90_000, 90_000)
        return "searched"

    monkeypatch.setattr(plan_text, "SAY_ABOVE_CANDIDATES", 10)
    monkeypatch.setattr(sim.planner, "plan_search", search)
    assert plan_text._search(None) == "searched"
    assert capsys.readouterr().err.strip() == ("scalebench plan: 90,000 candidates to consider, at most about 20 s on "
                                               "one core (the lower bound skips most; --max-candidates bounds the "
                                               "search; Ctrl-C stops it)")


def test_plan_search_reports_progress():
    from sim.planner import plan_request_from_dict, plan_search

    seen: list[tuple[int, int]] = []
    request = plan_request_from_dict({"workload": {"model": "mlp"}, "cluster": {"gpus": 8, "gpus_per_node": 8},
                                      "plan": {"backends": ["nccl"], "codecs": ["none"]}})
    result = plan_search(request, progress=lambda done, total: seen.append((done, total)))
    total = len(result.candidates)
    assert seen[0] == (0, total) and seen[-1] == (total, total)
    assert all(b[0] - a[0] <= 1000 for a, b in zip(seen, seen[1:], strict=False))


def test_layers_refuses_a_cpu_input_beyond_the_memory_available(tmp_path, monkeypatch, capsys):
    """Issue 29: a 206 GB --input-shape on --device cpu was allocated. The meta device makes nothing."""
    _real(tmp_path, tmp_path)
    import real.launch

    monkeypatch.setattr(real.launch, "memory_available_bytes", lambda: 2**30)
    files = {"m.py": "from torch import nn\n\ndef Net():\n    return nn.Sequential(nn.Flatten(), nn.Linear(128, 8))\n"}
    line = check_one_line_error(tmp_path, monkeypatch, capsys, files,
                                ["layers", "m.py:Net", "--input-shape", "8,1000000000", "--device", "cpu"],
                                "--input-shape: got '8,1000000000'; allowed: an input that fits")
    # the first input made is one sample (real.derive checks linearity from batch 1): 1 x 1e9 x 4 B, by hand
    assert "(the table is counted at batch 1: 3.7 GiB asked, 1.0 GiB available" in line


def test_a_results_csv_of_nan_is_refused(tmp_path, monkeypatch, capsys, mini_results):
    import csv

    _results(tmp_path, mini_results)
    path = tmp_path / "results" / "mini" / "results.csv"
    rows = list(csv.DictReader(path.open()))
    for row in rows:
        row["iteration_time_s"] = "nan"
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    for command in ("plot", "report"):
        check_one_line_error(tmp_path, monkeypatch, capsys, {}, [command, "results/mini"],
                             "results.csv column iteration_time_s row 1: got nan; allowed: a finite number")


def test_every_json_note_keeps_stdout_machine_readable(tmp_path, monkeypatch, capsys):
    """A note goes to stderr: --format json stays one JSON document."""
    monkeypatch.chdir(tmp_path)
    Path("c.yaml").write_text("workload: mlp\nstrategy: {schedule: gpipe}\n")
    assert main(["simulate", "c.yaml", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)[0]["model"] == "mlp" and "note:" in captured.err


@pytest.mark.parametrize("argv, flag", [
    (["schema", "-o", ""], "--out: got ''"),  # printed to stdout
    (["simulate", "--model", "mlp", "--trace", " "], "--trace: got ' '"),  # wrote no trace
    (["run", "mini.yaml", "--results", "", "--dry-run"], "--results: got ''"),  # wrote into the current directory
    (["run", ""], "CONFIG: got ''"),
])
def test_an_empty_string_is_not_a_flag_left_out(argv, flag, tmp_path, monkeypatch, capsys):
    """Found by scripts/bad_input_driver.py: an empty value was taken as the flag not given."""
    check_one_line_error(tmp_path, monkeypatch, capsys, {"mini.yaml": MINI_EXPERIMENT}, argv,
                         f"{flag}; allowed: a non-empty value")


@pytest.mark.parametrize("argv, expected", [
    (["bench", "--repeats", "1000000000"], "--repeats: got 1000000000; allowed: a positive integer at most 100"),
    (["bench", "--plan-repeats", "1000000000"], "--plan-repeats: got 1000000000; allowed: a non-negative integer at most 100"),
    (["plan", "--model", "mlp", "--gpus", "4", "--verify", "1000000000"], "--verify: got 1000000000; allowed: a "
                                                                           "non-negative integer at most 1,000"),
])
def test_counts_that_would_run_for_ever_are_bounded(argv, expected, tmp_path, monkeypatch, capsys):
    """Found by scripts/bad_input_driver.py's huge integers: each ran past its time limit."""
    check_one_line_error(tmp_path, monkeypatch, capsys, {}, argv, expected)


@pytest.mark.parametrize("flag", ["--iterations", "--warmup"])
def test_real_counts_that_would_run_for_ever_are_bounded(flag, tmp_path, monkeypatch, capsys):
    _real(tmp_path, tmp_path)
    check_one_line_error(tmp_path, monkeypatch, capsys, {}, ["real", "--model", "mlp", "--gpus", "1", flag,
                                                             "1000000000", "--out", "r.csv"],
                         f"{flag.lstrip('-')}: got 1000000000; allowed: a")


def test_plan_max_vpp_huge_is_no_limit_and_quick():
    """Found by scripts/bad_input_driver.py: --max-vpp 10^9 looped 10^9 times per layout (a hang past
    60 s). A huge limit is no limit: GPT-2 small's 12 blocks on pp 2 interleave only where 2 x vpp
    divides 12 (by hand: vpp 1, 2, 3, 6), with 1F1B and micro-batches a multiple of 2."""
    from sim.planner import plan_request_from_dict
    from sim.planner.space import vpp_degrees

    spec = {"workload": {"model": "gpt2_small"}, "cluster": {"gpus": 8, "gpus_per_node": 8}}
    huge = plan_request_from_dict({**spec, "plan": {"max_vpp": 10**9}})
    start = time.perf_counter()
    assert vpp_degrees(huge, 2, 4, "1f1b", units=14) == [1, 2, 3, 6]
    assert time.perf_counter() - start < 0.1
    assert vpp_degrees(huge, 2, 3, "1f1b", units=14) == [1]  # micro-batches not a multiple of pp
    assert vpp_degrees(plan_request_from_dict({**spec, "plan": {"max_vpp": 2}}), 2, 4, "1f1b", units=14) == [1, 2]
