"""scalebench plan's search (sim/planner): the flush replay and every candidate against the
engine and simulate(), the space's rules and their counts, the objectives, the Pareto fronts,
the sentence on why the winner wins, and the error when nothing is left."""

from __future__ import annotations

import random

import pytest

from sim.config import scenario_from_dict
from sim.engine.pipeline import run_pipeline
from sim.engine.pipeline_plan import PipelinePlan, StagePlan
from sim.errors import ConfigError
from sim.memory import memory_per_rank
from sim.planner import NoPlan, plan_request_from_dict, plan_search
from sim.planner.explain import pareto, parts_s, runner_up, why
from sim.planner.flush import flush_ends
from sim.planner.request import sensible_gpu_counts
from sim.planner.search import BOUND_KEEP
from sim.planner.space import REASONS
from sim.planner.verify import FIELDS
from sim.simulate import simulate
from sim.units import human_seconds

A100 = {"gpus_per_node": 8, "gpu": "a100", "intra_link": "nvlink3", "inter_link": "ib_hdr"}


def request(workload, cluster, plan=None, strategy=None):
    spec = {"workload": workload, "cluster": cluster, "plan": plan or {}}
    if strategy:
        spec["strategy"] = strategy
    return plan_request_from_dict(spec)


def engine_flush(schedule, m, stages, sends):
    plan = PipelinePlan(
        stages=tuple(StagePlan(index=s, layers=(0, 0), fwd_s=f, bwd_s=b, tp_comm_s=0.0, send_s=se, send_link="intra",
                               send_bytes=0.0, dp_sync_s=0.0, codec_s=0.0, dp_bytes_by_link={}, optimizer_s=0.0,
                               param_count=0)
                     for s, ((f, b), se) in enumerate(zip(stages, sends, strict=True))),
        micro_batches=m, schedule=schedule, dp=1, tp=1, tp_bytes_by_link={})
    ends = {span.lane: span.start_s for span in run_pipeline(plan, 1, 1).spans if span.name == "optimizer step"}
    return tuple(ends[f"stage{s}"] for s in range(len(stages)))


def test_flush_replay_is_run_pipeline_bit_for_bit():
    """Random stage times (zeros included), sends (zeros included), 1-9 stages, 1-32 micro-batches."""
    rng = random.Random(7)
    for _ in range(300):
        p, m = rng.randint(1, 9), rng.choice([1, 2, 3, 5, 8, 13, 32])
        schedule = rng.choice(["gpipe", "1f1b"])
        stages = [(rng.choice([0.0, 1e-3, rng.random() * 1e-2]), rng.choice([0.0, 2e-3, rng.random() * 2e-2]))
                  for _ in range(p)]
        sends = [rng.choice([0.0, rng.random() * 1e-3, rng.random() * 1e-2]) for _ in range(p)]
        assert flush_ends(schedule, m, stages, sends) == engine_flush(schedule, m, stages, sends)


CASES = [
    # (workload, cluster, plan options, strategy): layouts, libraries, codecs, GPU counts, memory limits
    ({"model": "gpt2_xl", "batch_size": 4}, {"gpus": 16, "gpus_per_node": 4, "gpu": "v100", "intra_link": "nvlink2",
                                             "inter_link": "ib_edr"},
     {"bucket_mib": [25, 100], "backends": ["nccl", "gloo", "mpi"], "allow_lossy": True}, None),
    ({"model": "bert_large"}, {"gpus": 16, "gpus_per_node": 4, "gpu": "v100", "intra_link": "nvlink2",
                               "inter_link": "tcp_25gbe"},
     {"max_gpus": 32, "global_batch": 64, "backends": ["nccl", "gloo"], "bucket_mib": [25]}, None),
    ({"model": "resnet50"}, {"gpus": 16, **A100}, {"max_gpus": 16, "bucket_mib": [5, 100], "collectives": ["auto", "ring"],
                                                   "allow_lossy": True},
     {"precision": "fp32"}),
    ({"model": "small_transformer"}, {"gpus": 4, "gpus_per_node": 2, "gpu": "cpu", "inter_link": "tcp_1gbe"},
     {"max_gpus": 8, "allow_lossy": True}, None),
    # NCCL's socket settings (NCCL candidates only; gloo's keep one stream each) over 100 GbE TCP
    ({"model": "resnet50"}, {"gpus": 16, **A100, "inter_link": "tcp_100gbe"},
     {"max_gpus": 16, "backends": ["nccl", "gloo"], "bucket_mib": [25], "codecs": ["none"]}, {"nccl_socket_nthreads": 4}),
    # a mixture of experts with every large-model dimension: cp, ep, SP, vpp, ZeRO, recomputation
    ({"model": "mixtral_8x7b", "architecture": {"layers": 4}, "seq_len": 2048},
     {"gpus": 16, **A100, "nics_per_node": 2},
     {"global_batch": 16, "max_cp": 2, "backends": ["nccl", "mpi"], "bucket_mib": [25], "codecs": ["none"],
      "max_memory_gib": 30}, None),
    # a dense decoder in eager attention at a long sequence (selective recomputation matters)
    ({"model": "llama2_7b", "architecture": {"layers": 8}, "seq_len": 8192},
     {"gpus": 16, **A100}, {"global_batch": 8, "max_cp": 4, "backends": ["nccl"], "bucket_mib": [25]},
     {"attention": "eager"}),
    # real images on the host: every candidate's step no shorter than its node's input pipeline
    ({"model": "resnet50", "batch_size": 256, "data": "imagenet_jpeg"}, {"gpus": 16, **A100},
     {"max_gpus": 16, "bucket_mib": [25], "codecs": ["none"]}, {"precision": "bf16"}),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_every_candidate_is_what_simulate_says(case):
    """A sample of each case's candidates through scenario_from_dict + simulate(): the simulated
    ones give the planner's figures exactly; the removed ones are refused for the same reason."""
    workload, cluster, plan, strategy = CASES[case]
    req = request(workload, cluster, plan, strategy)
    result = plan_search(req)
    rng = random.Random(case)
    simulated = rng.sample(result.ranked, min(20, len(result.ranked)))
    removed = [c for c in result.candidates if c.reason]
    for c in simulated + rng.sample(removed, min(10, len(removed))):
        if c.reason == "memory":
            with pytest.raises(ConfigError) as err:
                scenario_from_dict(c.spec(req))
            assert err.value.field.startswith("memory per rank")
            continue
        if c.reason == "library":
            with pytest.raises(ConfigError):
                simulate(scenario_from_dict(c.spec(req)))
            continue
        if c.reason == "bound":  # not simulated: it is slower than the head of the ranking the search kept exact
            try:
                sim = simulate(scenario_from_dict(c.spec(req)))
            except ConfigError:  # its library refuses it as well
                continue
            kept = result.ranked[min(len(result.ranked), BOUND_KEEP * req.top) - 1]
            assert sim.iteration_time_s / c.samples > kept.time_per_sample_s, c.label()
            continue
        sim = simulate(scenario_from_dict(c.spec(req)))
        for name in FIELDS:
            assert getattr(c.outcome, name) == getattr(sim, name), (name, c.label())
    assert result.enumerated == result.simulated + sum(result.removed.values())


def test_memory_removals_are_sim_memory():
    """Removed for memory exactly when sim.memory says the fullest rank exceeds the GPU."""
    req = request({"model": "gpt2_xl", "batch_size": 8}, {"gpus": 8, "gpus_per_node": 8, "gpu": "v100",
                                                          "intra_link": "nvlink2", "inter_link": "ib_edr"},
                  {"backends": ["nccl"], "collectives": ["auto"], "bucket_mib": [25]})
    result = plan_search(req)
    assert result.removed.get("memory", 0) > 0
    for c in [c for c in result.candidates if c.reason != "bound"][::7]:  # a bound-pruned one is not costed
        need = max(b.total_bytes for b in memory_per_rank(scenario_from_dict({**c.spec(req), "simulation":
                                                                                {"check_memory": False}})))
        assert need == pytest.approx(c.memory_bytes, rel=1e-12)
        assert (c.reason == "memory") == (need > req.cluster.gpu.memory_bytes)


def test_space_rules_and_counts():
    req = request({"model": "small_transformer"}, {"gpus": 8, "gpus_per_node": 4, "gpu": "v100"},
                  {"global_batch": 12, "max_pp": 2, "backends": ["nccl"], "collectives": ["auto"],
                   "bucket_mib": [25]})
    result = plan_search(req)
    reasons = {r.reason for r in result.rejected_layouts}
    assert {"tp", "max_pp", "global_batch"} <= reasons
    for r in result.rejected_layouts:
        assert r.reason in REASONS
        if r.reason == "tp":
            assert r.tp > 4  # one node by default
        if r.reason == "global_batch":
            assert 12 % (r.gpus // (r.tp * r.pp))
    for c in result.ranked:
        la = c.layout
        assert la.dp * la.tp * la.pp == la.gpus and la.tp <= 4 and la.pp <= 2
        assert la.global_batch == 12 and la.batch % la.micro_batches == 0
        assert la.pp > 1 or la.schedule == "1f1b"
    assert result.enumerated == result.simulated + sum(result.removed.values())


def test_weak_scaling_keeps_the_workload_batch():
    req = request({"model": "resnet50", "batch_size": 32}, {"gpus": 16, **A100},
                  {"max_gpus": 32, "backends": ["nccl"], "codecs": ["none"], "bucket_mib": [25]})
    result = plan_search(req)
    assert {c.layout.batch for c in result.ranked} == {32}
    assert not result.per_iteration()


def test_gpu_counts():
    assert sensible_gpu_counts(64, None, 8) == (64,)
    assert sensible_gpu_counts(16, 64, 8) == (1, 2, 4, 8, 16, 32, 64)
    assert sensible_gpu_counts(6, 96, 6) == (1, 2, 3, 6, 12, 24, 48, 96)
    assert sensible_gpu_counts(40, 40, 8) == (1, 2, 4, 8, 16, 32, 40)


def test_objectives_rank_as_defined():
    base = ({"model": "bert_large", "batch_size": 8}, {"gpus": 8, "gpus_per_node": 4, "gpu": "v100",
                                                       "intra_link": "nvlink2", "inter_link": "tcp_10gbe"})
    results = {o: plan_search(request(*base, {"max_gpus": 32, "objective": o, "backends": ["nccl"],
                                              "codecs": ["none"], "bucket_mib": [25]}))
               for o in ("time", "samples_per_s", "gpu_hours")}
    t, s, g = results["time"], results["samples_per_s"], results["gpu_hours"]
    assert t.winner.label() == s.winner.label()
    assert t.winner.time_per_sample_s == min(c.time_per_sample_s for c in t.ranked)
    assert g.winner.gpu_s_per_sample == min(c.gpu_s_per_sample for c in g.ranked)
    # over 10 GbE the cheapest run uses fewer GPUs than the fastest
    assert g.winner.layout.gpus < t.winner.layout.gpus


def test_pareto_fronts():
    result = plan_search(request({"model": "bert_large", "batch_size": 8}, {"gpus": 8, "gpus_per_node": 4,
                                 "gpu": "v100", "intra_link": "nvlink2", "inter_link": "tcp_25gbe"},
                                 {"max_gpus": 32, "backends": ["nccl"], "bucket_mib": [25]}))
    for axis, key in (("gpus", lambda c: c.layout.gpus), ("gpu_hours", lambda c: c.gpu_s_per_sample)):
        front = pareto(result, axis)
        assert [key(c) for c in front] == sorted(key(c) for c in front)
        assert all(a.time_per_sample_s > b.time_per_sample_s for a, b in zip(front, front[1:], strict=False))
        for c in result.ranked:  # nothing beats the front on both
            assert any(key(f) <= key(c) and f.time_per_sample_s <= c.time_per_sample_s for f in front)


def test_why_is_the_breakdown_difference():
    """The sentence names what the runner-up changes and quotes the parts' differences."""
    result = plan_search(request({"model": "gpt2_xl"}, {"gpus": 32, **A100},
                                 {"global_batch": 64, "backends": ["nccl"], "collectives": ["auto"],
                                  "codecs": ["none"], "bucket_mib": [25]}))
    second, _ = runner_up(result)
    assert second is not None
    text = why(result)

    def parts(o):  # by hand from the outcome's own fields: compute without its TP allreduces, ZeRO-3's
        # exposed gathers and recomputation, the rest
        return {"compute": o.compute_time_s - o.tp_comm_time_s - o.model_comm_time_s - o.recompute_time_s,
                "tensor-parallel allreduces": o.tp_comm_time_s,
                "context/expert/ZeRO-3 communication": o.model_comm_time_s, "recomputation": o.recompute_time_s,
                "pipeline bubble": o.bubble_time_s, "exposed communication": o.exposed_comm_time_s,
                "compute slowed by overlap": o.overlap_slowdown_time_s, "waiting for stragglers": o.straggler_wait_time_s}

    w, r = parts(result.winner.outcome), parts(second.outcome)
    gain = second.outcome.iteration_time_s - result.winner.outcome.iteration_time_s
    assert gain > 0
    assert f"by {human_seconds(gain)} per iteration" in text
    best_part = max(w, key=lambda k: r[k] - w[k])
    assert f"{best_part} {human_seconds(r[best_part] - w[best_part])} shorter" in text
    explained = parts_s(result.winner.outcome)  # the explainer's parts add up to the iteration
    assert sum(explained.values()) == pytest.approx(result.winner.outcome.iteration_time_s, rel=1e-9)
    shown = {k: v for k, v in explained.items() if k != "other"}
    assert shown == pytest.approx({k: w[k] for k in shown}, rel=1e-12)
    assert all(w[k] == 0 for k in set(w) - set(shown))  # a part is left out only where it is nothing


def test_nothing_fits_says_which_constraint():
    req = request({"model": "gpt2_xl", "batch_size": 1}, {"gpus": 1, "gpus_per_node": 1, "gpu": "k80"})
    with pytest.raises(NoPlan) as err:
        plan_search(req)
    text = str(err.value)
    # one GPU: nothing to shard; full recomputation stores the least
    smallest = min(max(b.total_bytes for b in memory_per_rank(scenario_from_dict(
        {"workload": {"model": "gpt2_xl", "batch_size": 1}, "cluster": {"gpus": 1, "gpu": "k80"},
         "strategy": {"precision": req.precision, "recompute": recompute}, "simulation": {"check_memory": False}})))
        for recompute in ("none", "selective", "full"))
    assert text.startswith("memory per rank: every layout of gpt2_xl on 1 GPU needs more than 12 GiB per GPU")
    assert f"the smallest needs {smallest / 2**30:.1f} GiB at tp 1, pp 1 (dp 1, 1 micro-batch, recompute full;" in text


def test_nothing_divides_the_global_batch():
    req = request({"model": "small_transformer"}, {"gpus": 4, "gpus_per_node": 4, "gpu": "v100"},
                  {"global_batch": 6, "max_tp": 1, "max_pp": 1})
    with pytest.raises(NoPlan) as err:
        plan_search(req)
    assert str(err.value).startswith("--global-batch: no candidate of small_transformer on 4 GPUs is left")
    assert "dp does not divide the global batch (e.g. dp 4 does not divide 6)" in str(err.value)


@pytest.mark.parametrize("plan, field", [
    ({"objective": "fast"}, "plan.objective"), ({"max_gpus": 4}, "plan.max_gpus"), ({"top": 0}, "plan.top"),
    ({"global_batch": 0}, "plan.global_batch"), ({"backends": ["nccl", "foo"]}, "plan.backends"),
    ({"codecs": ["fp7"]}, "plan.codecs"), ({"codecs": ["fp8_e4m3:allreduce"]}, "plan.codecs"),
    ({"bucket_mib": [0]}, "plan.bucket_mib"), ({"max_memory_gib": 100}, "plan.max_memory_gib"),
    ({"max_tp": 0}, "plan.max_tp"), ({"colectives": ["ring"]}, "plan.colectives"),
    ({"schedules": ["zb"]}, "plan.schedules"),
])
def test_bad_options_name_their_field(plan, field):
    with pytest.raises(ConfigError) as err:
        request({"model": "resnet50"}, {"gpus": 8, **A100}, plan)
    assert err.value.field == field


def test_searched_strategy_fields_are_refused():
    with pytest.raises(ConfigError) as err:
        request({"model": "resnet50"}, {"gpus": 8, **A100}, strategy={"tp": 2})
    assert err.value.field == "strategy.tp"


def test_contradictions_are_refused():
    with pytest.raises(ConfigError) as err:
        request({"model": "resnet50", "batch_size": 32}, {"gpus": 8, **A100}, {"global_batch": 256})
    assert err.value.field == "workload.batch_size"
    with pytest.raises(ConfigError) as err:
        plan_request_from_dict({"workload": {"model": "resnet50"}, "cluster": {"gpus": 8, **A100},
                                "simulation": {"fidelity": "detailed"}})
    assert err.value.field == "simulation"
    with pytest.raises(ConfigError) as err:  # a protocol only NCCL has, with gloo asked for
        request({"model": "resnet50"}, {"gpus": 8, **A100}, {"backends": ["gloo"]}, {"protocol": "LL"})
    assert err.value.field == "plan.backends"
    assert request({"model": "resnet50"}, {"gpus": 8, **A100}, {}, {"protocol": "LL"}).backends == ("nccl",)


def test_a_space_too_large_is_refused_before_simulating():
    with pytest.raises(ConfigError) as err:
        plan_search(request({"model": "resnet50"}, {"gpus": 8, **A100}, {"max_candidates": 10}))
    assert err.value.field == "--max-candidates"
    huge = request({"model": "gpt2_xl"}, {"gpus": 64, **A100}, {"max_gpus": 2**20, "global_batch": 2**20})
    with pytest.raises(ConfigError) as err:  # millions of micro-batches per pipeline
        plan_search(huge)
    assert err.value.field == "--max-micro-batches" and "1,048,576 micro-batches" in str(err.value)


def test_every_kind_of_large_model_candidate_is_what_simulate_says():
    """One simulated candidate of every combination of the large-model settings the search found
    (context and expert parallelism, interleaving, ZeRO stage, recomputation, sequence parallelism,
    library) for a mixture of experts: the planner's figures are simulate()'s, bit for bit."""
    workload, cluster, plan, strategy = CASES[5]
    req = request(workload, cluster, plan, strategy)
    result = plan_search(req)
    picked = {}
    for c in result.ranked:
        la = c.layout
        picked.setdefault((la.cp > 1, la.ep > 1, la.vpp > 1, la.zero_stage, la.recompute, la.sequence_parallel,
                           c.sync.backend), c)
    kinds = set(picked)
    assert {k[0] for k in kinds} == {False, True} and {k[1] for k in kinds} == {False, True}
    assert {k[3] for k in kinds} >= {0, 3} and True in {k[2] for k in kinds}
    for c in picked.values():
        sim = simulate(scenario_from_dict(c.spec(req)))
        for name in FIELDS:
            assert getattr(c.outcome, name) == getattr(sim, name), (name, c.label())
