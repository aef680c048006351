"""No layout the plan recommends for a large model exceeds the GPU by Korthikanti et al.'s count.

The check is this file's own arithmetic, not sim/memory.py's: Korthikanti et al. 2022, 'Reducing
Activation Recomputation in Large Transformer Models' (arXiv:2205.05198), Table 2 per layer
(bytes, micro-batch b, sequence s per context-parallel rank, hidden h, heads a, tensor parallel t):

    tensor parallel                 s b h (10 + 24/t + 5 a s/(h t))
    + sequence parallel             s b h (34/t + 5 a s/(h t))
    selective recomputation         the 5 a s/(h t) term dropped
    full recomputation              2 s b h (/t with sequence parallelism)

with FlashAttention (what the plan assumes on A100 and H100: strategy.attention auto) the s x s
term is dropped as well (its kernels store no scores). The paper's layer has dropout; a Llama has
none, so its section 4.1 items without dropout are counted for one: the two 1-byte masks (sbh
each) leave the 10, and of the 5 a s^2 b only the softmax output's 2 a s^2 b stays. Section 4.2.3: a 1F1B stage holds p - stage
micro-batches, GPipe m, the interleaved schedule p (1 + (p - 1)/(p v)) on its first stage; section
4.3: the last stage's output layer 4 s b h (1 + V/h) / t. Model state: mixed-precision Adam's
16 bytes per parameter (2 + 2 + 12), ZeRO dividing 12 (stage 1), 14 (stage 2) or 16 (stage 3) of
them by the data-parallel (x context-parallel) ranks; parameters counted here from the
architecture (per block 2h^2 + 2 h d_kv + 3 h f + 2h for a Llama, 12 h^2 + 13 h for a GPT, the
experts 3 E h f_e + h E), split over t (experts over t x ep). This leaves out what sim/memory.py
adds (the reserve, the embedding's ids, ZeRO-3's gathered blocks), so it is a floor: a plan that
breaks it cannot run.
"""

from __future__ import annotations

import pytest

from sim.config import scenario_from_dict
from sim.engine.pipeline_plan import chunk_bounds
from sim.planner import plan_request_from_dict, plan_search
from sim.units import GIB

NARROW = {"backends": ["nccl"], "collectives": ["auto"], "codecs": ["none"], "bucket_mib": [25], "top": 3}


def block_params(arch, index: int) -> float:
    h, d_kv = arch.hidden, arch.kv_heads * (arch.hidden // arch.heads)
    if arch.family != "llama":
        return 12 * h * h + 13 * h
    attention = 2 * h * h + 2 * h * d_kv + 2 * h
    if arch.experts and index >= arch.dense_layers:
        shared = 3 * h * arch.shared_experts * arch.moe_ffn_hidden
        return attention + h * arch.experts + shared, 3 * arch.experts * h * arch.moe_ffn_hidden
    return attention + 3 * h * arch.ffn_hidden


def korthikanti_bytes(candidate, request) -> float:
    """The fullest pipeline rank's bytes by the paper's count (module docstring)."""
    la, arch = candidate.layout, request.workload.architecture
    spec = candidate.spec(request)
    spec["simulation"] = {"check_memory": False}
    scenario = scenario_from_dict(spec)
    bounds = chunk_bounds(scenario) if la.pp > 1 else [(0, len(scenario.workload.layers))]
    units = scenario.workload.unit_index
    last_unit = len(scenario.workload.unit_names) - 1
    t, p, m, v, cp = la.tp, la.pp, la.micro_batches, la.vpp, la.cp
    b, s, h, a = la.batch // m, arch.seq_len / cp, arch.hidden, arch.heads
    sbh = s * b * h
    dropout = arch.family != "llama"
    replicated = 10 if dropout else 8
    scores = 0.0 if scenario.strategy.attention != "eager" or la.recompute != "none" else \
        (5 if dropout else 2) * a * s / (h * t)
    if la.recompute == "full":
        per_layer = 2 * sbh / (t if la.sequence_parallel else 1)
    elif la.sequence_parallel:
        per_layer = sbh * ((replicated + 24) / t + scores)
    else:
        per_layer = sbh * (replicated + 24 / t + scores)
    shard = la.dp * cp
    dense_bytes = {0: 16, 1: 4 + 12 / shard, 2: 2 + 14 / shard, 3: 16 / shard}[la.zero_stage]
    expert_shard = max(1, shard // la.ep)
    expert_bytes = {0: 16, 1: 4 + 12 / expert_shard, 2: 2 + 14 / expert_shard, 3: 16 / expert_shard}[la.zero_stage]
    worst = 0.0
    for stage in range(p):
        held = set()
        for lo, hi in bounds[stage::p]:
            held.update(range(units[lo], units[hi - 1] + 1))
        blocks = [u - 1 for u in held if 0 < u < last_unit]
        dense = experts = 0.0
        for i in blocks:
            params = block_params(arch, i)
            if isinstance(params, tuple):
                dense, experts = dense + params[0], experts + params[1]
            else:
                dense += params
        if 0 in held:
            dense += arch.vocab * h
        if last_unit in held:
            dense += h + (0 if arch.tied_embeddings else arch.vocab * h)
        state = dense / t * dense_bytes + experts / (t * la.ep) * expert_bytes
        if la.schedule == "gpipe":
            in_flight = m
        elif v > 1:
            in_flight = min(2 * (p - stage - 1) + (v - 1) * p + 1, m * v) / v
        else:
            in_flight = min(p - stage, m)
        activations = len(blocks) * per_layer * in_flight
        if last_unit in held:
            activations += 4 * sbh * (1 + arch.vocab / h) / t
        worst = max(worst, state + activations)
    return worst


def check(model, cluster, plan, strategy=None, top=5):
    spec = {"workload": {"model": model}, "cluster": cluster, "plan": {**NARROW, **plan}}
    if strategy:
        spec["strategy"] = strategy
    request = plan_request_from_dict(spec)
    result = plan_search(request)
    capacity = request.cluster.gpu.memory_bytes
    for candidate in result.ranked[:top]:
        need = korthikanti_bytes(candidate, request)
        assert need <= capacity, (candidate.label(), need / GIB)
        # and sim/memory.py, which adds the reserve, counts at least as much
        assert candidate.memory_bytes >= need, (candidate.label(), candidate.memory_bytes / GIB, need / GIB)
    return result


A100 = {"gpus_per_node": 8, "gpu": "a100", "intra_link": "nvlink3", "inter_link": "ib_hdr", "nics_per_node": 8}
H100 = {"gpus_per_node": 8, "gpu": "h100", "intra_link": "nvlink4", "inter_link": "ib_ndr", "nics_per_node": 8}


def test_llama2_7b_on_64_a100():
    """The issue's first case: the recommended layouts fit by the paper's count."""
    check("llama2_7b", {"gpus": 64, **A100}, {"global_batch": 512, "max_micro_batches": 16})


def test_llama3_8b_on_64_h100_with_eager_attention():
    """Eager attention stores the scores (the 5as/(ht) term): the plan must pay for them."""
    result = check("llama3_8b", {"gpus": 64, **H100}, {"global_batch": 256, "max_micro_batches": 16},
                   strategy={"attention": "eager"})
    assert result.winner.layout.tp * result.winner.layout.cp > 1 or result.winner.layout.recompute != "none"


@pytest.mark.slow
@pytest.mark.parametrize("model, cluster, plan", [
    ("llama2_70b", {"gpus": 1024, **H100}, {"global_batch": 1024, "max_micro_batches": 64}),
    ("llama2_70b", {"gpus": 256, **A100}, {"global_batch": 512, "max_micro_batches": 64}),
    ("llama3_70b", {"gpus": 512, **H100}, {"global_batch": 512, "max_micro_batches": 64}),
    ("gpt3_175b", {"gpus": 512, **A100}, {"global_batch": 1536, "max_micro_batches": 64}),
    ("mixtral_8x7b", {"gpus": 128, **H100}, {"global_batch": 128, "max_micro_batches": 32}),
    ("deepseek_moe_16b", {"gpus": 64, **A100}, {"global_batch": 512, "max_micro_batches": 32}),
])
def test_the_zoo_s_large_models(model, cluster, plan):
    check(model, cluster, plan)


def test_the_issue_s_llama2_7b_layout_no_longer_fits_with_eager_attention():
    """Issue 28: Llama-2-7B as tp 2 x dp 32 on 64 A100 80 GB, one sequence per replica, was planned at
    77.6 GiB counting layer outputs only. Per rank, 16 B x 6.74 B / 2 = 50.2 GiB of model state, and
    (no sequence parallelism or recomputation, eager attention) Table 2's sbh (10 + 24/2 + 5as/(2h))
    per layer: 32 x 16.8 M x 102 B = 51 GiB, 101 GiB in all; without the dropout a Llama does not
    have, sbh (8 + 12 + 2as/(2h)): 76.2 GiB, which the CUDA context, NCCL's buffers and the
    allocator's fragmentation take past 80 GiB: the scenario is refused, saying by how much."""
    from sim.errors import ConfigError

    spec = {"workload": {"model": "llama2_7b"}, "cluster": {"gpus": 64, **A100},
            "strategy": {"kind": "tensor", "tp": 2, "precision": "fp16", "attention": "eager"}}
    s, h, a, t = 4096, 4096, 32, 2
    state = 16 * 6_738_415_616 / t
    assert state + 32 * s * h * (10 + 24 / t + 5 * a * s / (h * t)) > 100 * GIB
    assert state + 32 * s * h * (8 + 24 / t + 2 * a * s / (h * t)) == pytest.approx(76.2 * GIB, rel=1e-3)
    with pytest.raises(ConfigError) as err:
        scenario_from_dict(spec)
    assert err.value.field == "memory per rank" and "over by" in str(err.value) and "\n" not in str(err.value)
    # with FlashAttention (auto on an A100) the same layout fits
    scenario_from_dict({**spec, "strategy": {"kind": "tensor", "tp": 2, "precision": "fp16"}})
