"""Pipeline, tensor and hybrid layouts in the detailed fidelity (every rank, every message).

Where the fast path's load counting describes what the links really carry, the two agree to
rounding (1e-9): tensor x data parallelism (pp = 1) on every shape, oversubscription included
(all groups communicate at once, as the fast path assumes), and pipelines of one replica
without oversubscription. Elsewhere the fast path is a deliberate approximation and the
detailed mode sees more, within the issue's 1%:
- it charges each stage's data-parallel sync as if all tp x pp groups of a node synchronised
  at once (sim.parallel.dp_group); stages flush at different times, so in the detailed run the
  syncs overlap in part and finish earlier (up to 0.6% here);
- inside a node, a rank's activation sends share its GPU port with its tensor-parallel rings
  and the gradient sends of its neighbours, which the fast path costs apart (detailed up to
  2e-4 slower);
- with oversubscription it charges every stage-boundary send the core's full 1/o, true only
  when the core is busy in both directions (up to 1.2% with o = 2 below: checked to 1.5%).
Bytes agree to 1e-9 everywhere: the same messages, counted per link class.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config import Scenario, scenario_from_dict
from sim.costs.pipeline import bubble_fraction
from sim.costs.tensor import tp_bytes_per_rank_closed_form
from sim.engine.detailed import run_detailed, run_detailed_with_network
from sim.engine.pipeline import bubble_fraction_of
from sim.errors import ConfigError
from sim.simulate import simulate
from tests.conftest import alpha_beta_links
from tests.test_pipeline import IDEAL, uniform_layers

EXACT_RTOL = 1e-9
ISSUE_RTOL = 0.01
SHAPES = {  # nodes, gpus_per_node, nics_per_node, oversubscription
    "1x4": (1, 4, 1, 1.0), "2x4": (2, 4, 1, 1.0), "4x2": (4, 2, 1, 1.0),
    "2x4-nics2": (2, 4, 2, 1.0), "2x4-over2": (2, 4, 1, 2.0),
}


def layout_scenario(shape: str | tuple[int, int, int, float], dp: int, tp: int, pp: int, m: int = 4,
                    schedule: str = "1f1b", *, collective: str = "ring", codec: str | None = None, layers: int = 8,
                    links=("nvlink2", "ib_edr")) -> Scenario:
    nodes, g, nics, over = SHAPES[shape] if isinstance(shape, str) else shape
    strategy = {"kind": "hybrid", "dp": dp, "tp": tp, "pp": pp, "micro_batches": m, "schedule": schedule,
                "collective": collective, "bucket_mib": 2}
    if codec is not None:
        strategy["codec"] = codec
    return scenario_from_dict({
        "workload": {"layers": uniform_layers(layers, flops=2e9, params=500_000, acts=50_000, kind="transformer"),
                     "batch_size": 8, "optimizer": "sgd"},
        "cluster": {"nodes": nodes, "gpus_per_node": g, "nics_per_node": nics, "oversubscription": over,
                    "gpu": "ideal", "intra_link": links[0], "inter_link": links[1]},
        "strategy": strategy,
        "catalog": {**IDEAL, "links": {**IDEAL.get("links", {}), **alpha_beta_links(*links)}},
        "simulation": {"fidelity": "detailed"},
    })


def compare(s: Scenario, time_rtol: float):
    detailed = simulate(s)
    fast = simulate(replace(s, fidelity="fast"))
    assert detailed.fidelity == "detailed" and detailed.data_parallel == fast.data_parallel
    assert detailed.iteration_time_s == pytest.approx(fast.iteration_time_s, rel=time_rtol)
    for link in ("intra", "inter"):
        assert detailed.bytes_by_link[link] == pytest.approx(fast.bytes_by_link[link], rel=EXACT_RTOL)
    assert detailed.compute_time_s == fast.compute_time_s
    if time_rtol == EXACT_RTOL:  # the breakdown too: bubble, sends, TP rings, DP sync, codec
        for name in ("bubble_time_s", "pp_comm_time_s", "tp_comm_time_s", "comm_time_s", "codec_time_s"):
            assert getattr(detailed, name) == pytest.approx(getattr(fast, name), rel=EXACT_RTOL, abs=1e-12), name
    return detailed, fast


def layouts_of(world: int, pipelines: bool) -> list[tuple[int, int, int]]:
    out = []
    for tp in (1, 2, 4, 8):
        for pp in (1, 2, 4, 8):
            if world % (tp * pp) == 0 and (pp > 1) == pipelines and tp * pp > 1:
                out.append((world // (tp * pp), tp, pp))
    return out


def slow_unless(fast_ids: set, *values):
    """Parameters of which only ``fast_ids`` run by default; the rest with -m slow."""
    return [v if v in fast_ids else pytest.param(v, marks=pytest.mark.slow) for v in values]


@pytest.mark.parametrize("codec", slow_unless({None, "fp8_e4m3"}, None, "fp16", "fp8_e4m3"))
@pytest.mark.parametrize("collective", slow_unless({"ring"}, "ring", "hierarchical"))
@pytest.mark.parametrize("shape", SHAPES)
def test_tensor_x_data_parallel_agrees_exactly(shape, collective, codec):
    """pp = 1: every TP group and every DP group communicates at the same moment, as counted."""
    nodes, g = SHAPES[shape][:2]
    for dp, tp, pp in layouts_of(nodes * g, pipelines=False):
        compare(layout_scenario(shape, dp, tp, pp, 2, collective=collective, codec=codec), EXACT_RTOL)


@pytest.mark.parametrize("codec", [None, "int8"])
@pytest.mark.parametrize("shape", SHAPES)
def test_micro_batched_data_parallel_agrees_exactly(shape, codec):
    """tp = pp = 1 with 4 micro-batches (gradient accumulation): one sync after the flush."""
    nodes, g = SHAPES[shape][:2]
    compare(layout_scenario(shape, nodes * g, 1, 1, 4, codec=codec), EXACT_RTOL)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("shape", ["1x4", "2x4", "4x2", "2x4-nics2"])
def test_one_pipeline_agrees_exactly(shape, schedule):
    nodes, g = SHAPES[shape][:2]
    for m in (1, 4):
        compare(layout_scenario(shape, 1, 1, nodes * g, m, schedule, layers=nodes * g), EXACT_RTOL)


@pytest.mark.parametrize("codec", slow_unless({"int8"}, None, "bf16", "int8"))
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("shape", SHAPES)
def test_hybrid_layouts_agree_within_the_issue_tolerance(shape, schedule, codec):
    nodes, g, _, over = SHAPES[shape]
    rtol = ISSUE_RTOL if over == 1 else 0.015
    for dp, tp, pp in layouts_of(nodes * g, pipelines=True):
        compare(layout_scenario(shape, dp, tp, pp, 4, schedule, codec=codec), rtol)


def test_bubble_of_a_free_pipeline_matches_the_closed_form():
    """Free links and no TP: the detailed flush is (m + p - 1)(f + b), as for GPipe and 1F1B."""
    for schedule in ("gpipe", "1f1b"):
        s = layout_scenario("1x4", 1, 1, 4, 4, schedule, layers=4, links=("free", "free"))
        result = run_detailed(s)
        assert bubble_fraction_of(result) == pytest.approx(bubble_fraction(4, 4), rel=1e-9)


def test_tensor_parallel_bytes_per_rank_match_the_closed_form():
    """One replica, one stage, t = 4: every rank sends 2 passes x 2 allreduces x 2(t-1)/t x b s h
    x bytes per transformer layer and micro-batch (sim.costs.tensor), and receives as much."""
    m, layers = 2, 3
    s = layout_scenario("1x4", 1, 4, 1, m, layers=layers)
    result, net = run_detailed_with_network(s)
    per_rank = m * layers * tp_bytes_per_rank_closed_form(4, 8 // m, 50_000, 4, allreduces_per_pass=2)
    for rank in range(4):
        assert net.sent_bytes[rank] == pytest.approx(per_rank, rel=1e-12)
        assert net.received_bytes[rank] == pytest.approx(per_rank, rel=1e-12)
    assert result.tp_comm_time_s > 0 and result.comm_time_s == 0


def test_activations_cross_the_link_between_stage_ranks():
    """pp = 2 over 2 nodes of one GPU: every activation and gradient crosses the network."""
    s = scenario_from_dict({**_two_node_pipeline(), "simulation": {"fidelity": "detailed"}})
    result, net = run_detailed_with_network(s)
    activation = 2 * 50_000 * 4  # micro-batch of 2 samples, fp32
    assert result.bytes_by_link == {"intra": 0.0, "inter": pytest.approx(2 * 4 * activation)}
    assert net.sent_bytes[0] == pytest.approx(4 * activation) and net.sent_bytes[1] == pytest.approx(4 * activation)


def _two_node_pipeline() -> dict:
    return {"workload": {"layers": uniform_layers(2, flops=2e9, params=0, acts=50_000), "batch_size": 8},
            "cluster": {"nodes": 2, "gpus_per_node": 1, "gpu": "ideal", "intra_link": "nvlink2", "inter_link": "ib_edr"},
            "strategy": {"kind": "pipeline", "pp": 2, "micro_batches": 4},
            "catalog": {**IDEAL, "links": {**IDEAL.get("links", {}), **alpha_beta_links("nvlink2", "ib_edr")}}}


def test_ps_with_model_parallelism_is_refused_naming_fast():
    s = layout_scenario("2x4", 4, 1, 2)
    with pytest.raises(ConfigError, match="fast for collective=ps"):
        run_detailed(replace(s, strategy=replace(s.strategy, collective="ps")))


def test_ranks_are_traced_per_lane():
    result = run_detailed(layout_scenario("1x4", 1, 2, 2, 2))
    lanes = {span.lane for span in result.spans}
    assert {"rank0/compute", "rank0/send", "rank2/compute"} <= lanes


# -- properties -----------------------------------------------------------------------------

@st.composite
def random_layouts(draw):
    nodes, g = draw(st.sampled_from([(1, 2), (1, 4), (2, 2), (2, 4), (4, 2), (1, 8)]))
    world = nodes * g
    tp = draw(st.sampled_from([t for t in (1, 2, 4) if world % t == 0 and (g % t == 0 or t % g == 0)]))
    pp = draw(st.sampled_from([p for p in (1, 2, 4) if world % (tp * p) == 0 and (g % (tp * p) == 0 or (tp * p) % g == 0)]))
    m = draw(st.sampled_from([1, 2, 4]))
    codec = draw(st.sampled_from([None, "fp16", "fp8_e5m2", "int8"]))
    return nodes, g, draw(st.integers(1, 2)), world // (tp * pp), tp, pp, m, draw(st.sampled_from(["gpipe", "1f1b"])), codec


def random_scenario(layout) -> Scenario:
    nodes, g, nics, dp, tp, pp, m, schedule, codec = layout
    return layout_scenario((nodes, g, nics, 1.0), dp, tp, pp, m, schedule, codec=codec, layers=4)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_layouts())
def test_fast_and_detailed_agree_on_random_layouts(layout):
    """Over all 936 points of this space (nics 1-2, codec none or fp8) the worst was 0.59%
    (2x4, dp 2, pp 4, 4 micro-batches, GPipe: the staggered stage syncs)."""
    compare(random_scenario(layout), ISSUE_RTOL)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_layouts())
def test_every_rank_receives_what_it_sends(layout):
    result, net = run_detailed_with_network(random_scenario(layout))
    for rank in range(result.world_size):
        assert net.sent_bytes[rank] == pytest.approx(net.received_bytes[rank], rel=1e-12)
    assert sum(net.sent_bytes.values()) == pytest.approx(sum(result.bytes_by_link.values()), rel=1e-12)
