"""NCCL's model: its tuner against tuning.cc's own formulas, its kernels' chunking and NVLS
pipeline against their closed forms, invariants, and the devset's single-node busbw curves."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.catalog import builtin_catalog
from sim.cluster import cluster_from_dict
from sim.costs.backends import BUSBW_FACTOR, CommOptions, comm_cost, nccl
from sim.costs.backends import nccl_pipeline as P
from sim.costs.backends.nccl_tables import tables_for
from validation.devset import DEVSET_DIR, busbw_predictions

CAT = builtin_catalog()
MIB = 2**20


def node(gpu: str = "a100", link: str = "nvlink3", g: int = 8, nodes: int = 1, inter: str = "ib_hdr"):
    spec = {"nodes": nodes, "gpus_per_node": g, "gpu": gpu, "intra_link": link}
    if nodes > 1:
        spec["inter_link"] = inter
    return cluster_from_dict(spec, CAT)


A100, H200 = node(), node("h200", "nvlink4")

# -- the tuner against tuning.cc, written out by hand ----------------------------------------
# A100, 8 GPUs on NVSwitch: 12 NVLinks x 20 GB/s (topo.h SM80) = 240 GB/s; the ring search takes
# 6 channels at 40 GB/s, duplicated to 12 at 20 (search.cc): busBw 240. nsteps = 2(n-1) = 14.
# Ring LL's busBw: 2.20 x 1/4 = 60; 2.21 x 0.5 = 120, both capped at llMaxBws[Ampere][1 node] 87.7.
RING_US = {  # (latency us, busBw GB/s): tuning.cc baseLat + 14 hwLat(NVLink), refinements; the default (2.21)
    "LL": (6.6 + 14 * 0.6, min(87.7, 240 * 0.5)),
    "LL128": (14.0 + 14 * 1.9, min(240 * 0.92, 12 * 20.0)),
    "Simple": (8.4 + 14 * 3.4, 240.0),
}
RING_US_2_20 = {**RING_US, "LL": (6.6 + 14 * 0.6, min(87.7, 240 / 4))}
# v2.18.5-1, the release the devset's A100 curve names: the same as 2.20 here (tuning.cc:56-59 baseLat,
# 65-67 hwLat NVLink, 88 llMaxBws Ampere-N1 87.7, 94 perChMaxRingLL128Bws Ampere 20, 178-179 LL x 1/4
# and LL128 x 0.92; compCapIndex 1 for sm80, tuning.cc:139)
RING_US_2_18 = {**RING_US, "LL": (6.6 + 14 * 0.6, min(87.7, 240 / 4))}


def ring_model_us(proto: str, n_bytes: float, table: dict = RING_US) -> float:
    lat, bus = table[proto]
    return lat + n_bytes / (1000 * bus * 8 / 14)


def crossover_bytes(a: str, b: str, table: dict = RING_US) -> float:
    (la, ba), (lb, bb) = table[a], table[b]
    return (lb - la) / (1 / (ba * 8 / 14) - 1 / (bb * 8 / 14)) * 1000


@pytest.mark.parametrize("proto", ["LL", "LL128", "Simple"])
@pytest.mark.parametrize("size", [1024, MIB, 64 * MIB])
def test_nccl_model_time_is_tuning_cc_by_hand(proto, size):
    assert nccl.model_time_us("allreduce", size, A100, "ring", proto) == pytest.approx(ring_model_us(proto, size), rel=1e-9)
    v2_20 = tables_for("2.20")
    assert nccl.model_time_us("allreduce", size, A100, "ring", proto, v2_20) == pytest.approx(
        ring_model_us(proto, size, RING_US_2_20), rel=1e-9)
    assert nccl.model_time_us("allreduce", size, A100, "ring", proto, tables_for("2.18")) == pytest.approx(
        ring_model_us(proto, size, RING_US_2_18), rel=1e-9)


@pytest.mark.parametrize("version,table", [(None, RING_US), ("2.18", RING_US_2_18)])
@pytest.mark.parametrize("a,b", [("LL", "LL128"), ("LL128", "Simple")])
def test_tuner_switches_protocol_where_nccls_own_model_crosses(a, b, version, table):
    """LL for small, LL128 in between, Simple for large, at the sizes tuning.cc's numbers cross
    (2.18: 25.6 us / (14/480 - 14/1766.4) us/kB = 1.21 MB and 15.4 us / (14/1766.4 - 14/1920)
    = 24.3 MB; 2.21, LL at 87.7: 25.6 / (14/701.6 - 14/1766.4) = 2.13 MB); NCCL_ALGO=ring as the
    devset's A100 ran."""
    x = crossover_bytes(a, b, table)
    by_hand = {None: {"LL": 2.128e6, "LL128": 24.29e6}, "2.18": {"LL": 1.205e6, "LL128": 24.29e6}}
    assert x == pytest.approx(by_hand[version][a], rel=2e-3)
    ring = CommOptions(algorithm="ring", nccl_version=version)
    assert nccl.choose("allreduce", 0.9 * x, A100, ring) == ("ring", a)
    assert nccl.choose("allreduce", 1.1 * x, A100, ring) == ("ring", b)


def test_ring_latency_across_nodes_is_tuning_cc_by_hand():
    """16 nodes x 8: 254 steps, 32 of them on the network: 8.4 + 222 x max(3.4, 3 x 1.0) + 32 x 14 us."""
    g = node(nodes=16)
    assert nccl._latency_us("ring", "Simple", "allreduce", g, nccl.ring_graph(g)) == pytest.approx(8.4 + 222 * 3.4 + 32 * 14.0)


def test_tree_wins_small_ring_large_and_the_crossover_grows_with_nodes():
    """Ring latency grows with the ranks, the tree's with log2(nodes): NCCL's tuner moves the
    ring/tree crossover up as nodes are added."""
    def crossover(nodes: int) -> int:
        g = node(nodes=nodes)
        algos = [nccl.choose("allreduce", 2**k, g, CommOptions())[0] for k in range(10, 34)]
        assert algos[0] == "tree" and algos[-1] == "ring"
        return algos.index("ring")
    assert crossover(4) < crossover(16) < crossover(64)


# -- the kernels' chunking against its closed forms -------------------------------------------

def run_ring_loops(proto: str, size: int, nc: int, n: int, nthreads: int) -> float:
    """all_reduce.h runRing, loop by loop: the chunk each loop gives its busiest slot, summed."""
    chunk = P.CHUNK_BYTES[proto]
    total, offset = 0.0, 0
    while offset < size:
        rest = size - offset
        if proto == "Simple":
            real = min(chunk, -(-rest // (nc * n)))
            real = -(-real // (nthreads * 8)) * (nthreads * 8)
        else:
            m = nthreads * P.BYTES_PER_GRAIN[proto] // (2 if proto == "LL128" else 1)
            real = min(chunk, -(-rest // (nc * n * m)) * m)
        total += real
        offset += nc * n * chunk
    return total


@settings(max_examples=80, deadline=None)
@given(proto=st.sampled_from(["LL128", "Simple"]), size=st.integers(1, 3 * 2**30),
       nc=st.integers(1, 32), n=st.integers(2, 64))
def test_ring_critical_bytes_closed_form_is_runrings_loop(proto, size, nc, n):
    nt = P.MAX_THREADS[proto]
    got = P.ring_critical_bytes(proto, size, nc, n, nt)
    assert got == run_ring_loops(proto, size, nc, n, nt)
    assert got >= size / (nc * n)  # rounding never moves less than the average slot


def test_ring_chunks_by_hand_on_eight_a100s():
    """24 channels x 8 ranks. LL128 at 8 MiB: ceil(8 MiB / (192 x 19200 B)) = 3 grains of
    640 x 60 / 2 B; Simple at 64 MiB: ceil(64 MiB / 192) rounded up to 4 KiB."""
    assert P.ring_critical_bytes("LL128", 8 * MIB, 24, 8, 640) == 3 * 19200
    assert P.ring_critical_bytes("Simple", 64 * MIB, 24, 8, 512) == 86 * 4096
    # 1 GiB on Simple: two loops of 2 MiB chunks, then ceil(256 MiB / 192) = 1398102 B -> 342 x 4 KiB
    assert P.ring_critical_bytes("Simple", 1024 * MIB, 24, 8, 512) == 2 * 2 * MIB + 342 * 4096


def test_ring_allreduce_moves_its_busiest_chunk_every_step():
    """A100, 8 MiB, LL128 forced: every edge alike, each of the 14 steps takes the link's latency d,
    NVLink's LL128 hop latency (1.9 us) and the busiest chunk, 57600 B per channel at busBw / 24
    channels (busBw the tuning model's 220.8 GB/s; the catalog's NVLink 3 carries more), after
    NCCL's base latency: T = 14 us + 14 x (d + 1.9 us + 57600 B / (busBw / 24))."""
    cost = comm_cost("nccl", "allreduce", 8 * MIB, A100, CommOptions(algorithm="ring", protocol="LL128"))
    per_channel = 220.8e9 / 24
    want = 14e-6 + 14 * (CAT.links["nvlink3"].latency_s + 1.9e-6 + 57600 / per_channel)
    assert cost.time_s == pytest.approx(want, rel=1e-9)


def test_tree_chunk_follows_enqueue_cc_by_hand():
    """Trees take one buffer step (chunkSteps 1): Simple 512 KiB, halved while nBytes / (nc x
    chunk) < depth x 8 (to 128 KiB), < depth x 4 (to 64 KiB), < depth (to 32 KiB)."""
    # 32 nodes x 1 GPU: depth = 1 - 1 + 5 = 5. 4 MiB on 2 channels: 4 < 40 -> 256K (8) -> 128K (16),
    # stop at 128 KiB; 16 < 20 -> 64 KiB (32 >= 20); 32 >= 5
    assert P.tree_depth(32, 32) == 5 and P.tree_chunk_bytes("Simple", 4 * MIB, 2, 32, 32) == 65536
    # 1 GiB: 1024 loops of 512 KiB per channel pair: no halving
    assert P.tree_chunk_bytes("Simple", 2**30, 2, 32, 32) == 512 * 1024
    # 16 nodes x 8: depth = 7 + 4 = 11; 64 KiB on 2 channels: 1/16 < 88 -> 128K; < 44 -> 64K;
    # < 11 -> 32 KiB, the floor
    assert P.tree_depth(128, 16) == 11 and P.tree_chunk_bytes("Simple", 64 * 1024, 2, 128, 16) == 32768
    # LL128, 16 x 8: nsteps = 1 + 4 + 0.8 = 5.8, ppn 8: halve while per-channel bytes / chunk <
    # 5.8 x 64 / 8 = 46.4 and chunk > 128 KiB, then < 11.6 and chunk > 32 KiB (its step: 4.7 MB / 8
    # x 120/128 = 576,000 B). 1 MiB per channel: 288,000 (3.6), 144,000 (7.3), 72,000 (14.6 < 46.4
    # but 72,000 <= 131,072: stop); 14.6 >= 11.6: 72,000 B
    step = P.CHUNK_BYTES["LL128"]
    assert P.tree_chunk_bytes("LL128", 2**30, 4, 128, 16) == step
    assert P.tree_chunk_bytes("LL128", 4 * MIB, 4, 128, 16) == step / 8 == 72000
    assert P.tree_chunk_bytes("LL", 4 * MIB, 4, 128, 16) == P.CHUNK_BYTES["LL"]


@pytest.mark.parametrize("nodes,g,gpu,link", [(32, 1, "p100", "pcie3"), (16, 8, "v100", "nvlink2"), (4, 8, "a100", "nvlink3")])
@pytest.mark.parametrize("size", [MIB, 4 * MIB, 16 * MIB, 64 * MIB])
def test_tree_prediction_tracks_nccls_own_model_as_the_ring_does(nodes, g, gpu, link, size):
    """On InfiniBand, where the hardware delivers what NCCL's search assumes, a tree's predicted
    time stays within 6 % of NCCL's own estimate (its chunk's hops and the per-hop wire latency
    are all it adds): no pipeline term may dominate a tree the tuner picked. A ring's stays within
    the same 6 % above it and at most its hop latencies below it: NCCL's tuner adds every hop's
    latency to the transfer, the ring's schedule overlaps them with other edges' transfers."""
    group = node(gpu, link, g, nodes, "ib_fdr")
    graph = nccl.ring_graph(group)
    for algo in ("tree", "ring"):
        model_s = nccl.model_time_us("allreduce", size, group, algo, "Simple") * 1e-6
        got = comm_cost("nccl", "allreduce", size, group, CommOptions(algorithm=algo, protocol="Simple")).time_s
        hops_s = 0.0
        if algo == "ring":  # NCCL's latency terms beyond its base latency
            factor = nccl.latency_factor("ring", "Simple", "allreduce", size, group, graph)
            hops_s = (nccl._latency_us("ring", "Simple", "allreduce", group, graph) - 8.4) * factor * 1e-6
        assert model_s - hops_s <= got <= 1.06 * model_s, (algo, got / model_s)


@pytest.mark.parametrize("size,chunk", [(1 * MIB, 16384), (8 * MIB - 1, 16384), (8 * MIB, 32768), (64 * MIB - 1, 32768),
                                        (64 * MIB, 65536), (2**30 - 1, 65536), (2**30, 131072), (8 * 2**30, 131072)])
def test_nvls_chunk_follows_enqueue_cc(size, chunk):
    """16 channels x 8 heads = 128 concurrent ops: 16 KiB below 2 x 128 x 32 KiB = 8 MiB, 32 KiB
    below 8 x 128 x 64 KiB, 64 KiB below 64 x 128 x 128 KiB = 1 GiB, then 128 KiB."""
    assert P.nvls_chunk_bytes(size, 16, 8) == chunk


H200_ALG_BPS = 8 * 40e9 * 5 / 6
"""18 NVLinks x 20.6 GB/s (topo.h SM90) / 8 GPUs = 46 GB/s a channel: the SM90 speed array's 40;
8 channels (one per GPU) x 40 GB/s, x 5/6 for NVLS (tuning.cc)."""


@pytest.mark.parametrize("size,unit", [(MIB, MIB / 16), (8 * MIB, 8 * 32768), (2**30, 8 * 131072)])
def test_nvls_time_is_latency_plus_bytes_plus_its_pipeline_fill(size, unit):
    """T = 25 us (2.21's hwLat NVLS over NVLink; 23 in 2.18-2.20) + S / algBw + (3 - 1) x unit /
    (algBw / 16) + d: a channel's unit is a loop of 8 heads x chunk, or its whole share when that is less."""
    fill = 2 * unit / (H200_ALG_BPS / 16)
    assert P.nvls_fill_s("allreduce", size, 16, 8, H200_ALG_BPS) == pytest.approx(fill, rel=1e-12)
    for version, latency_us in (("2.21", 25.0), ("2.20", 23.0), ("2.18", 23.0)):
        cost = comm_cost("nccl", "allreduce", size, H200, CommOptions(algorithm="nvls", nccl_version=version))
        want = latency_us * 1e-6 + size / H200_ALG_BPS + fill + CAT.links["nvlink4"].latency_s
        bw = H200_ALG_BPS if version != "2.18" else 8 * 40e9 * 5 / 6  # SM90 20.0 x 18 / 8 = 45: still the 40 step
        assert cost.time_s == pytest.approx(want - size / H200_ALG_BPS + size / bw, rel=1e-9), version


@given(size=st.floats(1.0, 2.0**34), op=st.sampled_from(sorted(P.NVLS_STAGES)), heads=st.integers(3, 8))
def test_nvls_fill_is_bounded_by_its_stages_and_its_largest_loop(size, op, heads):
    fill = P.nvls_fill_s(op, size, 16, heads, H200_ALG_BPS)
    stages = P.NVLS_STAGES[op] - 1
    assert 0 < fill <= stages * size / H200_ALG_BPS * (1 + 1e-12)
    assert fill <= stages * heads * P.NVLS_MAX_CHUNK_BYTES / (H200_ALG_BPS / 16) * (1 + 1e-12)


# -- invariants ------------------------------------------------------------------------------

SINGLE_NODES = [("a100", "nvlink3", 8), ("h200", "nvlink4", 8), ("h100", "nvlink4", 4), ("v100", "nvlink2", 8),
                ("p100_pcie", "pcie3", 4)]


@pytest.mark.parametrize("gpu,link,g", SINGLE_NODES)
def test_busbw_grows_with_size_and_time_never_falls(gpu, link, g):
    """Powers of two from 1 KiB to 8 GiB under the tuner's own choice (nccl-tests' sweep)."""
    grp = node(gpu, link, g)
    sizes = [2**k for k in range(10, 34)]
    times = [comm_cost("nccl", "allreduce", s, grp).time_s for s in sizes]
    busbw = [BUSBW_FACTOR["allreduce"](g) * s / t for s, t in zip(sizes, times, strict=True)]
    assert all(small <= large for small, large in zip(times, times[1:], strict=False))
    assert all(large >= small * (1 - 1e-9) for small, large in zip(busbw, busbw[1:], strict=False))


PAIRS = [("ring", "LL"), ("ring", "LL128"), ("ring", "Simple"), ("tree", "Simple"), ("nvls", "Simple")]


@settings(max_examples=60, deadline=None)
@given(pair=st.sampled_from(PAIRS), a=st.integers(1, 2**33), b=st.integers(1, 2**33))
def test_for_a_fixed_algorithm_and_protocol_more_bytes_never_take_less_time(pair, a, b):
    algo, proto = pair
    opts = CommOptions(algorithm=algo, protocol=proto)
    lo, hi = sorted((a, b))
    assert comm_cost("nccl", "allreduce", lo, H200, opts).time_s <= comm_cost("nccl", "allreduce", hi, H200, opts).time_s


@settings(max_examples=40, deadline=None)
@given(gpu_link=st.sampled_from([("a100", "nvlink3"), ("h200", "nvlink4")]), k=st.integers(10, 33),
       factor=st.floats(1.0, 8.0))
def test_a_faster_nvlink_is_never_slower(gpu_link, k, factor):
    gpu, link = gpu_link
    slow = node(gpu, link)
    fast_link = replace(slow.intra_link, bandwidth_Bps=slow.intra_link.bandwidth_Bps * factor)
    fast = replace(slow, intra_link=fast_link)
    assert comm_cost("nccl", "allreduce", 2**k, fast).time_s <= comm_cost("nccl", "allreduce", 2**k, slow).time_s * (1 + 1e-12)


# -- the devset: nccl-tests' busbw on one node ----------------------------------------------

MAPE_REACHED = {"A100": 18.5, "H200": 4.5}
"""MAPE over 1 MB-8 GB this model reaches (17.8 % and 3.7 %), with 0.7-0.8 points of slack: a
change that loses accuracy on either curve fails here. The issue's target is 10 %; A100's
8-64 MB rows are still 27-44 % high (docs/validation.md)."""


@pytest.mark.parametrize("gpu", sorted(MAPE_REACHED))
def test_devset_busbw_mape_stays_where_the_model_reached(gpu):
    rows = [p for p in busbw_predictions(DEVSET_DIR) if gpu in p.group and p.gated]
    assert len(rows) == 7
    assert sum(abs(p.error()) for p in rows) / len(rows) <= MAPE_REACHED[gpu]


@pytest.mark.parametrize("size", [MIB, 8 * MIB, 16 * MIB, 64 * MIB, 2**30])
def test_a100_ring_is_priced_alike_by_the_releases_that_could_have_run_the_curve(size):
    """The A100 table names NCCL 2.18.5, but 2.18.5 cannot run NCCL_ALGO=NVLS without NVLS (no
    ring fallback before v2.20.3-1: validation/devset.py); a ring with every protocol under 2.18,
    2.19 or 2.20 is the same prediction here, so which of them ran does not move the row."""
    times = {v: comm_cost("nccl", "allreduce", size, A100, CommOptions(algorithm="ring", nccl_version=v)).time_s
             for v in ("2.18", "2.19", "2.20")}
    assert max(times.values()) == pytest.approx(min(times.values()), rel=1e-12)


def test_devset_h200_rows_each_within_eight_percent():
    """NVLS on H200 (NCCL_ALGO=NVLS as the source ran it): every size from 1 MB to 8 GB."""
    rows = [p for p in busbw_predictions(DEVSET_DIR) if "H200" in p.group and p.gated]
    assert max(abs(p.error()) for p in rows) <= 8.0


def test_nvls_on_a_node_runs_sixteen_channels_one_head_per_gpu():
    graph = nccl.nvls_graph(H200)
    assert (graph.channels, graph.runtime_channels) == (8, P.NVLS_CHANNELS) == (8, 16)
    assert math.isclose(graph.channels * graph.bw * 5 / 6 * 1e9, H200_ALG_BPS)
