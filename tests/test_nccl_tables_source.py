"""Each NCCL table set against NCCL's source at its commit.

tests/data/nccl/tables.json holds, per release tag, the numbers scripts/extract_nccl_tables.py read
mechanically out of NVIDIA/nccl at that tag (each item: file, line range, SHA-256 of those source
lines, the numeric literals in source order). This test rebuilds every table of
sim/costs/backends/nccl_tables.py from those numbers with the source's own array layout and
indexing (tuning.cc: [algorithm][protocol] with algorithms Tree, Ring, CollNetDirect, CollNetChain,
NVLS, NVLSTree and protocols LL, LL128, Simple; hwLat [NVLink, PCI, Net] first) and requires
equality: a number typed wrong in the model, or a table claiming the wrong release, fails here.
``python scripts/extract_nccl_tables.py --nccl DIR --check`` re-reads the source itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.costs.backends import nccl_tables as T

DATA = json.loads((Path(__file__).parent / "data" / "nccl" / "tables.json").read_text(encoding="utf-8"))
SOURCE_ALGOS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree")
HW = ("nvlink", "pci", "net")
TUNING_ERA = {"v2.18.5-1": T.V2_18_5, "v2.20.5-1": T.V2_20_5, "v2.21.5-1": T.V2_21_5}


def items(tag: str) -> dict[str, list[float]]:
    return {name: item["numbers"] for name, item in DATA["releases"][tag]["items"].items()}


def lat_table(numbers: list[float], algos: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """A C array [algorithm][protocol] (LL, LL128, Simple) as {algorithm: {protocol: value}}."""
    assert len(numbers) == 3 * len(algos)
    return {a: dict(zip(T.PROTOCOLS, numbers[3 * i:3 * i + 3], strict=True)) for i, a in enumerate(algos)}


def rows3(numbers: list[float]) -> tuple[tuple[float, ...], ...]:
    assert len(numbers) == 9
    return tuple(tuple(numbers[3 * i:3 * i + 3]) for i in range(3))


@pytest.mark.parametrize("tag", sorted(DATA["releases"]))
def test_every_modelled_release_names_the_commit_of_its_tag(tag):
    sets = {f"v{t.release}-1": t for t in T.TABLE_SETS}
    if tag in sets:
        assert sets[tag].commit == DATA["releases"][tag]["commit"]
    for item in DATA["releases"][tag]["items"].values():
        assert len(item["sha256"]) == 64 and item["lines"][0] <= item["lines"][1]


@pytest.mark.parametrize("tag", sorted(TUNING_ERA))
def test_tuning_model_tables_are_the_sources(tag):
    t, src = TUNING_ERA[tag], items(tag)
    base = lat_table(src["baseLat"], SOURCE_ALGOS)
    assert {a: t.base_lat_us[a] for a in T.ALGORITHMS} == {a: base[a] for a in T.ALGORITHMS}
    hw = src["hwLat"]
    for i, name in enumerate(HW):
        table = lat_table(hw[18 * i:18 * i + 18], SOURCE_ALGOS)
        assert {a: t.hw_lat_us[name][a] for a in T.ALGORITHMS} == {a: table[a] for a in T.ALGORITHMS}, name
    assert t.ll_max_bw == rows3(src["llMaxBws"])
    assert t.per_ch_max_ring_ll128_bw == rows3(src["perChMaxRingLL128Bws"])
    assert t.per_ch_max_tree_ll128_bw == rows3(src["perChMaxTreeLL128Bws"])
    assert t.per_ch_max_tree_bw == rows3(src["perChMaxTreeBws"])
    correction = src["treeCorrectionFactor"]
    assert t.tree_correction == {p: tuple(correction[23 * i:23 * i + 23]) for i, p in enumerate(T.PROTOCOLS)}
    assert t.speed_intra == tuple(src["speedArrayIntra"]) and t.speed_inter == tuple(src["speedArrayInter"])
    assert t.sm90_speed_intra == tuple(src["sm90SpeedArrayIntra"])
    assert t.sm90_speed_inter == tuple(src["sm90SpeedArrayInter"])
    assert [t.net_overhead_us] == src["netOverheadIntel"]
    assert [80.0, t.ring_plateau["volta"], t.ring_plateau["ampere+"]] == src["ringPlateau"]
    factor = src["ringLLFactor"]  # 2.18-2.20: '? 1.0/4.0 : 1.0/3.0'; 2.21: 'busBw * .5'
    expected = (factor[-4] / factor[-3], factor[-2] / factor[-1]) if len(factor) == 5 else (factor[0], factor[0])
    assert t.ring_ll_factor == pytest.approx(expected, rel=1e-12)
    assert [t.dup_min_bw] == src["dupMinBw"] and list(t.dup_hopper_exception) == src["dupHopperException"]


@pytest.mark.parametrize("tag", sorted(TUNING_ERA))
def test_topology_buffers_and_sockets_are_the_sources(tag):
    t, src = TUNING_ERA[tag], items(tag)
    nvlink = dict(t.nvlink_bw_by_cc)
    for cc, name in ((6.0, "SM60"), (7.0, "SM70"), (8.0, "SM80"), (8.6, "SM86"), (9.0, "SM90")):
        assert [nvlink[cc]] == src[f"{name}_NVLINK_BW"], name
        assert t.nvlink_bw_GBps(cc) == nvlink[cc]
    assert [t.pci_bw] == src["PCI_BW"]
    assert [t.nccl_steps] == src["NCCL_STEPS"] and [t.max_channels] == src["MAXCHANNELS"]
    assert [t.max_threads["Simple"]] == src["NCCL_SIMPLE_MAX_NTHREADS"]
    assert [t.max_threads["LL"]] == src["NCCL_LL_MAX_NTHREADS"]
    assert [t.max_threads["LL128"]] == src["NCCL_LL128_MAX_NTHREADS"]
    shift = src["defaultBuffsize"]
    assert t.simple_buffsize_bytes == int(shift[0]) << int(shift[1])
    # LL: NCCL_LL_LINES_PER_THREAD x NCCL_LL_MAX_NTHREADS 16-byte lines per step, half of it data
    lines = src["NCCL_LL_LINES_PER_THREAD"][0] * src["NCCL_LL_MAX_NTHREADS"][0]
    assert t.chunk_bytes["LL"] == lines * 16 / 2
    assert t.chunk_bytes["Simple"] == t.simple_buffsize_bytes / t.nccl_steps * (t.nccl_steps // 2)  # ALLREDUCE_CHUNKSTEPS
    chunk = src["p2pNetChunkSize"]
    assert t.p2p_net_chunk_bytes == int(chunk[0]) << int(chunk[1])
    assert [t.socket.max_sockets] == src["MAX_SOCKETS"] and [t.socket.max_threads] == src["MAX_THREADS"]
    assert list(t.socket.default) == src["autoDefault"]
    assert list(t.socket.by_vendor["aws"]) == src["awsNt"][-2:] and list(t.socket.by_vendor["gcp"]) == src["gcpNt"][-2:]
    if "nchannelsPerNetPeer" in src:
        assert [t.p2p_channels_per_net_peer] == src["nchannelsPerNetPeer"]


def test_the_ring_era_is_2_3_7s_source_and_2_5_6s_latencies():
    t, src, lat = T.V2_3_7, items("v2.3.7-1"), items("v2.5.6-1")
    assert [t.max_channels] == src["MAXRINGS"] and [t.ll_max_nthreads] == src["NCCL_LL_MAX_NTHREADS"]
    assert t.max_threads == {"LL": src["MAXTHREADS"][0], "Simple": src["MAXTHREADS"][0]}
    assert list(t.ll_thread_threshold) == src["NCCL_THREAD_THRESHOLD_PREVOLTA"] + src["NCCL_THREAD_THRESHOLD"]
    assert [t.ll_multi_node_factor] == src["threadThresholdMultiNode"]
    assert t.simple_buffsize_bytes == 1 << int(src["defaultBuffsize"][0])
    bufchunks, substeps = src["ALLREDUCE_BUFCHUNKS"][0], src["ALLREDUCE_SUBSTEPS"][0]
    assert t.nccl_steps == bufchunks * substeps and t.chunk_bytes["Simple"] == t.simple_buffsize_bytes / bufchunks
    ll_buffer = src["NUM_LINES_PER_THREAD"][0] * src["NCCL_LL_MAX_NTHREADS"][0] * src["NCCL_LL_CHUNKS"][0] * 16
    assert t.chunk_bytes["LL"] == ll_buffer / src["NCCL_LL_CHUNKS"][0] / 2 and t.window_bytes["LL"] == ll_buffer / 2
    base = lat_table(lat["baseLat"], ("tree", "ring"))
    hw = lat["hwLat"]
    for table in (T.V2_3_7, T.V1_3_4):
        assert {a: table.base_lat_us[a] for a in ("tree", "ring")} == base
        for i, name in enumerate(HW):
            assert {a: table.hw_lat_us[name][a] for a in ("tree", "ring")} == lat_table(hw[6 * i:6 * i + 6], ("tree", "ring"))
    assert T.V1_3_4.simple_buffsize_bytes == 1 << int(items("v1.3.4-1")["defaultBuffsize"][0])


def test_a_version_the_model_does_not_know_is_refused_with_the_list():
    from sim.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        T.tables_for("2.10")
    assert "1.3, 2.0, 2.1, 2.2, 2.3, 2.18, 2.19, 2.20, 2.21" in str(err.value)
    assert T.tables_for(None) is T.NCCL_VERSIONS[T.DEFAULT_NCCL_VERSION] is T.V2_21_5
