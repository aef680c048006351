"""A plan a practitioner would trust (issue 28): NCCL on GPUs and no lossy codec unless asked, the
cluster's node from its GPU's datasheet, MFU by hand, the published global batch of a large model,
no ZeRO-2 with pipeline stages, and the best plan of each structure with what decides between them."""

from __future__ import annotations

import pytest

from sim.catalog import builtin_catalog
from sim.cluster import cluster_from_dict
from sim.costs.comm import op_cost, spec_of
from sim.parallel import dp_group
from sim.planner import plan_request_from_dict, plan_search
from sim.planner.explain import mfu, structure_sentence, structures
from sim.planner.space import family
from sim.strategy import strategy_from_dict


def request(workload, cluster, plan=None, strategy=None):
    return plan_request_from_dict({"workload": workload, "cluster": cluster, "plan": plan or {},
                                   **({"strategy": strategy} if strategy else {})})


# -- libraries and codecs: only when asked ---------------------------------------------------

def test_gpus_run_nccl_and_no_lossy_codec_unless_asked():
    cluster = {"gpus": 8, "gpus_per_node": 4, "gpu": "v100", "inter_link": "tcp_10gbe"}
    plain = request({"model": "small_transformer"}, cluster)
    assert plain.backends == ("nccl",)
    assert plain.codecs == ((None, None),)
    asked = request({"model": "small_transformer"}, cluster, {"backends": ["nccl", "gloo"], "allow_lossy": True})
    assert asked.backends == ("nccl", "gloo")
    # fp16 training: only fp8 is narrower, tried on both its paths
    assert asked.codecs == ((None, None), ("fp8_e4m3", "allgather"), ("fp8_e4m3", "reduce_scatter"))
    fp32 = request({"model": "small_transformer"}, cluster, {"allow_lossy": True}, {"precision": "fp32"})
    assert {c for c, _ in fp32.codecs} == {None, "fp16", "fp8_e4m3"}
    # a CPU cluster has no NCCL: gloo first, MPI beside it, as before
    cpu = request({"model": "small_transformer"}, {"gpus": 4, "gpus_per_node": 2, "gpu": "cpu", "inter_link": "tcp_1gbe"})
    assert cpu.backends == ("gloo", "mpi")


def test_the_winner_is_lossless_nccl_where_a_lossy_codec_would_be_faster():
    """Over 10 GbE an fp8 wire format wins when allowed; by default the plan never picks it."""
    cluster = {"gpus": 8, "gpus_per_node": 1, "gpu": "v100", "inter_link": "tcp_10gbe"}
    options = {"max_pp": 1, "max_tp": 1, "bucket_mib": [25]}
    allowed = plan_search(request({"model": "gpt2_medium"}, cluster, {**options, "allow_lossy": True,
                                                                       "backends": ["nccl", "gloo", "mpi"]}))
    assert allowed.winner.sync.codec == "fp8_e4m3"  # the rule binds here
    default = plan_search(request({"model": "gpt2_medium"}, cluster, options))
    assert all(c.sync.codec is None and c.sync.backend == "nccl" for c in default.ranked)


def test_allow_lossy_is_a_boolean():
    from sim.errors import ConfigError

    with pytest.raises(ConfigError, match="plan.allow_lossy"):
        request({"model": "small_transformer"}, {"gpus": 2, "gpu": "v100"}, {"allow_lossy": "yes"})


# -- the GPU's node --------------------------------------------------------------------------

def test_a_cluster_gets_its_gpus_datasheet_node():
    catalog = builtin_catalog()
    # DGX A100 (datasheet): 8 A100 SXM4 on NVSwitch (NVLink 3), 8 single-port HDR 200 Gb/s compute NICs
    a100 = cluster_from_dict({"gpus": 64, "gpu": "a100"}, catalog)
    assert (a100.nodes, a100.gpus_per_node, a100.intra_link.name, a100.inter_link.name, a100.nics_per_node) == (
        8, 8, "nvlink3", "ib_hdr", 8)
    # DGX H100 / H200: NVLink 4, 8 x 400 Gb/s NDR
    for gpu in ("h100", "h200"):
        c = cluster_from_dict({"nodes": 2, "gpu": gpu}, catalog)
        assert (c.world_size, c.intra_link.name, c.inter_link.name, c.nics_per_node) == (16, "nvlink4", "ib_ndr", 8)
    # DGX-1 (V100): 4 EDR NICs for 8 GPUs
    v100 = cluster_from_dict({"gpus": 32, "gpu": "v100"}, catalog)
    assert (v100.gpus_per_node, v100.inter_link.name, v100.nics_per_node) == (8, "ib_edr", 4)
    # another network or another server: its own NICs (one unless it says)
    tcp = cluster_from_dict({"gpus": 64, "gpu": "h100", "inter_link": "tcp_100gbe"}, catalog)
    assert (tcp.gpus_per_node, tcp.intra_link.name, tcp.nics_per_node) == (8, "nvlink4", 1)
    four = cluster_from_dict({"gpus": 16, "gpus_per_node": 4, "gpu": "v100"}, catalog)
    assert (four.intra_link.name, four.nics_per_node) == ("nvlink2", 1)
    # what the cluster says wins; a GPU without a usual server keeps one GPU and one NIC per node
    own = cluster_from_dict({"gpus": 64, "gpu": "a100", "nics_per_node": 2}, catalog)
    assert own.nics_per_node == 2
    k80 = cluster_from_dict({"gpus": 4, "gpu": "k80"}, catalog)
    assert (k80.nodes, k80.gpus_per_node, k80.nics_per_node) == (4, 1, 1)


def test_rail_aligned_each_gpus_data_parallel_ring_on_its_own_nic():
    """tp 8 inside a DGX A100, dp 8 across nodes: the 8 data-parallel rings of a node each leave
    through their own NIC, so each runs as one GPU per node with one NIC would."""
    catalog = builtin_catalog()
    cluster = cluster_from_dict({"gpus": 64, "gpu": "a100"}, catalog)
    group = dp_group(cluster, 8, 8, 1)
    alone = cluster_from_dict({"gpus": 8, "gpus_per_node": 1, "gpu": "a100", "inter_link": "ib_hdr",
                               "nics_per_node": 1}, catalog)
    spec = spec_of(strategy_from_dict({"precision": "fp16"}))
    size = 256 * 2**20
    assert op_cost("allreduce", size, group, spec).time_s == pytest.approx(op_cost("allreduce", size, alone, spec).time_s,
                                                                           rel=1e-12)


# -- MFU ---------------------------------------------------------------------------------------

def test_mfu_by_hand_for_one_row():
    """PaLM's model FLOPs per token 6N + 12 L H Q T (N: the matmuls' weights, the tied head's h V
    included) and Narayanan et al.'s equation 3 with full recomputation, by hand."""
    n_layers, h, a, s, v = 4, 1024, 16, 512, 1000
    arch = {"family": "gpt2", "layers": n_layers, "hidden": h, "heads": a, "seq_len": s, "vocab": v}
    req = request({"model": "decoder", "architecture": arch}, {"gpus": 8, "gpu": "a100"},
                  {"global_batch": 16, "max_tp": 1, "max_pp": 1, "recompute": ["full"], "zero_stages": [0]})
    result = plan_search(req)
    c = result.winner
    samples_per_s = 1 / c.time_per_sample_s
    n = n_layers * 12 * h * h + h * v                      # qkv 3h^2, proj h^2, fc 4h^2, out 4h^2; the head h V
    per_token = 6 * n + 12 * n_layers * h * s              # H x Q = h
    peak = 312e12 * 8                               # A100 fp16 dense, 8 GPUs
    model, with_recompute = mfu(c, req)
    assert model == pytest.approx(per_token * s * samples_per_s / peak, rel=1e-12)
    eq3 = 96 * s * n_layers * h * h * (1 + s / (6 * h) + v / (16 * n_layers * h))  # per sequence
    assert c.layout.recompute == "full"
    assert with_recompute == pytest.approx(eq3 * samples_per_s / peak, rel=1e-12)


# -- a large model's global batch -------------------------------------------------------------

def test_a_large_model_is_planned_at_its_published_tokens_per_step():
    cluster = {"gpus": 64, "gpu": "h100"}
    req = request({"model": "llama2_70b"}, cluster)
    assert req.global_batch == 1024  # Touvron et al. 2023 section 2.2: 4M tokens, sequences of 4096
    assert "Touvron et al. 2023" in req.global_batch_source
    assert request({"model": "llama2_70b", "seq_len": 8192}, cluster).global_batch == 512
    assert request({"model": "llama3_8b"}, cluster).global_batch == 1024  # 8M tokens of 8192 (section 3.4.1)
    assert request({"model": "gpt3_175b"}, cluster).global_batch == 1536
    assert request({"model": "llama2_70b"}, cluster, {"global_batch": 256}).global_batch == 256
    weak = request({"model": "llama2_70b", "batch_size": 1}, cluster)
    assert weak.global_batch is None and not weak.global_batch_source
    # another architecture is another model: no published batch
    assert request({"model": "llama2_7b", "architecture": {"layers": 4}}, cluster).global_batch is None


# -- structures --------------------------------------------------------------------------------

SMALL_LLM = ({"model": "llama2_7b", "architecture": {"layers": 8}}, {"gpus": 16, "gpu": "h100"},
             {"global_batch": 32, "max_vpp": 2, "max_micro_batches": 8})


def test_no_zero_2_with_pipeline_stages():
    result = plan_search(request(*SMALL_LLM))
    assert not [c for c in result.candidates if c.layout.pp > 1 and c.layout.zero_stage == 2]
    assert [c for c in result.ranked if c.layout.pp > 1 and c.layout.zero_stage == 1]  # the distributed optimizer
    assert [c for c in result.ranked if c.layout.pp == 1 and c.layout.zero_stage == 2]


def test_each_structures_best_is_exact_and_explained():
    """The lower bound prunes, but each structure's best is the whole space's (prune=False)."""
    req = request(*SMALL_LLM)
    pruned, full = plan_search(req), plan_search(req, prune=False)
    rows_p, rows_f = structures(pruned), structures(full)
    assert [r.family for r in rows_p] == [r.family for r in rows_f]
    for a, b in zip(rows_p, rows_f, strict=True):
        if b.best is None:
            assert a.best is None
            continue
        assert a.best is not None
        assert a.best.outcome.iteration_time_s == b.best.outcome.iteration_time_s
        assert family(a.best.layout) == a.family
    winner = next(r for r in rows_p if r.reasons == ("the winner",))
    assert winner.best is pruned.winner
    others = [r for r in rows_p if r.best is not None and r is not winner]
    assert others and all(r.gap >= 0 for r in others)
    text = structure_sentence(pruned)
    assert text.startswith(f"{winner.family} wins (")
    for r in others:
        assert r.family in text


def test_a_structure_that_does_not_fit_says_so():
    req = request({"model": "llama2_7b", "architecture": {"layers": 8}}, {"gpus": 8, "gpu": "h100"},
                  {"global_batch": 8, "max_memory_gib": 12, "zero_stages": [0], "recompute": ["none"]})
    result = plan_search(req)
    rows = {r.family: r for r in structures(result)}
    assert rows["dp"].best is None and rows["dp"].memory_bytes > 12 * 2**30
    assert "dp does not fit (the smallest needs" in structure_sentence(result)
