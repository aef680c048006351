"""The large-model strategy fields (sim.strategy.LLM_FIELDS) against hand-computed formulas:
ZeRO's sharding, sequence parallelism's collectives, ring attention, recomputation's extra work,
FlashAttention's backward, expert parallelism's all-to-alls, the interleaved schedule's bubble,
and every field's one-line errors."""

from __future__ import annotations

import pytest

from sim.config import scenario_from_dict
from sim.costs.passes import PassOptions, layer_passes, ring_attention_s
from sim.errors import ConfigError
from sim.memory import memory_per_rank
from sim.planner.flush import flush_ends
from sim.simulate import simulate
from sim.strategy import strategy_notes
from sim.workload import Layer

P = 1_000_000  # parameters per layer of the hand-made tables
CUSTOM = {"links": {"ab": {"kind": "custom", "bandwidth_GBps": 10, "latency_us": 5}}}
"""An alpha-beta link (no library terms): ring reduce-scatter and allgather cost (n-1)(a + S/(nB))
each, the allreduce twice that (docs/model.md, 'Collectives on alpha-beta links')."""


def table(layers=4, acts=1000, **extra):
    rows = [{"name": f"l{i}", "param_count": P, "fwd_flops": 1e9, "activation_elems": acts} for i in range(layers)]
    return {"layers": rows, "batch_size": 8, "optimizer": "adam", **extra}


def scenario(workload, strategy, gpus=8, per_node=8, gpu="a100", check=False, catalog=None, **cluster):
    spec = {"workload": workload, "cluster": {"gpus": gpus, "gpus_per_node": per_node, "gpu": gpu, **cluster},
            "strategy": {"precision": "fp16", **strategy}, "simulation": {"check_memory": check}}
    if catalog:
        spec["catalog"] = catalog
    return scenario_from_dict(spec)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_shards_what_each_stage_says(stage):
    """Rajbhandari et al. 2020 section 5.1, mixed-precision Adam (16 B per parameter: 2 + 2 + 12)
    over dp = 8: stage 1 shards the 12 B of optimizer state, stage 2 also the 2 B of gradients,
    stage 3 also the 2 B of parameters (then holding three layers' worth whole: one computing, its
    gather's buffer kept for the copy-out, and one prefetched)."""
    [b] = memory_per_rank(scenario(table(), {"zero_stage": stage}))
    n, dp = 4 * P, 8
    assert b.optimizer_bytes == pytest.approx(12 * n / (dp if stage >= 1 else 1))
    assert b.grads_bytes == pytest.approx(2 * n / (dp if stage >= 2 else 1))
    assert b.params_bytes == pytest.approx(2 * n / (dp if stage >= 3 else 1))
    assert b.gathered_bytes == pytest.approx(3 * 2 * P if stage == 3 else 0)


def test_zero_with_one_replica_is_a_noted_no_op():
    one = scenario(table(), {"zero_stage": 3}, gpus=1, per_node=1)
    assert memory_per_rank(one)[0].params_bytes == 2 * 4 * P
    notes = strategy_notes(one.strategy, 1)
    assert notes and "no-op" in notes[0] and "zero_stage" in notes[0]


def test_zero_1_2_reduce_scatter_then_gather_after_the_step():
    """Data parallel on alpha-beta links, 8 MB of gradients (4 layers x 1 M x 2 B) in two buckets
    (DDP's first capped at 1 MiB holds the last layer, the other three): DDP allreduces each,
    2 x 7 (a + S_b/(8B)); ZeRO-1 reduce-scatters each, 7 (a + S_b/(8B)), and after the step
    allgathers the parameters once, 7 (a + S/(8B)): the same bytes, the gather after the step,
    exposed; the optimizer updates 1/8 of the parameters."""
    common = {"backend": "mpi", "collective": "ring", "bucket_mib": 100}
    kw = {"gpus": 8, "per_node": 1, "inter_link": "ab", "catalog": CUSTOM}
    plain = simulate(scenario(table(), common, **kw))
    zero = simulate(scenario(table(), {**common, "zero_stage": 1}, **kw))
    s, a, bw = 4 * P * 2, 5e-6, 10e9
    buckets = 7 * (2 * a + s / (8 * bw))  # two buckets' alphas, all the bytes
    assert plain.comm_time_s == pytest.approx(2 * buckets, rel=1e-9)
    assert zero.comm_time_s == pytest.approx(buckets, rel=1e-9)
    assert zero.optimizer_time_s == pytest.approx(plain.optimizer_time_s / 8, rel=1e-6)
    gather = [sp for sp in zero.spans if sp.name == "parameter allgather"]
    assert len(gather) == 1 and gather[0].duration_s == pytest.approx(7 * (a + s / (8 * bw)), rel=1e-9)


def test_sequence_parallelism_moves_the_allreduces_bytes_as_two_collectives():
    """Korthikanti et al. section 4.2.2: each TP allreduce becomes a reduce-scatter and an
    allgather of the same activation: on alpha-beta links 2 x (t-1)(a + S/(tB)), the allreduce's
    2 (t-1) a + 2 (t-1) S / (t B) exactly; sequence parallelism also splits the norms' compute."""
    arch = {"model": "decoder", "architecture": {"layers": 2, "hidden": 256, "heads": 4, "seq_len": 128, "vocab": 512},
            "batch_size": 4}
    kw = {"gpus": 4, "per_node": 4, "intra_link": "ab", "catalog": CUSTOM}
    base = {"kind": "tensor", "tp": 4, "backend": "mpi"}
    off = simulate(scenario(arch, base, **kw))
    on = simulate(scenario(arch, {**base, "sequence_parallel": True}, **kw))
    # per pass, per transformer layer: 2 allreduces (attention output, MLP output) of s h b x 2 bytes
    msg = 128 * 256 * 4 * 2
    ring = 2 * 3 * 5e-6 + 2 * 3 / 4 * msg / 10e9
    # 2 layers x 2 allreduces x 2 passes, + the vocabulary-parallel embedding's allreduce, 2 passes
    assert off.tp_comm_time_s == pytest.approx(2 * 2 * 2 * ring + 2 * ring, rel=1e-9)
    assert on.tp_comm_time_s == pytest.approx(off.tp_comm_time_s, rel=1e-9)
    assert on.compute_time_s < off.compute_time_s  # the norms' share split 4 ways


def test_ring_attention_overlaps_sends_with_blocks():
    """cp blocks: the own one, then cp - 1 each overlapping the next block's send."""
    assert ring_attention_s(8.0, 4, 1.0) == 2.0 + 3 * 2.0      # compute-bound: no exposed send
    assert ring_attention_s(8.0, 4, 5.0) == 2.0 + 3 * 5.0      # send-bound
    assert ring_attention_s(8.0, 1, 99.0) == 8.0


def _layers():
    return [Layer(name="embed.tok", kind="Embedding", param_count=10, fwd_flops=0, bwd_flops=0, activation_elems=1),
            Layer(name="block0.attn.q", kind="Linear", param_count=10, fwd_flops=1, bwd_flops=2, activation_elems=1),
            Layer(name="block0.attn.core", kind="core", param_count=0, fwd_flops=1, bwd_flops=2, activation_elems=1),
            Layer(name="block0.moe.experts", kind="Experts", param_count=10, fwd_flops=1, bwd_flops=2,
                  activation_elems=1),
            Layer(name="head.out", kind="Linear", param_count=10, fwd_flops=1, bwd_flops=2, activation_elems=1)]


TIMES = [(0.5, 0.5), (2.0, 4.0), (1.0, 2.0), (3.0, 6.0), (1.0, 2.0)]


def test_recomputation_adds_forward_work_where_the_paper_says():
    """Full: each block's forward once more before its backward (the head and embedding are not
    checkpointed); selective: the attention core's forward. FlashAttention: the core's backward
    2.5 x its forward (Dao 2023). Capacity factor 1.5: the experts compute 1.5 x."""
    layers = _layers()
    blocks = frozenset({"block0"})
    none = layer_passes(layers, TIMES, PassOptions(blocks=blocks))
    full = layer_passes(layers, TIMES, PassOptions(blocks=blocks, recompute="full"))
    sel = layer_passes(layers, TIMES, PassOptions(blocks=blocks, recompute="selective"))
    assert sum(full.bwd_s) - sum(none.bwd_s) == pytest.approx(2.0 + 1.0 + 3.0)
    assert sum(full.recompute_s) == pytest.approx(6.0)
    assert sum(sel.bwd_s) - sum(none.bwd_s) == pytest.approx(1.0) and sel.recompute_s[2] == 1.0
    flash = layer_passes(layers, TIMES, PassOptions(blocks=blocks, flash=True, capacity_factor=1.5))
    assert flash.bwd_s[2] == pytest.approx(2.0 + 0.5 * 1.0)
    assert (flash.fwd_s[3], flash.bwd_s[3]) == pytest.approx((4.5, 9.0))


def test_context_and_expert_parallel_communication_per_pass():
    """cp = 2: every layer's work halves, the core runs as ring attention (block 0.25 s, send
    0.4 s: forward 0.25 + 0.4; backward sends twice the bytes: 0.5 + 0.8); ep: two all-to-alls
    (dispatch, combine) per pass on the experts' row."""
    layers = _layers()
    p = layer_passes(layers, TIMES, PassOptions(cp=2, blocks=frozenset({"block0"})), kv_send_s=0.4, alltoall_s=0.1)
    assert p.fwd_s[1] == pytest.approx(1.0) and p.bwd_s[1] == pytest.approx(2.0)
    assert p.fwd_s[2] == pytest.approx(0.25 + 0.4) and p.bwd_s[2] == pytest.approx(0.5 + 0.8)
    assert p.fwd_s[3] == pytest.approx(1.5 + 0.2) and p.bwd_s[3] == pytest.approx(3.0 + 0.2)
    assert p.model_comm_s[2] == pytest.approx((0.65 - 0.5) + (1.3 - 1.0)) and p.model_comm_s[3] == pytest.approx(0.4)


@pytest.mark.parametrize("p,v,m", [(4, 2, 8), (4, 2, 4), (8, 2, 16), (4, 4, 12), (2, 3, 6)])
def test_interleaving_divides_the_bubble_by_vpp(p, v, m):
    """Narayanan et al. 2021 section 2.2.2: with v model chunks per stage (each 1/v of its work) the
    flush takes (m + (p - 1)/v)(f + b): the 1F1B bubble (p - 1)(f + b) divided by v."""
    f, b = 1.0, 2.0
    ends = flush_ends("1f1b", m, [(f / v, b / v)] * (p * v), [0.0] * (p * v), v)
    assert max(ends) == pytest.approx((m + (p - 1) / v) * (f + b))
    assert max(flush_ends("1f1b", m, [(f, b)] * p, [0.0] * p)) == pytest.approx((m + p - 1) * (f + b))


def test_interleaving_sends_vpp_times_as_often():
    """v chunks per stage: each micro-batch crosses every stage boundary v times (and wraps from the
    last stage to the first between chunks)."""
    llama = {"model": "llama2_7b", "architecture": {"layers": 8}, "batch_size": 4}
    one = simulate(scenario(llama, {"kind": "pipeline", "pp": 4, "micro_batches": 4}, gpus=4, per_node=4))
    two = simulate(scenario(llama, {"kind": "pipeline", "pp": 4, "micro_batches": 4, "vpp": 2}, gpus=4, per_node=4))
    assert two.pp_comm_time_s == pytest.approx(2 * one.pp_comm_time_s, rel=1e-9)
    assert two.bubble_time_s < one.bubble_time_s


MIXTRAL_SMALL = {"model": "mixtral_8x7b", "architecture": {"layers": 4}, "seq_len": 4096}


@pytest.mark.parametrize("strategy, workload, gpus, field", [
    ({"kind": "hybrid", "cp": 3}, {"model": "llama2_7b", "architecture": {"layers": 4}}, 3, "strategy.cp"),
    ({"kind": "hybrid", "cp": 2}, table(), 2, "strategy.cp"),
    ({"kind": "hybrid", "cp": 2, "attention": "eager"}, {"model": "llama2_7b", "architecture": {"layers": 4}}, 2,
     "strategy.attention"),
    ({"ep": 3}, MIXTRAL_SMALL, 6, "strategy.ep"),
    ({"ep": 4}, MIXTRAL_SMALL, 2, "strategy.ep"),
    ({"ep": 2}, {"model": "llama2_7b", "architecture": {"layers": 4}}, 2, "strategy.ep"),
    ({"kind": "tensor", "tp": 2}, MIXTRAL_SMALL, 2, "strategy.sequence_parallel"),
    ({"moe_capacity_factor": 1.25}, table(), 1, "strategy.moe_capacity_factor"),
    ({"moe_capacity_factor": 0}, MIXTRAL_SMALL, 1, "strategy.moe_capacity_factor"),
    ({"vpp": 2}, table(), 1, "strategy.vpp"),
    ({"kind": "pipeline", "pp": 2, "vpp": 3, "micro_batches": 2}, {"model": "llama2_7b", "architecture": {"layers": 8},
                                                                   "batch_size": 2}, 2, "strategy.vpp"),
    ({"kind": "pipeline", "pp": 2, "vpp": 2, "micro_batches": 1}, {"model": "llama2_7b", "architecture": {"layers": 8},
                                                                   "batch_size": 2}, 2, "strategy.micro_batches"),
    ({"kind": "pipeline", "pp": 2, "vpp": 2, "micro_batches": 2, "schedule": "gpipe"},
     {"model": "llama2_7b", "architecture": {"layers": 8}, "batch_size": 2}, 2, "strategy.schedule"),
    ({"recompute": "full"}, table(), 1, "strategy.recompute"),
    ({"recompute": "some"}, table(), 1, "strategy.recompute"),
    ({"zero_stage": 4}, table(), 1, "strategy.zero_stage"),
    ({"zero_stage": True}, table(), 1, "strategy.zero_stage"),
    ({"zero_stage": 2, "collective": "ps"}, table(), 2, "strategy.zero_stage"),
    ({"zero_stage": 1, "codec": "fp16"}, table(), 2, "strategy.zero_stage"),
    ({"sequence_parallel": "yes"}, table(), 1, "strategy.sequence_parallel"),
    ({"attention": "fast"}, table(), 1, "strategy.attention"),
    ({"kind": "hybrid", "cp": 2}, {"model": "llama2_7b", "architecture": {"layers": 4}}, 4, "strategy.dp * cp * tp * pp"),
])
def test_each_field_is_checked_in_one_line(strategy, workload, gpus, field):
    spec = {"workload": workload, "cluster": {"gpus": gpus, "gpus_per_node": 8 if gpus > 1 else 1, "gpu": "h100"},
            "strategy": {"precision": "bf16", **strategy}, "simulation": {"check_memory": False}}
    if field == "strategy.dp * cp * tp * pp":
        spec["strategy"]["dp"] = 1
    with pytest.raises(ConfigError) as err:
        scenario_from_dict(spec)
    assert err.value.field == field, str(err.value)
    assert "\n" not in str(err.value)


def test_the_detailed_mode_refuses_them_naming_fidelity_fast():
    spec = {"workload": table(), "cluster": {"gpus": 2, "gpus_per_node": 2, "gpu": "a100"},
            "strategy": {"zero_stage": 2}, "simulation": {"fidelity": "detailed"}}
    with pytest.raises(ConfigError) as err:
        scenario_from_dict(spec)
    assert err.value.field == "strategy.zero_stage" and "fidelity: fast" in str(err.value)
