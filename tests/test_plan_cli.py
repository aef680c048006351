"""``scalebench plan`` end to end (what it prints, the files it writes, the winner reproduced by
``scalebench simulate``, --verify), its one-line errors, and experiments with a ``plan:`` section."""

from __future__ import annotations

import csv
import re

import pytest

from experiments.config import experiment_from_dict
from experiments.runner import run_experiment
from experiments.store import ResultDir
from scalebench.cli import main
from sim.config import load_scenario
from sim.errors import ConfigError
from sim.planner import plan_request_from_dict, plan_search
from sim.simulate import simulate

BERT = ["--model", "bert_large", "--batch-size", "8", "--gpus", "8", "--gpus-per-node", "4", "--gpu", "v100",
        "--intra-link", "nvlink2", "--inter-link", "tcp_25gbe"]


def test_plan_prints_writes_and_reproduces(tmp_path, capsys):
    code = main(["plan", *BERT, "--max-gpus", "16", "--backends", "nccl", "--bucket-mib", "25", "--top", "3",
                 "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    enumerated = int(re.search(r"searched ([\d,]+) candidates", out).group(1).replace(",", ""))
    assert "\nwhy: " in out and "the best of each structure" in out and "\nclosest: " in out
    assert "searched: nccl only (other libraries: --backends); gradients on the wire in" in out
    assert "checked: simulate() of the top 3 gives the planner's figures" in out
    with open(tmp_path / "candidates.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert sum(int(r["candidates"]) for r in rows) == enumerated
    first = next(r for r in rows if r["rank"] == "1")
    winner = load_scenario(tmp_path / "winner.yaml")  # what 'scalebench simulate winner.yaml' runs
    # the file is the ranked row's configuration, field by field (the CSV and the YAML are written apart)
    s = winner.strategy
    assert (s.dp_degree(winner.cluster.world_size), s.pp, s.tp) == (int(first["dp"]), int(first["pp"]), int(first["tp"]))
    assert (s.cp, s.ep, s.vpp, s.zero_stage, s.recompute, str(s.sequence_parallel)) == (
        int(first["cp"]), int(first["ep"]), int(first["vpp"]), int(first["zero_stage"]), first["recompute"],
        first["sequence_parallel"])
    assert (s.backend, s.collective, winner.cluster.world_size) == (first["backend"], first["collective"],
                                                                    int(first["gpus"]))
    # and simulating it gives the ranked row's time (the planner's figures are simulate()'s)
    assert simulate(winner).iteration_time_s == float(first["iteration_time_s"])
    assert {r["status"] for r in rows} <= {"simulated", "removed"}
    assert (tmp_path / "pareto.png").stat().st_size > 0 and (tmp_path / "pareto.svg").stat().st_size > 0
    assert not list(tmp_path.glob(".*.tmp"))  # nothing half-written left behind


def test_plan_verify_counts_what_detailed_refuses(tmp_path, capsys):
    code = main(["plan", "--model", "small_transformer", "--gpus", "8", "--gpus-per-node", "2", "--gpu", "v100",
                 "--global-batch", "32", "--backends", "nccl", "--collectives", "tree,ring", "--codecs", "none",
                 "--bucket-mib", "25", "--max-tp", "1", "--max-pp", "1", "--zero-stages", "0", "--verify", "4",
                 "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    assert "not verifiable: simulation.fidelity: got 'detailed'; allowed: fast for collective=tree" in out
    # data parallel only: the ring candidates are verified, the tree ones refused and counted
    assert re.search(r"verify: .*(ranking holds|ranking changes).*; [1-9]\d* not verifiable", out)


@pytest.mark.parametrize("args, flag", [
    (["--objective", "fast"], "--objective"), (["--max-gpus", "4"], "--max-gpus"), (["--top", "0"], "--top"),
    (["--verify", "-1"], "--verify"), (["--global-batch", "0"], "--global-batch"),
    (["--backends", "nccl,foo"], "--backends"), (["--codecs", "fp7"], "--codecs"), (["--bucket-mib", "x"], "--bucket-mib"),
    (["--gpu", "v101"], "--gpu"), (["--max-memory-gib", "1000"], "--max-memory-gib"), (["--max-tp", "0"], "--max-tp"),
    (["--model", "gpt5"], "--model"), (["--precision", "fp64"], "--precision"), (["--top", "x"], "--top"),
])
def test_plan_bad_flags_are_one_line_naming_the_flag(args, flag, capsys):
    try:
        code = main(["plan", *BERT, *args])
    except SystemExit as exit_:  # argparse's own type errors
        code = exit_.code
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and flag in err, err


def test_plan_nothing_fits_is_exit_2_naming_the_constraint(tmp_path, capsys):
    code = main(["plan", "--model", "gpt2_xl", "--gpus", "1", "--gpu", "k80", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "memory per rank: every layout of gpt2_xl on 1 GPU needs more than 12 GiB per GPU; the smallest needs" in err
    assert not list(tmp_path.iterdir())


def test_plan_reads_a_cluster_yaml(tmp_path, capsys):
    path = tmp_path / "cluster.yaml"
    path.write_text("gpus: 8\ngpus_per_node: 4\ngpu: v100\nintra_link: nvlink2\ninter_link: ib_edr\n")
    code = main(["plan", str(path), "--model", "resnet50", "--backends", "nccl", "--codecs", "none",
                 "--bucket-mib", "25", "--out", str(tmp_path / "out")])
    assert code == 0
    assert "on v100, 4 per node, intra nvlink2, inter ib_edr" in capsys.readouterr().out


PLAN_SWEEP = {
    "name": "plan_sweep",
    "workload": {"model": "bert_large", "batch_size": 8},
    "cluster": {"gpus": 16, "gpus_per_node": 4, "gpu": "v100", "intra_link": "nvlink2"},
    "plan": {"backends": ["nccl"], "codecs": ["none"], "bucket_mib": [25]},
    "sweep": {"cluster.inter_link": ["tcp_10gbe", "ib_edr"]},
}


def test_experiment_plan_section_rows_are_the_winners(tmp_path):
    experiment = experiment_from_dict(PLAN_SWEEP)
    run_experiment(experiment, tmp_path, jobs=1, progress=False, log=lambda _: None)
    rows = ResultDir(tmp_path).read_csv()
    assert len(rows) == 2
    for _, r in rows.iterrows():
        spec = {k: v for k, v in PLAN_SWEEP.items() if k in ("workload", "plan")}
        spec["cluster"] = {**PLAN_SWEEP["cluster"], "inter_link": r["cluster.inter_link"]}
        winner = plan_search(plan_request_from_dict(spec)).winner
        assert (r["dp"], r["pp"], r["tp"], r["micro_batches"], r["collective"]) == (
            winner.layout.dp, winner.layout.pp, winner.layout.tp, winner.layout.micro_batches, winner.sync.collective)
        assert r["iteration_time_s"] == winner.outcome.iteration_time_s
        assert r["plan_simulated"] > 0 and "The winner beats" in r["plan_why"]


def test_experiment_plan_point_where_nothing_fits(tmp_path):
    config = {**PLAN_SWEEP, "name": "plan_nofit", "workload": {"model": "gpt2_xl", "batch_size": 1},
              "cluster": {"gpus": 1, "gpus_per_node": 1}, "sweep": {"cluster.gpu": ["k80", "a100"]}}
    run_experiment(experiment_from_dict(config), tmp_path, jobs=1, progress=False, log=lambda _: None)
    rows = ResultDir(tmp_path).read_csv().set_index("cluster.gpu")
    assert rows.loc["k80", "plan_error"].startswith("memory per rank: every layout of gpt2_xl")
    assert rows.loc["a100", "iteration_time_s"] > 0


@pytest.mark.parametrize("change, field", [
    ({"plan": {"objective": "fast"}}, "plan.objective"), ({"plan": {"foo": 1}}, "plan.foo"),
    ({"iterations": 10}, "iterations"), ({"backend": "real"}, "backend"), ({"plan": [1]}, "plan"),
])
def test_experiment_plan_section_is_checked_on_load(change, field):
    with pytest.raises(ConfigError) as err:
        from experiments.config import expand

        expand(experiment_from_dict({**PLAN_SWEEP, **change}))
    assert err.value.field == field


def test_plan_refuses_an_unwritable_out_before_searching(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code = main(["plan", *BERT, "--out", str(blocker / "sub")])
    captured = capsys.readouterr()
    assert code == 2 and captured.err.startswith("scalebench plan: error: --out:")
    assert "searched" not in captured.out


def test_the_experiment_schema_describes_plan():
    jsonschema = pytest.importorskip("jsonschema")
    from experiments.schema import experiment_schema

    validator = jsonschema.Draft202012Validator(experiment_schema())
    good = {**PLAN_SWEEP, "plan": {"objective": "gpu_hours", "codecs": ["none", "fp8_e4m3:reduce_scatter"],
                                   "bucket_mib": 25, "max_gpus": 32}}
    assert list(validator.iter_errors(good)) == []
    experiment_from_dict(good)  # and the parser agrees
    for bad in ({"foo": 1}, {"objective": "fast"}, {"codecs": ["fp7"]}, {"bucket_mib": [0]}):
        assert list(validator.iter_errors({**PLAN_SWEEP, "plan": bad}))
        with pytest.raises(ConfigError):
            from experiments.config import expand

            expand(experiment_from_dict({**PLAN_SWEEP, "plan": bad}))


def test_a_workload_of_ones_own_is_reproduced_by_the_winner_yaml(tmp_path, capsys):
    """A sequence length other than the zoo's makes another table: winner.yaml carries it inline."""
    code = main(["plan", "--model", "gpt2_small", "--seq-len", "256", "--gpus", "4", "--gpus-per-node", "4",
                 "--gpu", "v100", "--backends", "nccl", "--codecs", "none", "--bucket-mib", "25", "--top", "1",
                 "--out", str(tmp_path)])
    assert code == 0
    capsys.readouterr()
    with open(tmp_path / "candidates.csv", newline="") as fh:
        first = next(r for r in csv.DictReader(fh) if r["rank"] == "1")
    scenario = load_scenario(tmp_path / "winner.yaml")
    assert len(scenario.workload.layers) > 1
    assert simulate(scenario).iteration_time_s == float(first["iteration_time_s"])
    zoo = plan_request_from_dict({"workload": {"model": "gpt2_small"}, "cluster": {"gpus": 4}})
    assert "layers" not in zoo.workload_spec


def test_verify_takes_equal_detailed_times_as_a_tie_not_a_new_order():
    """Llama-2-7B on 1,024 A100s (dp 512 x pp 2, 2 micro-batches): 1F1B and GPipe run the same
    schedule, 3.104 s in detailed mode either way, one float path 1e-15 shorter; that is a tie, kept
    in rank order (the plan printed 'the ranking changes: #2, #1'). A real swap still reads as one."""
    from types import SimpleNamespace

    from sim.planner.verify import Verified, _judge

    def row(rank: int, fast_s: float, detailed_s: float) -> Verified:
        outcome = SimpleNamespace(iteration_time_s=fast_s)
        candidate = SimpleNamespace(outcome=outcome, objective_value=lambda objective, t=fast_s: t / 1024)
        return Verified(candidate, rank, fast_s, detailed_s)  # type: ignore[arg-type]

    result = SimpleNamespace(request=SimpleNamespace(objective="time"))
    tie = _judge(result, [row(1, 3.302, 3.104), row(2, 3.302, 3.104 * (1 - 1e-15))])  # type: ignore[arg-type]
    assert tie.holds and "ranking holds" in tie.summary
    swap = _judge(result, [row(1, 3.302, 3.104), row(2, 3.303, 3.0)])  # type: ignore[arg-type]
    assert not swap.holds and "#2, #1" in swap.summary
