"""Pipeline, tensor and hybrid parallelism: bubble and TP bytes against closed forms, placement."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config import scenario_from_dict
from sim.costs.pipeline import balance_stages, bubble_fraction, pipeline_time_closed_form
from sim.costs.tensor import tp_bytes_per_rank_closed_form
from sim.engine.pipeline import bubble_fraction_of, run_pipeline, schedule_ops
from sim.engine.pipeline_plan import build_pipeline_plan
from sim.errors import ConfigError
from sim.simulate import simulate

IDEAL = {
    "gpus": {"ideal": {"peak_tflops": {"fp32": 1.0}, "memory_bandwidth_GBps": 1e9, "memory_GiB": 1000, "efficiency": 1.0}},
    "links": {"free": {"bandwidth_GBps": 1e9, "latency_us": 0, "kind": "custom"},
              "net": {"bandwidth_Gbps": 100, "latency_us": 2, "kind": "custom"}},
}
"""A compute-bound device without launch overhead and a free link: times are FLOPs / 1e12."""


def spec(layers, *, gpus=4, per_node=4, batch=8, intra="free", inter="free", **strategy):
    return {
        "workload": {"layers": layers, "batch_size": batch, "optimizer": "sgd"},
        "cluster": {"gpus": gpus, "gpus_per_node": per_node, "gpu": "ideal", "intra_link": intra, "inter_link": inter},
        "strategy": strategy,
        "catalog": IDEAL,
    }


def uniform_layers(n, flops=1e9, params=0, acts=0, kind="custom"):
    return [{"name": f"l{i}", "kind": kind, "param_count": params, "fwd_flops": flops, "bwd_flops": 2 * flops,
             "activation_elems": acts} for i in range(n)]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p, m", [(2, 1), (2, 4), (4, 4), (4, 8), (8, 3), (3, 16)])
def test_bubble_matches_closed_form_exactly(schedule, p, m):
    batch = 48
    scenario = scenario_from_dict(spec(uniform_layers(2 * p), gpus=p, per_node=p, batch=batch, kind="pipeline",
                                       pp=p, micro_batches=m, schedule=schedule))
    result = simulate(scenario)
    micro = batch // m
    f, b = 2 * 1e9 * micro / 1e12, 2 * 2e9 * micro / 1e12  # two layers per stage
    flush = result.bubble_time_s + m * (f + b)
    assert flush == pytest.approx(pipeline_time_closed_form(p, m, f, b), rel=1e-12)
    assert bubble_fraction_of(result) == pytest.approx(bubble_fraction(p, m), rel=1e-12)
    assert result.bubble_time_s == pytest.approx((p - 1) * (f + b), rel=1e-12)


@settings(max_examples=25, deadline=None)
@given(costs=st.lists(st.integers(1, 20), min_size=2, max_size=8), p=st.integers(1, 4),
       m1=st.sampled_from([1, 2, 3, 4, 5, 6]), extra=st.sampled_from([1, 2, 3, 4]),
       schedule=st.sampled_from(["gpipe", "1f1b"]))
def test_more_micro_batches_never_increase_the_bubble_fraction(costs, p, m1, extra, schedule):
    p = min(p, len(costs))
    m2 = m1 + extra
    batch = 2520  # divisible by 1..10
    layers = [{"name": f"l{i}", "param_count": 0, "fwd_flops": c * 1e9, "bwd_flops": 2 * c * 1e9,
               "activation_elems": 0} for i, c in enumerate(costs)]

    def fraction(m):
        s = scenario_from_dict(spec(layers, gpus=p, per_node=p, batch=batch, kind="pipeline", pp=p,
                                    micro_batches=m, schedule=schedule))
        return bubble_fraction_of(simulate(s))

    assert fraction(m2) <= fraction(m1) + 1e-12


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_schedules_run_every_micro_batch_once(schedule):
    p, m = 4, 6
    for s in range(p):
        ops = schedule_ops(schedule, p, m, s)
        assert sorted(ops) == sorted(itertools.product("FB", range(m)))
    assert schedule_ops("1f1b", 4, 6, 0)[:4] == [("F", 0), ("F", 1), ("F", 2), ("F", 3)]
    assert schedule_ops("1f1b", 4, 6, 3)[:2] == [("F", 0), ("B", 0)]


def test_pipeline_engine_at_one_stage_equals_fast_path_without_overlap():
    layers = uniform_layers(6, params=3_000_000, acts=1000)
    scenario = scenario_from_dict({**spec(layers, gpus=4, per_node=4, intra="net", overlap=False),
                                   "variability": {"stragglers": False}})
    fast = simulate(scenario)
    pipe = run_pipeline(build_pipeline_plan(scenario), 4, 8)
    assert pipe.iteration_time_s == pytest.approx(fast.iteration_time_s, rel=1e-12)
    assert pipe.bytes_by_link["intra"] == pytest.approx(fast.bytes_by_link["intra"], rel=1e-12)


@settings(max_examples=50, deadline=None)
@given(costs=st.lists(st.integers(1, 30), min_size=1, max_size=7), p=st.integers(1, 7))
def test_balance_stages_is_optimal(costs, p):
    p = min(p, len(costs))
    bounds = balance_stages([float(c) for c in costs], p)
    assert bounds[0][0] == 0 and bounds[-1][1] == len(costs) and all(lo < hi for lo, hi in bounds)
    best = min(
        max(sum(costs[a:b]) for a, b in zip((0, *cuts), (*cuts, len(costs)), strict=True))
        for cuts in itertools.combinations(range(1, len(costs)), p - 1)
    )
    assert max(sum(costs[lo:hi]) for lo, hi in bounds) == best


def test_tp_bytes_match_megatron_closed_form():
    """4 transformer layers, t = 4 on one node: 2 allreduces of b s h per layer per pass."""
    t, m, batch, sh = 4, 2, 8, 4096 * 512
    layers = uniform_layers(4, params=1000, acts=sh, kind="TransformerBlock")
    scenario = scenario_from_dict(spec(layers, gpus=t, per_node=t, batch=batch, intra="net", kind="tensor", tp=t,
                                       micro_batches=m))
    result = simulate(scenario)
    per_rank = tp_bytes_per_rank_closed_form(t, batch // m, sh, 4)
    assert result.bytes_by_link["intra"] == pytest.approx(t * 4 * m * per_rank, rel=1e-12)
    assert result.bytes_by_link["inter"] == 0
    # time: each layer pass has 2 ring allreduces: 2 x 2(t-1)(alpha + S/(t B))
    s_bytes = (batch // m) * sh * 4
    ring = 2 * (t - 1) * (2e-6 + s_bytes / t / 12.5e9)
    assert result.tp_comm_time_s == pytest.approx(m * 4 * 2 * 2 * ring, rel=1e-9)


def test_hybrid_places_tensor_parallel_inside_a_node():
    layers = uniform_layers(8, params=1_000_000, acts=10_000, kind="TransformerBlock")
    # dp 2 x pp 2 x tp 4 on 2 nodes of 8: TP and the stage boundary stay inside a node, DP crosses
    hybrid = scenario_from_dict(spec(layers, gpus=16, per_node=8, intra="free", inter="net", kind="hybrid",
                                     dp=2, pp=2, tp=4, micro_batches=4))
    plan = build_pipeline_plan(hybrid)
    assert plan.stages[0].send_link == "intra"
    result = simulate(hybrid)
    assert result.bytes_by_link["inter"] > 0 and result.data_parallel == 2
    # tp 8 x pp 2 on the same nodes: the boundary between stages crosses the network
    across = scenario_from_dict(spec(layers, gpus=16, per_node=8, intra="free", inter="net", kind="hybrid",
                                     dp=1, pp=2, tp=8, micro_batches=4))
    assert build_pipeline_plan(across).stages[0].send_link == "inter"
    assert simulate(across).pp_comm_time_s > 0


def test_throughput_counts_replicas_not_ranks():
    layers = uniform_layers(4, params=1000)
    result = simulate(scenario_from_dict(spec(layers, gpus=4, per_node=4, kind="pipeline", pp=4, micro_batches=8)))
    assert result.throughput_samples_per_s == pytest.approx(8 / result.iteration_time_s)
    assert result.speedup == pytest.approx(result.baseline_time_s / result.iteration_time_s)
    assert 0 < result.scaling_efficiency <= 1 / 4 * result.speedup * 4


@pytest.mark.parametrize("strategy, field, words", [
    ({"kind": "hybrid", "dp": 2, "tp": 4, "pp": 2}, "strategy.dp * tp * pp", ["2 * 4 * 2 = 16", "32"]),
    ({"kind": "pipeline", "pp": 9, "dp": 1, "tp": 1}, "strategy.dp * tp * pp", ["1 * 1 * 9"]),
    ({"kind": "pipeline", "pp": 4, "micro_batches": 3, "dp": 8}, "strategy.micro_batches", ["batch_size=8", "8 % 3 = 2"]),
    ({"kind": "data_parallel", "tp": 2}, "strategy.kind", ["tp=2"]),
    ({"schedule": "zigzag"}, "strategy.schedule", ["gpipe"]),
])
def test_bad_degrees_are_one_line_errors(strategy, field, words):
    with pytest.raises(ConfigError) as err:
        scenario_from_dict(spec(uniform_layers(4), gpus=32, per_node=8, **strategy))
    message = str(err.value)
    assert err.value.field == field and "\n" not in message
    for word in words:
        assert word in message


def test_more_stages_than_layers():
    with pytest.raises(ConfigError) as err:
        scenario_from_dict(spec(uniform_layers(3), gpus=4, per_node=4, kind="pipeline", pp=4))
    assert err.value.field == "strategy.pp" and "3 layers" in str(err.value)


def test_pipeline_metrics_columns():
    result = simulate(scenario_from_dict(spec(uniform_layers(4), gpus=2, per_node=2, kind="pipeline", pp=2,
                                              micro_batches=2)))
    row = result.metrics()
    for column in ("bubble_time_s", "codec_time_s", "tp_comm_time_s", "pp_comm_time_s", "memory_bytes", "data_parallel"):
        assert column in row
    assert row["bubble_time_s"] > 0 and row["data_parallel"] == 1
    replace(result)  # frozen dataclass stays constructible


def test_cli_bad_degrees_exit_2(capsys):
    from scalebench.cli import main

    code = main(["simulate", "--model", "mlp", "--gpus", "32", "--gpus-per-node", "8", "--dp", "2", "--tp", "4", "--pp", "2"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "strategy.dp * tp * pp" in err and "2 * 4 * 2 = 16" in err and "32" in err


def test_cli_hybrid_breakdown_and_run(capsys):
    from scalebench.cli import main

    assert main(["simulate", "--model", "mlp", "--gpus", "16", "--gpus-per-node", "8", "--tp", "2", "--pp", "2",
                 "--micro-batches", "4", "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert "bubble_time_s" in out.splitlines()[0]
    assert main(["simulate", "--model", "mlp", "--gpus", "8", "--collective", "ps", "--ps-mode", "async",
                 "--iterations", "5"]) == 0
    assert "staleness" in capsys.readouterr().out


@settings(max_examples=30, deadline=None)
@given(collective=st.sampled_from(["ring", "tree", "hierarchical", "ps"]),
       codec=st.sampled_from([None, "fp16", "bf16", "fp8_e4m3", "int8"]), m=st.sampled_from([1, 2, 4, 8]),
       error_feedback=st.booleans(), schedule=st.sampled_from(["gpipe", "1f1b"]))
def test_one_gpu_communicates_nothing(collective, codec, m, error_feedback, schedule):
    strategy = {"collective": collective, "micro_batches": m, "schedule": schedule, "error_feedback": error_feedback}
    if codec:
        strategy["codec"] = codec
    result = simulate(scenario_from_dict(spec(uniform_layers(4, params=1000, acts=100), gpus=1, per_node=1, intra="net",
                                              inter="net", **strategy)))
    assert result.bytes_by_link == {"intra": 0.0, "inter": 0.0}
    assert result.comm_time_s == 0 and result.codec_time_s == 0 and result.tp_comm_time_s == 0
    assert result.pp_comm_time_s == 0


def test_one_iteration_of_async_ps_is_refused():
    from sim.run import simulate_run

    scenario = scenario_from_dict(spec(uniform_layers(4, params=1000), gpus=4, per_node=4, collective="ps", ps_mode="async"))
    with pytest.raises(ConfigError, match="simulate_run"):
        simulate(scenario)
    assert simulate_run(scenario, 3).mode == "async"


def test_zoo_transformers_allreduce_twice_per_block_as_megatron_does():
    """Sub-block rows (qkv/proj/fc/out; q/k/v/o/gate/up/down): only the row-parallel projection of
    attention and of the MLP allreduce, norms and position embeddings are replicated, the token
    embedding is vocabulary-parallel (Shoeybi et al. 2019, Figure 3)."""
    from sim.costs.tensor import tp_allreduces_per_pass
    from sim.workload import workload_from_dict

    for model, blocks in (("gpt2_small", 12), ("bert_base", 12), ("llama2_7b", 32)):
        w = workload_from_dict({"model": model})
        assert sum(tp_allreduces_per_pass(layer) for layer in w.layers) == 2 * blocks + 1, model
