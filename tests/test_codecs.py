"""Compression codecs: wire bytes against closed forms, paths, the fp8/fp16 crossover, registry."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sim.cluster import Cluster
from sim.codecs import CODEC_PATHS, CODECS, Codec
from sim.config import scenario_from_dict
from sim.costs.codecs import (
    compressed_sync,
    crossover_ranks,
    per_rank_wire_bytes_closed_form,
    wire_bytes,
)
from sim.errors import ConfigError
from sim.simulate import simulate
from tests.conftest import make_gpu, make_link

GPU = make_gpu(mem_GBps=1000.0)
LINK = make_link(bandwidth_Bps=1e9, latency_s=1e-5)


def one_node(n: int) -> Cluster:
    return Cluster(nodes=1, gpus_per_node=n, gpu=GPU, intra_link=LINK, inter_link=LINK)


def layers_spec(params=(1_000_000, 2_000_000, 3_000_000)):
    return [{"name": f"l{i}", "param_count": p, "fwd_flops": 1e6, "activation_elems": 100} for i, p in enumerate(params)]


def scenario(gpus: int = 8, **strategy):
    return scenario_from_dict({
        "workload": {"layers": layers_spec(), "batch_size": 8},
        "cluster": {"gpus": gpus, "gpus_per_node": 8, "gpu": "v100", "intra_link": "nvlink2", "inter_link": "ib_edr"},
        "strategy": strategy,
    })


@pytest.mark.parametrize("name", sorted(CODECS))
def test_wire_bytes_closed_form(name):
    codec = CODECS[name]
    assert wire_bytes(1000, codec) == 1000 * codec.bytes_per_elem + codec.scale_bytes
    expected = {"fp32": 4000, "fp16": 2000, "bf16": 2000, "fp8_e4m3": 1004, "fp8_e5m2": 1004, "int8": 1004}
    assert wire_bytes(1000, codec) == expected[name]


@pytest.mark.parametrize("path", CODEC_PATHS)
@pytest.mark.parametrize("n", [2, 3, 8])
def test_path_bytes_match_closed_form(path, n):
    codec = CODECS["fp16"] if path == "allreduce" else CODECS["fp8_e4m3"]
    elems = 12_000
    sync = compressed_sync(elems, 4, codec, path, one_node(n), gpu=GPU)
    per_rank = per_rank_wire_bytes_closed_form(elems, n, codec, path)
    assert sync.bytes_by_link["intra"] == pytest.approx(n * per_rank, rel=1e-12)


def test_allgather_time_closed_form():
    """(n-1)(alpha + S_c/B) on the wire, plus encode and n decodes+sums (its own copy too) on memory bandwidth."""
    n, elems = 8, 1_000_000
    codec = CODECS["fp8_e4m3"]
    sync = compressed_sync(elems, 4, codec, "allgather", one_node(n), gpu=GPU)
    s_c = elems + 4
    assert sync.network_s == pytest.approx((n - 1) * (1e-5 + s_c / 1e9), rel=1e-12)
    encode = (elems * (4 + 1) + elems * 4) / 1e12
    decode = n * elems * (1 + 8) / 1e12
    assert sync.codec_s == pytest.approx(encode + decode, rel=1e-12)


def test_fp16_through_the_fast_path_moves_half_the_bytes():
    base = simulate(scenario(gpus=8))
    half = simulate(scenario(gpus=8, codec="fp16"))
    assert half.bytes_by_link["intra"] == pytest.approx(base.bytes_by_link["intra"] / 2, rel=1e-12)
    # closed form: ring allreduce of 2 bytes/param over 8 GPUs, every rank sends 2(n-1)/n S_c
    params = 6_000_000
    assert half.bytes_by_link["intra"] == pytest.approx(8 * 2 * 7 / 8 * 2 * params, rel=1e-12)
    assert half.codec_time_s > 0 and base.codec_time_s == 0
    assert half.metrics()["codec_time_s"] == half.codec_time_s


def test_fp8_through_the_fast_path_default_is_allgather():
    sim8 = simulate(scenario(gpus=8, codec="fp8_e4m3"))
    buckets = len(sim8.buckets)
    assert sim8.bytes_by_link["intra"] == pytest.approx(8 * 7 * (6_000_000 + 4 * buckets), rel=1e-12)


def test_one_gpu_communicates_nothing():
    for codec in CODECS:
        result = simulate(scenario(gpus=1, codec=codec, error_feedback=True))
        assert result.bytes_by_link == {"intra": 0.0, "inter": 0.0}
        assert result.comm_time_s == 0 and result.codec_time_s == 0


@settings(max_examples=60, deadline=None)
@given(elems=st.integers(2, 10**8), n=st.integers(2, 512), path=st.sampled_from(CODEC_PATHS),
       name=st.sampled_from(sorted(CODECS)))
def test_compression_never_increases_wire_bytes(elems, n, path, name):
    """On the same path, any codec sends at most what fp32 sends, as long as every encoded tensor
    (the whole bucket, or a reduce-scatter shard of elems/n) has at least 2 elements: one fp8
    element + its 4-byte scale is 5 bytes > 4. Hence elems >= 2n."""
    assume(elems >= 2 * n)
    codec = CODECS[name]
    if path == "allreduce" and not codec.summable:
        return
    sync = compressed_sync(elems, 4, codec, path, one_node(n), gpu=GPU)
    plain = compressed_sync(elems, 4, CODECS["fp32"], path, one_node(n), gpu=GPU)
    assert sync.bytes_by_link["intra"] <= plain.bytes_by_link["intra"] * (1 + 1e-12)


def test_crossover_fp8_allgather_loses_to_fp16_allreduce():
    """fp8 by allgather moves (n-1) S/4 per rank, fp16 by ring 2(n-1)/n S/2 = (n-1)/n S: the
    bandwidth terms cross at n = 4; latency favours the allgather ((n-1) vs 2(n-1) alphas)."""
    elems = 50_000_000  # 200 MB of fp32 gradients: bandwidth-bound
    n_star = crossover_ranks(elems, one_node, GPU, slow=(CODECS["fp8_e4m3"], "allgather"),
                             fast=(CODECS["fp16"], "allreduce"), ranks=range(2, 65))
    # closed form over the same n: first n where (n-1)(a + S8/B) + c8(n) > 2(n-1)(a + S16/(nB)) + c16
    def t8(n):
        s8 = elems + 4
        return (n - 1) * (1e-5 + s8 / 1e9) + (elems * 9 + (n - 1) * elems * 9) / 1e12

    def t16(n):
        return 2 * (n - 1) * (1e-5 + 2 * elems / n / 1e9) + (elems * 6 + elems * 10) / 1e12

    expected = next(n for n in range(2, 65) if t8(n) > t16(n))
    assert n_star == expected
    assert 4 <= n_star <= 6
    # below the crossover fp8 wins, above it fp16 does
    assert t8(n_star - 1) <= t16(n_star - 1) and t8(64) > t16(64)


def test_cpu_fp16_sums_can_make_fewer_bytes_slower():
    """DESIGN.md: on gloo/CPU fp16 sums are slower than fp32; a per-element cost shows it."""
    n, elems = 4, 1_000_000
    plain = compressed_sync(elems, 4, CODECS["fp32"], "allreduce", one_node(n), gpu=GPU)
    cpu16 = compressed_sync(elems, 4, CODECS["fp16"], "allreduce", one_node(n), gpu=GPU, reduce_ns_per_elem=5.0)
    gpu16 = compressed_sync(elems, 4, CODECS["fp16"], "allreduce", one_node(n), gpu=GPU)
    assert gpu16.time_s < plain.time_s < cpu16.time_s
    assert cpu16.codec_s - gpu16.codec_s == pytest.approx((n - 1) / n * elems * 5e-9, rel=1e-9)


def test_error_feedback_costs_one_more_pass():
    n, elems = 4, 1_000_000
    without = compressed_sync(elems, 4, CODECS["int8"], "allgather", one_node(n), gpu=GPU)
    with_ef = compressed_sync(elems, 4, CODECS["int8"], "allgather", one_node(n), gpu=GPU, error_feedback=True)
    assert with_ef.codec_s - without.codec_s == pytest.approx(elems * (3 * 4 + 1) / 1e12, rel=1e-9)


def test_a_new_codec_is_one_registry_entry(monkeypatch):
    monkeypatch.setitem(CODECS, "fp4", Codec(name="fp4", bytes_per_elem=0.5, scale_bytes=4, summable=False))
    result = simulate(scenario(gpus=8, codec="fp4"))
    eight = simulate(scenario(gpus=8, codec="int8"))
    assert result.bytes_by_link["intra"] < eight.bytes_by_link["intra"]


@pytest.mark.parametrize("strategy, field", [
    ({"codec": "fp7"}, "strategy.codec"),
    ({"codec": "fp8_e4m3", "codec_path": "allreduce"}, "strategy.codec_path"),
    ({"codec": "fp16", "codec_path": "broadcast"}, "strategy.codec_path"),
    ({"codec_path": "allgather"}, "strategy.codec_path"),
])
def test_bad_codec_input_is_one_line_config_error(strategy, field):
    with pytest.raises(ConfigError) as err:
        scenario(**strategy)
    assert err.value.field == field and "\n" not in str(err.value)
