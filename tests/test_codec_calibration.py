"""Calibrated codec costs: the per-element encode/decode terms against their formulas, where the
encode runs (the compute stream, at the hand-off), the strategy fields' validation, and the
microbenchmark's parsing (real/codec_bench.py) on synthetic rows."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from real.codec_bench import CODEC_OPS_FILE, codec_ops_for, op_costs_ns
from sim.codecs import CODECS
from sim.config import scenario_from_dict
from sim.costs.codecs import compressed_sync, decode_sum_time_s, encode_time_s
from sim.engine.plan import build_plan
from sim.errors import ConfigError
from sim.simulate import simulate
from sim.strategy import strategy_from_dict
from tests.test_codecs import GPU, one_node

E4M3, FP16 = CODECS["fp8_e4m3"], CODECS["fp16"]


def test_calibrated_encode_is_elems_times_ns_and_replaces_the_roofline():
    assert encode_time_s(1_000_000, 4, E4M3, GPU, 6.5) == pytest.approx(1e6 * 6.5e-9, rel=1e-12)
    assert encode_time_s(1_000_000, 4, E4M3, GPU) == pytest.approx(1e6 * (4 + 1 + 4) / 1e12, rel=1e-12)
    assert encode_time_s(1_000_000, 4, CODECS["fp32"], GPU, 6.5) == 0.0  # identity: nothing to encode


def test_calibrated_decode_is_copies_times_elems_times_ns_without_the_reduce_term():
    """The measured decode includes the fp32 add, so the reduce cost is not charged again."""
    assert decode_sum_time_s(1000, 3, 4, E4M3, GPU, 5.0, 20.0) == pytest.approx(3 * 1000 * 20e-9, rel=1e-12)
    roofline = decode_sum_time_s(1000, 3, 4, E4M3, GPU, 5.0)
    assert roofline == pytest.approx(3 * 1000 * (1 + 8) / 1e12 + 3 * 1000 * 5e-9, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 64), elems=st.integers(1, 10**8), enc=st.floats(0, 50), dec=st.floats(0, 50),
       feedback=st.booleans())
def test_allgather_path_with_calibration(n, elems, enc, dec, feedback):
    """codec_s = E enc + n E dec (+ feedback); the encode (and feedback) is before the hand-off."""
    sync = compressed_sync(elems, 4, E4M3, "allgather", one_node(n), gpu=GPU, error_feedback=feedback,
                           encode_ns_per_elem=enc, decode_ns_per_elem=dec)
    feedback_s = elems * (3 * 4 + 1) / 1e12 if feedback else 0.0
    assert sync.encode_s == pytest.approx(elems * enc * 1e-9 + feedback_s, rel=1e-9, abs=1e-18)
    assert sync.codec_s == pytest.approx(sync.encode_s + n * elems * dec * 1e-9, rel=1e-9, abs=1e-18)
    assert sync.after_handoff_s == pytest.approx(sync.network_s + n * elems * dec * 1e-9, rel=1e-9, abs=1e-15)


def test_allreduce_path_with_calibration_keeps_the_in_collective_sum():
    n, elems = 4, 1_000_000
    sync = compressed_sync(elems, 4, FP16, "allreduce", one_node(n), gpu=GPU, reduce_ns_per_elem=6.0,
                           encode_ns_per_elem=1.5, decode_ns_per_elem=0.7)
    assert sync.encode_s == pytest.approx(elems * 1.5e-9, rel=1e-12)
    assert sync.codec_s == pytest.approx(elems * (1.5 + 0.7) * 1e-9 + (n - 1) / n * elems * 6e-9, rel=1e-12)


def test_reduce_scatter_encodes_after_the_collective_so_nothing_precedes_the_hand_off():
    sync = compressed_sync(1e6, 4, E4M3, "reduce_scatter", one_node(4), gpu=GPU, error_feedback=True,
                           encode_ns_per_elem=6.0, decode_ns_per_elem=10.0)
    assert sync.encode_s == 0.0
    assert sync.codec_s == pytest.approx(1e6 / 4 * 6e-9 + 1e6 * 10e-9 + 1e6 * 13 / 1e12, rel=1e-12)


@pytest.mark.parametrize("value", [-1.0, "fast", True, float("nan"), float("inf")])
@pytest.mark.parametrize("key", ["codec_encode_ns_per_elem", "codec_decode_ns_per_elem"])
def test_bad_calibrated_costs_are_config_errors_naming_the_field(key, value):
    with pytest.raises(ConfigError, match=key):
        strategy_from_dict({"codec": "fp16", key: value})


@pytest.mark.parametrize("key", ["codec_encode_ns_per_elem", "codec_decode_ns_per_elem"])
def test_calibrated_costs_need_a_codec(key):
    with pytest.raises(ConfigError, match="only with a codec"):
        strategy_from_dict({key: 1.0})


def test_calibrated_costs_default_to_the_roofline_and_accept_zero():
    assert strategy_from_dict({"codec": "fp16"}).codec_encode_ns_per_elem is None
    s = strategy_from_dict({"codec": "fp8_e4m3", "codec_encode_ns_per_elem": 0, "codec_decode_ns_per_elem": 12})
    assert (s.codec_encode_ns_per_elem, s.codec_decode_ns_per_elem) == (0.0, 12.0)


def _scenario(**strategy):
    layers = [{"name": f"l{i}", "param_count": p, "fwd_flops": 1e9, "activation_elems": 100}
              for i, p in enumerate((2_000_000, 2_000_000, 2_000_000))]
    return scenario_from_dict({
        "workload": {"layers": layers, "batch_size": 8},
        "cluster": {"gpus": 2, "gpus_per_node": 2, "gpu": "v100", "intra_link": "nvlink2", "inter_link": "ib_edr"},
        "strategy": {"bucket_mib": 7.0, "comm_slows_compute": False, **strategy},
        "variability": {"stragglers": False}})  # the codec's own timeline, nothing else slowing compute


def test_encode_holds_the_compute_stream_and_the_collective_starts_after_it():
    """DDP calls the hook from its autograd hook: the encode delays the rest of backward, and
    the bucket's comm starts only after its encode; the comm stream carries the rest."""
    enc_ns = 400.0  # 0.8 ms per 2M-element bucket: larger than a layer's backward here
    s = _scenario(codec="fp8_e4m3", codec_encode_ns_per_elem=enc_ns, codec_decode_ns_per_elem=30.0)
    plan = build_plan(s)
    result = simulate(s)
    assert len(plan.buckets) == 3
    for bucket, encode_s, comm_s, codec_s in zip(plan.buckets, plan.bucket_encode_s, plan.bucket_comm_s,
                                                 plan.bucket_codec_s, strict=True):
        assert encode_s == pytest.approx(bucket.n_bytes / 4 * enc_ns * 1e-9, rel=1e-12)
        full = compressed_sync(bucket.n_bytes / 4, 4, E4M3, "allgather", s.cluster, gpu=s.cluster.gpu,
                               encode_ns_per_elem=enc_ns, decode_ns_per_elem=30.0)
        assert comm_s == pytest.approx(full.time_s - encode_s, rel=1e-12)
        assert codec_s == pytest.approx(full.codec_s, rel=1e-12)
    spans = {sp.name: sp for sp in result.spans}
    for b in result.buckets:
        encode = spans[f"encode bucket {b.index}"]
        assert encode.lane == "compute" and encode.start_s == pytest.approx(b.ready_s)
        assert b.start_s >= encode.end_s - 1e-15
    backward = sum(plan.bwd_s)
    # the compute stream's backward is stretched by the encodes of the buckets before the last layer
    last_bwd = spans["bwd l0"]
    assert last_bwd.end_s == pytest.approx(sum(plan.fwd_s) + backward + sum(plan.bucket_encode_s[:-1]), rel=1e-9)
    assert result.compute_time_s == pytest.approx(plan.compute_s)  # compute-only time stays codec-free


def _rows():
    rows = []
    for world in (2, 4):
        for elems, factor in ((2**17, 1.0), (2**19, 1.2), (2**21, 0.9)):
            rows.append({"codec": "fp16", "path": "allreduce", "elems": elems, "world": world,
                         "encode_s": elems * 2e-9 * factor, "decode_s": elems * 0.5e-9 * factor})
            rows.append({"codec": "fp8_e4m3", "path": "allgather", "elems": elems, "world": world,
                         "encode_s": elems * 6e-9 * factor, "decode_s": world * elems * 12e-9 * factor})
    return rows


def test_op_costs_divide_by_elements_and_decoded_copies_median_over_sizes():
    costs = op_costs_ns([r for r in _rows() if r["world"] == 4])
    assert costs["fp16"] == pytest.approx({"encode_ns_per_elem": 2.0, "decode_ns_per_elem": 0.5})
    assert costs["fp8_e4m3"] == pytest.approx({"encode_ns_per_elem": 6.0, "decode_ns_per_elem": 12.0})


def test_codec_ops_for_reads_the_nearest_world_size(tmp_path):
    assert codec_ops_for(tmp_path, "fp16", 2) is None
    data = {"world_sizes": {w: {"ns_per_elem": op_costs_ns([r for r in _rows() if r["world"] == w])} for w in (2, 4)}}
    data["world_sizes"][4]["ns_per_elem"]["fp16"]["encode_ns_per_elem"] = 3.0
    (tmp_path / CODEC_OPS_FILE).write_text(yaml.safe_dump(data))
    assert codec_ops_for(tmp_path, "fp16", 2)["encode_ns_per_elem"] == pytest.approx(2.0)
    assert codec_ops_for(tmp_path, "fp16", 8)["encode_ns_per_elem"] == pytest.approx(3.0)
    assert codec_ops_for(tmp_path, "int8", 2) is None
    # beyond the measured world sizes, processor sharing: 8 ranks on 2 cores run 2x slower than 4
    assert codec_ops_for(tmp_path, "fp16", 8, cores=2)["encode_ns_per_elem"] == pytest.approx(6.0)
    assert codec_ops_for(tmp_path, "fp16", 4, cores=2)["encode_ns_per_elem"] == pytest.approx(3.0)


def test_validation_scenario_takes_the_calibrated_codec_costs(tmp_path):
    from real.calibrated_links import calibrated_catalog
    from sim.calibration import load_calibration
    from tests.test_validation import _calibration
    from validation.config import Point
    from validation.points import sim_scenario

    cal_dir = tmp_path / "cal"
    _calibration(cal_dir)
    (cal_dir / CODEC_OPS_FILE).write_text(yaml.safe_dump(
        {"world_sizes": {2: {"ns_per_elem": op_costs_ns([r for r in _rows() if r["world"] == 2])}}}))
    cal = load_calibration(cal_dir)
    point = Point(group="t", model="mlp", batch_size=64, ranks=2, link="loopback", strategy="ddp",
                  overlap=True, bucket_mib=25.0, codec="fp8", microbatches=4)
    strategy = sim_scenario(point, cal, calibrated_catalog(cal)).strategy
    assert (strategy.codec, strategy.codec_encode_ns_per_elem, strategy.codec_decode_ns_per_elem) == \
        ("fp8_e4m3", pytest.approx(6.0), pytest.approx(12.0))


def test_first_bucket_cap_defaults_to_ddp_and_can_equal_the_bucket_cap():
    """torch gives the first bucket DDP's 1 MiB only when bucket_cap_mb is unset; the harness sets
    it, and its DDP logs one bucket for a 2.5 MiB gradient at 25 MiB (measured, buckets = 1)."""
    default = build_plan(_scenario(bucket_mib=25.0))
    explicit = build_plan(_scenario(bucket_mib=25.0, first_bucket_mib=25.0))
    assert [len(b.layers) for b in default.buckets] == [1, 2]  # 1 MiB first bucket, then the rest
    assert [len(b.layers) for b in explicit.buckets] == [3]
    with pytest.raises(ConfigError, match="first_bucket_mib"):
        strategy_from_dict({"first_bucket_mib": 0})


@pytest.mark.parametrize(("codec", "wire"), [("fp8", "gloo_loopback_n2_allgather"), ("fp16", "gloo_loopback_n2"),
                                             ("fp32", "gloo_loopback_n2")])
def test_validation_uses_the_fit_of_the_collective_the_hook_runs(tmp_path, codec, wire):
    from real.calibrated_links import calibrated_catalog
    from sim.calibration import load_calibration
    from tests.test_validation import _calibration_with_fit
    from validation.config import Point
    from validation.points import sim_scenario

    cal_dir = tmp_path / "cal"
    _calibration_with_fit(cal_dir, collective="allgather", link_bandwidth_GBps=0.5)
    cal = load_calibration(cal_dir)
    point = Point(group="t", model="mlp", batch_size=64, ranks=2, link="loopback", strategy="ddp",
                  overlap=True, bucket_mib=25.0, codec=codec, microbatches=4)
    scenario = sim_scenario(point, cal, calibrated_catalog(cal))
    assert scenario.cluster.intra_link.name == wire
    assert scenario.strategy.first_bucket_bytes == scenario.strategy.bucket_bytes
