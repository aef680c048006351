"""The plan against brute force: the same space swept point by point through ``scalebench run``'s
runner (experiments/runner.py: every point validated and simulated on its own), on small cases.
The sweep's best point is the plan's winner, and every swept point is one of the plan's candidates
with the same iteration time (to 1e-12: with one stage the sweep also runs gpipe, which orders
the same micro-batches differently and rounds the last bit differently; the plan runs 1f1b, the
default, and a result row does not say which). The sweep runs the plain layouts (no ZeRO,
interleaving or recomputation), so it is compared with the plan's plain candidates, searched
without the lower-bound pruning (every candidate simulated); the plan's winner is at least as good."""

from __future__ import annotations

import pytest

from experiments.config import experiment_from_dict
from experiments.runner import run_experiment
from experiments.store import ResultDir
from sim.planner import plan_request_from_dict, plan_search

CLUSTER = {"gpus_per_node": 2, "gpu": "v100", "intra_link": "nvlink2", "inter_link": "ib_edr"}
STRATEGY = {"kind": "hybrid", "precision": "fp32", "backend": "nccl", "bucket_mib": 25}
OPTIONS = {"backends": ["nccl"], "collectives": ["auto", "ring"], "codecs": ["none", "fp16"], "bucket_mib": [25],
           "max_micro_batches": 4}
SYNC_AXES = {"strategy.micro_batches": [1, 2, 4], "strategy.schedule": ["gpipe", "1f1b"],
             "strategy.collective": ["auto", "ring"], "strategy.codec": [None, "fp16"]}


def sweep_rows(tmp_path, name, sweep, workload):
    experiment = experiment_from_dict({"name": name, "workload": workload, "cluster": CLUSTER, "strategy": STRATEGY,
                                       "sweep": sweep})
    run_experiment(experiment, tmp_path / name, jobs=1, progress=False, log=lambda _: None)
    return ResultDir(tmp_path / name).read_csv()


def key(gpus, tp, pp, m, schedule, collective, codec, dp):
    """What tells two candidates apart: with one replica there is no gradient to synchronise;
    with one micro-batch both schedules are the same."""
    sync = ("auto", None) if dp == 1 else (collective, codec)
    return (gpus, tp, pp, m, schedule if pp > 1 and m > 1 else "-", *sync)


def plain(c) -> bool:
    return c.layout.vpp == 1 and c.layout.zero_stage == 0 and c.layout.recompute == "none"


def check(rows, result):
    rows = rows.assign(per_sample=rows["iteration_time_s"] / (rows["data_parallel"] * rows["batch_size"]))
    planned = {}
    for c in (c for c in result.ranked if plain(c)):
        la, sy = c.layout, c.sync
        planned[key(la.gpus, la.tp, la.pp, la.micro_batches, la.schedule, sy.collective, sy.codec, la.dp)] = c
    swept = set()
    for _, r in rows.iterrows():
        codec = r["codec"] if r["codec"] != r["precision"] else None
        k = key(int(r["world_size"]), int(r["tp"]), int(r["pp"]), int(r["micro_batches"]), r["schedule"],
                r["collective"], codec, int(r["dp"]))
        swept.add(k)
        assert planned[k].outcome.iteration_time_s == pytest.approx(r["iteration_time_s"], rel=1e-12), k
    assert swept == set(planned)  # the same space, point for point
    best = rows["per_sample"].min()
    assert result.winner.time_per_sample_s <= best * (1 + 1e-12)
    w = next(c for c in result.ranked if plain(c))
    assert w.time_per_sample_s == pytest.approx(best, rel=1e-12)
    winners = {key(int(r["world_size"]), int(r["tp"]), int(r["pp"]), int(r["micro_batches"]), r["schedule"],
                   r["collective"], r["codec"] if r["codec"] != r["precision"] else None, int(r["dp"]))
               for _, r in rows[rows["per_sample"] <= best * (1 + 1e-12)].iterrows()}
    assert key(w.layout.gpus, w.layout.tp, w.layout.pp, w.layout.micro_batches, w.layout.schedule, w.sync.collective,
               w.sync.codec, w.layout.dp) in winners


def test_weak_scaling_winner_is_the_sweeps(tmp_path):
    workload = {"model": "small_transformer", "batch_size": 8}
    rows = sweep_rows(tmp_path, "bf_weak", {"cluster.gpus": [1, 2, 4, 8], "strategy.tp": [1, 2],
                                            "strategy.pp": [1, 2, 4], **SYNC_AXES}, workload)
    result = plan_search(plan_request_from_dict({"workload": workload, "cluster": {**CLUSTER, "gpus": 4},
                                                 "strategy": {"precision": "fp32"},
                                                 "plan": {**OPTIONS, "max_gpus": 8}}), prune=False)
    check(rows, result)


def test_global_batch_winner_is_the_sweeps(tmp_path):
    workload = {"model": "small_transformer"}
    cases = []
    for gpus in (1, 2, 4, 8):
        for tp in (1, 2):
            for pp in (1, 2, 4):
                if gpus % (tp * pp) == 0 and 16 % (gpus // (tp * pp)) == 0:
                    cases.append({"label": f"{gpus}/{tp}/{pp}", "cluster.gpus": gpus, "strategy.tp": tp,
                                  "strategy.pp": pp, "workload.batch_size": 16 // (gpus // (tp * pp))})
    rows = sweep_rows(tmp_path, "bf_global", {"case": cases, **SYNC_AXES}, workload)
    result = plan_search(plan_request_from_dict({"workload": workload, "cluster": {**CLUSTER, "gpus": 8},
                                                 "strategy": {"precision": "fp32"},
                                                 "plan": {**OPTIONS, "max_gpus": 8, "global_batch": 16}}), prune=False)
    assert set(rows["data_parallel"] * rows["batch_size"]) == {16}
    check(rows, result)


def test_pruning_keeps_the_head_of_the_ranking():
    """The lower-bound pruning simulates fewer candidates and ranks the same head: the top
    BOUND_KEEP x top candidates, their figures, and each GPU count's best (the Pareto fronts)."""
    from sim.planner.search import BOUND_KEEP

    spec = {"workload": {"model": "gpt2_medium"}, "cluster": {"gpus": 16, "gpus_per_node": 8, "gpu": "a100",
                                                              "intra_link": "nvlink3", "inter_link": "ib_hdr"},
            "plan": {"global_batch": 64, "max_gpus": 16, "backends": ["nccl"], "bucket_mib": [25], "top": 3}}
    full = plan_search(plan_request_from_dict(spec), prune=False)
    pruned = plan_search(plan_request_from_dict(spec))
    assert pruned.simulated < full.simulated and pruned.enumerated == full.enumerated
    assert pruned.removed.get("bound", 0) > 0
    head = BOUND_KEEP * 3
    assert [(c.label(), c.outcome) for c in pruned.ranked[:head]] == [(c.label(), c.outcome) for c in full.ranked[:head]]
    best_at = {}
    for result in (full, pruned):
        best_at[id(result)] = {g: min(c.time_per_sample_s for c in result.ranked if c.layout.gpus == g)
                               for g in {c.layout.gpus for c in full.ranked}}
    assert best_at[id(full)] == best_at[id(pruned)]
