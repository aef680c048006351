"""Transformers in closed form (sim.transformer): equal to torch's table row by row, at any
sequence length; the workload keys seq_len and architecture; the parameterised decoder."""

from __future__ import annotations

import pandas as pd
import pytest

from sim.errors import ConfigError
from sim.transformer import (
    architecture_from_dict,
    llama_ffn_hidden,
    parameter_count,
    transformer_rows,
)
from sim.workload import load_workload, workload_from_dict

SMALL = {  # one of each family, small enough to derive on CPU tensors in a second
    "bert": dict(family="bert", layers=2, hidden=64, heads=4, seq_len=24, vocab=130, max_positions=32),
    "gpt2": dict(family="gpt2", layers=2, hidden=48, heads=3, seq_len=16, vocab=97, max_positions=16),
    "llama_gqa": dict(family="llama", layers=2, hidden=64, heads=8, kv_heads=2, seq_len=12, vocab=89),
    "llama_tied": dict(family="llama", layers=1, hidden=32, heads=4, seq_len=8, vocab=50, tied_embeddings=True,
                       ffn_hidden=80),
    "gpt2_untied": dict(family="gpt2", layers=1, hidden=32, heads=2, seq_len=8, vocab=40, tied_embeddings=False),
    # mixture of experts (Mixtral-like: every block; DeepSeekMoE-like: shared experts, a dense first block)
    "llama_moe": dict(family="llama", layers=2, hidden=64, heads=8, kv_heads=2, seq_len=16, vocab=89, experts=4,
                      experts_per_token=2, moe_ffn_hidden=24),
    "llama_moe_shared": dict(family="llama", layers=3, hidden=32, heads=4, seq_len=12, vocab=50, ffn_hidden=80,
                             experts=6, experts_per_token=3, moe_ffn_hidden=16, shared_experts=2, dense_layers=1),
}


def _torch_rows(arch, device: str):
    torch = pytest.importorskip("torch")
    from torch import nn

    from real.derive import derive
    from real.models.transformers import build_transformer_model, transformer_batch

    torch.manual_seed(0)
    with torch.device(device):
        model = build_transformer_model(arch)
    make, loss = transformer_batch(arch), nn.CrossEntropyLoss()

    def batch_of(n):
        x, y = (t.to(device) for t in make(n, torch.Generator().manual_seed(0)))
        return (x,), lambda out: loss(out, y)

    return [(r.layer, r.kind, r.param_count, r.fwd_flops, r.bwd_flops, r.activation_elems)
            for r in derive(model, batch_of, "t").rows], sum(p.numel() for p in model.parameters())


@pytest.mark.torch
@pytest.mark.parametrize("name", list(SMALL))
def test_closed_form_equals_torchs_table_row_by_row(name):
    arch = architecture_from_dict(SMALL[name])
    rows, params = _torch_rows(arch, "cpu")
    assert transformer_rows(arch) == rows
    assert parameter_count(arch) == params


@pytest.mark.torch
@pytest.mark.parametrize("preset,seq", [("bert_base", 128), ("gpt2_small", 256)])
def test_a_preset_at_another_sequence_length_equals_torchs_table(preset, seq):
    """On meta tensors (the full-size model, nothing allocated), at a non-default sequence."""
    from sim.transformer import with_seq_len
    from sim.workload import zoo_architecture

    arch = with_seq_len(zoo_architecture(preset), seq)
    rows, _ = _torch_rows(arch, "meta")
    assert transformer_rows(arch) == rows


def test_seq_len_scales_the_matmuls_linearly_and_attention_quadratically():
    """Per sample: weights' FLOPs grow as t, the core's as t^2; parameters do not change."""
    base = load_workload("bert_base")
    short = workload_from_dict({"model": "bert_base", "seq_len": 128})
    assert short.param_count == base.param_count
    for long_row, short_row in zip(base.layers, short.layers, strict=True):
        ratio = 16 if long_row.kind == "core" else 4
        assert long_row.fwd_flops == ratio * short_row.fwd_flops
    assert workload_from_dict({"model": "gpt2_small", "seq_len": 1024}).layers == load_workload("gpt2_small").layers


def test_the_decoder_takes_any_dimensions_and_presets_take_overrides():
    spec = {"layers": 4, "hidden": 512, "heads": 8, "seq_len": 256, "vocab": 1000}
    w = workload_from_dict({"model": "decoder", "architecture": spec, "batch_size": 2})
    d, f, v, t = 512, llama_ffn_hidden(512), 1000, 256
    assert w.param_count == 4 * (4 * d * d + 3 * d * f + 2 * d) + d + 2 * v * d  # llama family: untied, RMSNorm
    assert w.fwd_flops_per_sample == t * (2 * 4 * (4 * d * d + 3 * d * f) + 4 * 4 * t * d + 2 * d * v)
    small = workload_from_dict({"model": "llama2_7b", "architecture": {"layers": 2}})
    assert len([la for la in small.layers if la.kind == "core"]) == 2
    assert small.layers[1].param_count == 4096  # the preset's hidden stays


@pytest.mark.parametrize("spec,field", [
    ({"model": "resnet50", "seq_len": 128}, "workload.seq_len"),
    ({"model": "bert_base", "seq_len": 1024}, "workload.seq_len"),  # 512 learned positions
    ({"model": "bert_base", "seq_len": 0}, "workload.seq_len"),
    ({"model": "decoder"}, "workload.architecture"),
    ({"model": "decoder", "architecture": {"layers": 2, "hidden": 64, "heads": 5, "seq_len": 8, "vocab": 9}},
     "workload.architecture.heads"),
    ({"model": "decoder", "architecture": {"layers": 2, "hidden": 64, "heads": 4, "seq_len": 8}},
     "workload.architecture.vocab"),
    ({"model": "llama2_7b", "architecture": {"kv_heads": 3}}, "workload.architecture.kv_heads"),
    ({"model": "llama2_7b", "architecture": {"depth": 3}}, "workload.architecture.depth"),
    ({"model": "gpt2_small", "architecture": {"experts": 8, "experts_per_token": 2}}, "workload.architecture.experts"),
    ({"model": "llama2_7b", "architecture": {"experts": 8}}, "workload.architecture.experts_per_token"),
    ({"model": "llama2_7b", "architecture": {"experts": 8, "experts_per_token": 9}},
     "workload.architecture.experts_per_token"),
    ({"model": "llama2_7b", "architecture": {"shared_experts": 2}}, "workload.architecture.shared_experts"),
    ({"model": "mixtral_8x7b", "architecture": {"dense_layers": 32}}, "workload.architecture.dense_layers"),
])
def test_bad_transformer_settings_name_the_field(spec, field):
    with pytest.raises(ConfigError) as err:
        workload_from_dict(spec)
    assert err.value.field == field


def test_a_moe_preset_turns_dense_and_its_architecture_travels_with_the_workload():
    """experts: 0 over Mixtral drops its MoE keys (they mean nothing without experts); the
    workload keeps the dimensions it was built from (the memory model's input)."""
    dense = workload_from_dict({"model": "mixtral_8x7b", "architecture": {"experts": 0}, "seq_len": 4096})
    assert dense.architecture is not None and not dense.architecture.moe and dense.architecture.seq_len == 4096
    assert not any(la.kind == "Experts" for la in dense.layers)
    assert load_workload("resnet50").architecture is None
    assert load_workload("llama3_8b").architecture.vocab == 128256


def test_a_sweep_over_sequence_lengths_runs(tmp_path):
    from experiments.config import experiment_from_dict
    from experiments.runner import run_experiment

    exp = experiment_from_dict({"name": "seq", "workload": {"model": "bert_base", "batch_size": 4},
                                "cluster": {"gpus": 8, "gpus_per_node": 8, "gpu": "a100", "intra_link": "nvlink3"},
                                "sweep": {"workload.seq_len": [128, 256, 512]}})
    run_experiment(exp, tmp_path / "seq", jobs=1, progress=False, log=lambda _: None)
    rows = pd.read_csv(tmp_path / "seq" / "results.csv").sort_values("workload.seq_len")
    times = list(rows["iteration_time_s"])
    assert times[0] < times[1] < times[2]
