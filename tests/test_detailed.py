"""The detailed (per-rank, per-message) fidelity against the fast path and the closed forms.

Why they agree: the fast path costs a collective as a sum of bulk-synchronous steps, each as
long as its slowest flow group. In the detailed ring a rank starts step k+1 when its own send
of step k is done and step k from its predecessor has arrived; the longest path through that
dependency graph stays on the slowest link for all 2(n-1) steps, which is the fast path's sum.
Symmetric ranks keep the flows that share a NIC or the core in phase, so each gets the share
the fast path's load counting gives. The issue asks for 1%; we check 1e-9, which is rounding.
The links here are the catalog's alpha-beta twins (kind custom): the fast path costs them as
counted steps (sim/costs/backends/alpha_beta.py), which is what the per-flow network replays.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.cluster import Cluster
from sim.config import Scenario, scenario_from_dict
from sim.costs.collectives import (
    hierarchical_allreduce_time,
    ps_push_pull_time,
    ring_allreduce_time,
)
from sim.engine.detailed import TRACED_RANKS, run_detailed, run_detailed_with_network
from sim.errors import ConfigError
from sim.simulate import simulate
from sim.strategy import Strategy
from sim.workload import Layer, Workload
from tests.conftest import alpha_beta_links, make_gpu, make_link

AGREEMENT_RTOL = 1e-9


def big_gradient_layers(n_layers: int = 6, params: int = 4_000_000) -> list[dict]:
    """A custom workload whose 16 MB-per-layer gradients make bandwidth dominate."""
    return [{"name": f"fc{i}", "param_count": params, "fwd_flops": 2e6, "activation_elems": 1000}
            for i in range(n_layers)]


WORKLOADS = {"mlp": {"model": "mlp"}, "big": {"layers": big_gradient_layers(), "batch_size": 4}}
SHAPES = {  # nodes, gpus_per_node, nics_per_node, oversubscription
    "1x4": (1, 4, 1, 1.0), "2x4": (2, 4, 1, 1.0), "4x2": (4, 2, 1, 1.0), "8x1": (8, 1, 1, 1.0),
    "2x4-nics2": (2, 4, 2, 1.0), "2x4-over2": (2, 4, 1, 2.0), "4x2-nics2-over2": (4, 2, 2, 2.0),
}
COLLECTIVES = {"ring": ("ring", 1), "hierarchical": ("hierarchical", 1), "ps1": ("ps", 1), "ps2": ("ps", 2)}


def scenario(workload: str, shape: str, collective: str, overlap: bool, links=("nvlink2", "ib_edr"),
             bucket_mib: float = 8) -> Scenario:
    nodes, g, nics, over = SHAPES[shape]
    name, servers = COLLECTIVES[collective]
    return scenario_from_dict({
        "workload": WORKLOADS[workload],
        "cluster": {"nodes": nodes, "gpus_per_node": g, "nics_per_node": nics, "oversubscription": over,
                    "intra_link": links[0], "inter_link": links[1]},
        "strategy": {"collective": name, "ps_servers": servers, "overlap": overlap, "bucket_mib": bucket_mib},
        "catalog": {"links": alpha_beta_links(*links)},
    })


def assert_agree(s: Scenario) -> None:
    fast = simulate(s)
    detailed = simulate(replace(s, fidelity="detailed"))
    assert detailed.fidelity == "detailed"
    assert detailed.iteration_time_s == pytest.approx(fast.iteration_time_s, rel=AGREEMENT_RTOL)
    assert detailed.compute_time_s == fast.compute_time_s
    assert detailed.exposed_comm_time_s == pytest.approx(fast.exposed_comm_time_s, rel=1e-6, abs=1e-12)
    assert detailed.comm_time_s == pytest.approx(fast.comm_time_s, rel=AGREEMENT_RTOL)
    for link in ("intra", "inter"):
        assert detailed.bytes_by_link[link] == pytest.approx(fast.bytes_by_link[link], rel=AGREEMENT_RTOL)
    assert [b.end_s for b in detailed.buckets] == pytest.approx([b.end_s for b in fast.buckets], rel=AGREEMENT_RTOL)


@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "no-overlap"])
@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("workload", WORKLOADS)
def test_detailed_agrees_with_fast(workload, shape, collective, overlap):
    assert_agree(scenario(workload, shape, collective, overlap))


@pytest.mark.parametrize("links", [("pcie3", "ib_ndr"), ("nvlink2", "tcp_10gbe"), ("pcie4", "roce_100g")])
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_detailed_agrees_with_fast_when_either_link_class_is_the_slower(links, collective):
    assert_agree(scenario("big", "2x4-nics2", collective, True, links=links, bucket_mib=3))
    assert_agree(scenario("big", "4x2-nics2-over2", collective, False, links=links, bucket_mib=3))


def test_bandwidth_dominates_the_big_workload():
    s = scenario("big", "2x4", "ring", overlap=False)
    result = simulate(replace(s, fidelity="detailed"))
    assert result.exposed_comm_time_s > 10 * result.compute_time_s


# -- closed forms ---------------------------------------------------------------------------

def uniform_scenario(nodes: int, g: int, collective: str, servers: int = 1, n_bytes: float = 64e6,
                     intra=None, inter=None, nics: int = 1) -> Scenario:
    """One layer of n_bytes/4 fp32 parameters, no compute: the bucket's comm is the iteration."""
    workload = Workload(name="one", layers=(Layer(name="w", kind="custom", param_count=int(n_bytes // 4),
                                                  fwd_flops=0.0, bwd_flops=0.0, activation_elems=0.0),),
                        batch_size=1, optimizer="sgd")
    c = Cluster(nodes=nodes, gpus_per_node=g, gpu=make_gpu(mem_GBps=1e12),
                intra_link=intra or make_link("intra", 100e9, 2e-6), inter_link=inter or make_link("inter", 10e9, 5e-6),
                nics_per_node=nics)
    strategy = Strategy(collective=collective, ps_servers=servers, bucket_bytes=int(n_bytes))
    return Scenario(name="closed-form", workload=workload, cluster=c, strategy=strategy, fidelity="detailed")


def bucket_time(s: Scenario) -> float:
    (bucket,) = run_detailed(s).buckets
    return bucket.end_s - bucket.start_s


@pytest.mark.parametrize("n", [2, 3, 8])
def test_ring_matches_its_closed_form(n):
    link = make_link("intra", 100e9, 2e-6)
    assert bucket_time(uniform_scenario(1, n, "ring", intra=link)) == pytest.approx(
        ring_allreduce_time(n, 64e6, link.alpha_s, link.effective_Bps), rel=1e-12)


def test_hierarchical_matches_its_closed_form():
    s = uniform_scenario(4, 4, "hierarchical", nics=2)
    expected = hierarchical_allreduce_time(4, 4, 64e6, s.cluster.intra_link, s.cluster.inter_link, nics_per_node=2)
    assert bucket_time(s) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("servers", [1, 2, 4])
def test_ps_matches_its_closed_form(servers):
    s = uniform_scenario(4, 2, "ps", servers=servers)
    link = s.cluster.inter_link
    assert bucket_time(s) == pytest.approx(
        ps_push_pull_time(8, 64e6, servers, link.alpha_s, link.effective_Bps, gpus_per_node=2), rel=1e-12)


# -- what the result holds ------------------------------------------------------------------

def test_one_gpu_communicates_nothing():
    result = run_detailed(uniform_scenario(1, 1, "ring"))
    assert result.bytes_by_link == {"intra": 0.0, "inter": 0.0}
    assert result.iteration_time_s == pytest.approx(result.compute_time_s, rel=1e-12)


def test_spans_are_per_rank_and_capped():
    s = scenario("mlp", "2x4", "ring", True)
    s = replace(s, cluster=replace(s.cluster, nodes=4), fidelity="detailed")  # 16 ranks
    result = run_detailed(s)
    lanes = {span.lane for span in result.spans}
    assert lanes == {f"rank{r}/{kind}" for r in range(TRACED_RANKS) for kind in ("compute", "comm")}
    assert result.events > 0 and result.world_size == 16


def test_tree_is_refused_with_the_alternative_named():
    with pytest.raises(ConfigError, match="fast for collective=tree"):
        run_detailed(replace(scenario("mlp", "2x4", "ring", True), strategy=Strategy(collective="tree")))


def test_more_than_256_ranks_on_the_event_engine_is_refused_pointing_to_fast():
    """Parameter servers and an explicit flow_engine: event run message by message: 256 ranks at most;
    rings run as periodic schedules beyond (sim.engine.periodic) up to MAX_DETAILED_WORLD_SIZE."""
    s = scenario("mlp", "2x4", "ring", True)
    big = replace(s.cluster, nodes=33, gpus_per_node=8)
    with pytest.raises(ConfigError, match="fidelity fast"):
        run_detailed(replace(s, cluster=big, flow_engine="event"))
    with pytest.raises(ConfigError, match="fidelity fast"):
        run_detailed(replace(scenario("mlp", "2x4", "ps1", True), cluster=big))
    with pytest.raises(ConfigError, match="fidelity fast"):
        run_detailed(replace(s, cluster=replace(s.cluster, nodes=8193, gpus_per_node=8)))
    assert run_detailed(replace(s, cluster=big)).flow_engine == "periodic"


# -- properties -----------------------------------------------------------------------------

shapes = st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 2), st.sampled_from([1.0, 1.5, 2.0]))
collectives = st.sampled_from(list(COLLECTIVES.values()))


def property_scenario(shape, collective, intra_Bps=100e9, inter_Bps=10e9, overlap=True) -> Scenario:
    nodes, g, nics, over = shape
    s = uniform_scenario(nodes, g, collective[0], servers=collective[1], n_bytes=8e6,
                         intra=make_link("intra", intra_Bps, 2e-6), inter=make_link("inter", inter_Bps, 5e-6), nics=nics)
    return replace(s, cluster=replace(s.cluster, oversubscription=over),
                   strategy=replace(s.strategy, bucket_bytes=3_000_000, overlap=overlap))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes, collectives)
def test_every_endpoint_receives_what_it_sends(shape, collective):
    result, net = run_detailed_with_network(property_scenario(shape, collective))
    endpoints = set(net.sent_bytes) | set(net.received_bytes)
    for endpoint in endpoints:
        assert net.sent_bytes[endpoint] == pytest.approx(net.received_bytes[endpoint], rel=1e-12)
    assert sum(net.sent_bytes.values()) == pytest.approx(sum(result.bytes_by_link.values()), rel=1e-12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes, collectives, st.floats(1.0, 8.0), st.sampled_from(["intra", "inter"]))
def test_more_bandwidth_is_never_slower(shape, collective, factor, which):
    base = run_detailed(property_scenario(shape, collective)).iteration_time_s
    faster = property_scenario(shape, collective, intra_Bps=100e9 * (factor if which == "intra" else 1),
                               inter_Bps=10e9 * (factor if which == "inter" else 1))
    assert run_detailed(faster).iteration_time_s <= base * (1 + 1e-12)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes, collectives, st.booleans())
def test_same_input_same_result(shape, collective, overlap):
    s = property_scenario(shape, collective, overlap=overlap)
    assert run_detailed(s) == run_detailed(s)


@pytest.mark.slow
@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("gpus", [64, 256])
def test_detailed_agrees_with_fast_at_scale(collective, gpus):
    """8 GPUs per node, 2 NICs, oversubscription 2: tens of seconds for the 256-rank ring."""
    s = scenario("big", "2x4", collective, True, bucket_mib=25)
    assert_agree(replace(s, cluster=replace(s.cluster, nodes=gpus // 8, gpus_per_node=8, nics_per_node=2,
                                             oversubscription=2.0)))


@pytest.mark.parametrize("links", [("nvlink2", "ib_edr"), ("nvlink2", "tcp_25gbe"), ("pcie3", "roce_25g")])
@pytest.mark.parametrize("collective", ["ring", "hierarchical"])
def test_on_catalog_links_detailed_replays_the_library_within_two_percent(links, collective):
    """On real links the fast path costs NCCL's model (its latencies, the transport's rates); the
    detailed mode replays the ring per flow on the links as NCCL sees them
    (sim.costs.comm.per_flow_cluster). They differ by NCCL's base latency and pipelining, which
    ResNet-50's buckets on 16 GPUs keep under 2 % of an iteration (measured: -0.46 .. +0.00 %)."""
    s = scenario_from_dict({"workload": {"model": "resnet50"},
                            "cluster": {"gpus": 16, "gpus_per_node": 4, "intra_link": links[0], "inter_link": links[1]},
                            "strategy": {"collective": collective}, "simulation": {"fidelity": "detailed"}})
    detailed = simulate(s)
    fast = simulate(replace(s, fidelity="fast"))
    assert detailed.iteration_time_s == pytest.approx(fast.iteration_time_s, rel=0.02)
    assert detailed.bytes_by_link["inter"] == pytest.approx(fast.bytes_by_link["inter"], rel=1e-9)
