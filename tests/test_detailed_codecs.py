"""Compressed gradients in the detailed (per-rank, per-message) fidelity against the fast path.

Both take the codec's wire bytes and device time from sim.costs.codecs; the detailed mode
sends the bytes as per-rank messages (a real ring allgather of the encoded tensors for fp8 and
int8) and schedules encode, decode and local sums on each rank's comm stream where they
happen. With symmetric ranks the critical path of those schedules is the fast path's sum, so
the issue's 1% is met with rounding to spare: we check iteration time and bytes to 1e-9.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.codecs import CODECS
from sim.config import Scenario, scenario_from_dict
from sim.costs.codecs import per_rank_wire_bytes_closed_form, wire_bytes
from sim.engine.detailed import run_detailed, run_detailed_with_network
from sim.errors import ConfigError
from sim.simulate import simulate
from tests.conftest import alpha_beta_links
from tests.test_detailed import SHAPES, big_gradient_layers

AGREEMENT_RTOL = 1e-9
CODEC_SHAPES = ("1x4", "2x4", "4x2", "2x4-nics2", "2x4-over2", "4x2-nics2-over2")
PATHS = {  # id: (codec, codec_path, collective, ps_servers)
    "fp32-ring": ("fp32", "allreduce", "ring", 1),
    "fp16-ring": ("fp16", "allreduce", "ring", 1),
    "bf16-hier": ("bf16", "allreduce", "hierarchical", 1),
    "fp16-ps2": ("fp16", "allreduce", "ps", 2),
    "fp16-allgather": ("fp16", "allgather", "ring", 1),
    "fp16-reduce_scatter": ("fp16", "reduce_scatter", "ring", 1),
    "e4m3-allgather": ("fp8_e4m3", "allgather", "ring", 1),
    "e5m2-reduce_scatter": ("fp8_e5m2", "reduce_scatter", "ring", 1),
    "int8-allgather-hier": ("int8", "allgather", "hierarchical", 1),
    "int8-reduce_scatter-ps": ("int8", "reduce_scatter", "ps", 1),
}


def codec_scenario(shape: str, path: str, overlap: bool = True, *, precision: str = "fp32",
                   reduce_ns: float | None = None, error_feedback: bool = False, bucket_mib: float = 8,
                   layers: int = 6) -> Scenario:
    nodes, g, nics, over = SHAPES[shape]
    codec, codec_path, collective, servers = PATHS[path]
    strategy = {"collective": collective, "ps_servers": servers, "overlap": overlap, "bucket_mib": bucket_mib,
                "codec": codec, "codec_path": codec_path, "precision": precision, "error_feedback": error_feedback}
    if reduce_ns is not None:
        strategy["codec_reduce_ns_per_elem"] = reduce_ns
    return scenario_from_dict({
        "workload": {"layers": big_gradient_layers(layers), "batch_size": 4},
        "cluster": {"nodes": nodes, "gpus_per_node": g, "nics_per_node": nics, "oversubscription": over,
                    "intra_link": "nvlink2", "inter_link": "ib_edr"},
        "strategy": strategy,
        "catalog": {"links": alpha_beta_links("nvlink2", "ib_edr")},
        "simulation": {"fidelity": "detailed"},
    })


def assert_agree(s: Scenario) -> None:
    detailed = simulate(s)
    fast = simulate(replace(s, fidelity="fast"))
    assert detailed.fidelity == "detailed"
    assert detailed.iteration_time_s == pytest.approx(fast.iteration_time_s, rel=AGREEMENT_RTOL)
    assert detailed.comm_time_s == pytest.approx(fast.comm_time_s, rel=AGREEMENT_RTOL)
    assert detailed.codec_time_s == pytest.approx(fast.codec_time_s, rel=AGREEMENT_RTOL, abs=1e-15)
    for link in ("intra", "inter"):
        assert detailed.bytes_by_link[link] == pytest.approx(fast.bytes_by_link[link], rel=AGREEMENT_RTOL)
    assert [b.end_s for b in detailed.buckets] == pytest.approx([b.end_s for b in fast.buckets], rel=AGREEMENT_RTOL)


@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "no-overlap"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("shape", CODEC_SHAPES)
def test_detailed_agrees_with_fast_for_every_codec_path(shape, path, overlap):
    assert_agree(codec_scenario(shape, path, overlap))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("shape", ["2x4", "4x2-nics2-over2", "8x1"])
def test_codec_device_time_is_scheduled_where_it_happens(shape, path):
    """A costly local sum (inside the ring's reduce-scatter steps or after the gather), error
    feedback and fp16 compute: still the fast path's time, and the codec time is visible."""
    s = codec_scenario(shape, path, overlap=False, reduce_ns=0.5, error_feedback=True)
    assert_agree(s)
    assert run_detailed(s).codec_time_s > 0
    if PATHS[path][0] != "fp16":
        assert_agree(codec_scenario(shape, path, precision="fp16", reduce_ns=0.5, error_feedback=True))


def test_allgather_path_sends_and_receives_n_minus_1_encoded_tensors_per_rank():
    """fp8 through allgather: every rank sends and receives (n-1) S_c per bucket, whatever the shape."""
    result, net = run_detailed_with_network(codec_scenario("2x4", "e4m3-allgather"))
    codec = CODECS["fp8_e4m3"]
    per_rank = sum(7 * wire_bytes(b.n_bytes / 4, codec) for b in result.buckets)
    assert per_rank == pytest.approx(
        sum(per_rank_wire_bytes_closed_form(b.n_bytes / 4, 8, codec, "allgather") for b in result.buckets))
    for rank in range(8):
        assert net.sent_bytes[rank] == pytest.approx(per_rank, rel=1e-12)
        assert net.received_bytes[rank] == pytest.approx(per_rank, rel=1e-12)


@pytest.mark.parametrize("path", ["fp16-ring", "fp16-reduce_scatter", "int8-reduce_scatter-ps"])
def test_per_rank_bytes_match_the_closed_form(path):
    result, net = run_detailed_with_network(codec_scenario("4x2", path))
    codec, codec_path = PATHS[path][0], PATHS[path][1]
    expected = sum(per_rank_wire_bytes_closed_form(b.n_bytes / 4, 8, CODECS[codec], codec_path) for b in result.buckets)
    for rank in range(8):
        assert net.sent_bytes[rank] == pytest.approx(expected, rel=1e-12)
        assert net.received_bytes[rank] == pytest.approx(expected, rel=1e-12)


def test_compression_sends_fewer_bytes_and_fp8_by_allgather_grows_with_n():
    fp32 = run_detailed(codec_scenario("2x4", "fp32-ring")).bytes_by_link
    fp16 = run_detailed(codec_scenario("2x4", "fp16-ring")).bytes_by_link
    assert fp16["inter"] == pytest.approx(fp32["inter"] / 2, rel=1e-12)
    small = run_detailed(codec_scenario("1x4", "e4m3-allgather")).bytes_by_link["intra"]
    large = run_detailed(codec_scenario("2x4", "e4m3-allgather")).bytes_by_link
    # each of n ranks receives (n-1) S_c: 8 x 7 against 4 x 3
    assert sum(large.values()) == pytest.approx(small * 56 / 12, rel=1e-12)


def test_codec_spans_encode_on_the_compute_lane_decode_on_the_comm_lane():
    """DDP's hook encodes on the backward thread before the collective; the decode follows it."""
    result = run_detailed(codec_scenario("2x4", "e4m3-allgather"))
    comm = {span.name for span in result.spans if span.lane == "rank0/comm"}
    compute = {span.name for span in result.spans if span.lane == "rank0/compute"}
    assert "decode + sum" in comm and "encode" not in comm
    assert {f"encode bucket {b.index}" for b in result.buckets} <= compute


def test_tree_with_a_codec_that_needs_it_is_refused_naming_fast():
    s = codec_scenario("2x4", "fp16-ring")
    s = replace(s, strategy=replace(s.strategy, collective="tree"))
    with pytest.raises(ConfigError, match="fast for collective=tree"):
        run_detailed(s)
    # the allgather path does not use the collective: a flat ring over all ranks, as the cost layer
    gathered = replace(s, strategy=replace(s.strategy, codec="int8", codec_path="allgather"))
    assert_agree(gathered)


def test_layer_placed_parameter_servers_are_refused_naming_fast():
    s = codec_scenario("2x4", "fp16-ps2")
    with pytest.raises(ConfigError, match="ps_placement=round_robin"):
        run_detailed(replace(s, strategy=replace(s.strategy, ps_placement="round_robin")))


# -- properties -----------------------------------------------------------------------------

shapes = st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 2), st.sampled_from([1.0, 1.5, 2.0]))
paths = st.sampled_from(list(PATHS))


def random_scenario(shape, path, overlap, reduce_ns, error_feedback, precision) -> Scenario:
    nodes, g, nics, over = shape
    s = codec_scenario("1x4", path, overlap, precision=precision, reduce_ns=reduce_ns, error_feedback=error_feedback,
                       bucket_mib=5, layers=3)
    return replace(s, cluster=replace(s.cluster, nodes=nodes, gpus_per_node=g, nics_per_node=nics,
                                      oversubscription=over))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes, paths, st.booleans(), st.sampled_from([None, 0.0, 0.3]), st.booleans(),
       st.sampled_from(["fp32", "bf16"]))
def test_fast_and_detailed_agree_on_random_shapes_and_codecs(shape, path, overlap, reduce_ns, error_feedback, precision):
    assert_agree(random_scenario(shape, path, overlap, reduce_ns, error_feedback, precision))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes, paths)
def test_every_rank_receives_what_it_sends(shape, path):
    result, net = run_detailed_with_network(random_scenario(shape, path, True, None, False, "fp32"))
    for endpoint in set(net.sent_bytes) | set(net.received_bytes):
        assert net.sent_bytes[endpoint] == pytest.approx(net.received_bytes[endpoint], rel=1e-12)
    assert sum(net.sent_bytes.values()) == pytest.approx(sum(result.bytes_by_link.values()), rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("path", ["fp16-ring", "bf16-hier", "e4m3-allgather", "int8-reduce_scatter-ps"])
def test_detailed_agrees_with_fast_at_64_ranks(path):
    """8 nodes x 8 GPUs, 2 NICs, oversubscription 2: a few seconds each."""
    s = codec_scenario("2x4", path)
    assert_agree(replace(s, cluster=replace(s.cluster, nodes=8, gpus_per_node=8, nics_per_node=2, oversubscription=2.0)))
