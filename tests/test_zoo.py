"""The built-in zoo: every table loads, and its totals match the published figures.

FLOP convention: torch's FlopCounterMode counts 2 FLOPs per multiply-accumulate (matmuls and
convolutions only), so a published "4.1 GMACs" (torchvision calls them GFLOPS) is 8.2 GFLOPs
in our tables. The published figures below are written out here, with their sources, so that
editing a YAML file cannot silence the test.
"""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from sim.workload import LAYER_COLUMNS, OPTIMIZERS, load_workload, zoo_names

CPU_SIZED = ("mlp", "small_cnn", "small_transformer")
LARGE_CNNS = ("resnet50", "inception_v3", "vgg16", "resnet101", "resnet152", "alexnet", "googlenet")
LLMS = ("llama3_8b", "llama3_70b", "llama3_405b", "gpt3_175b", "mixtral_8x7b", "deepseek_moe_16b")
"""The large-model zoo (issue 28): published dimensions, parameter counts checked below."""
CLOSED_FORM = ("bert_base", "bert_large", "gpt2_small", "gpt2_medium", "gpt2_large", "gpt2_xl",
               "llama2_7b", "llama2_13b", "llama2_70b", *LLMS)
"""Transformers: an architecture in the YAML, the table in closed form (sim.transformer)."""
LARGE = (*LARGE_CNNS, *CLOSED_FORM)
ZOO = (*CPU_SIZED, *LARGE)
CNNS = ("small_cnn", *LARGE_CNNS)
TRANSFORMERS = {  # name -> (layers, seq, d_model, vocab, extra FLOPs per token): 4x MLP, full attention
    "small_transformer": (2, 64, 128, 1024, 0),
    "bert_base": (12, 512, 768, 30522, 2 * 768**2),  # BERT's MLM transform: one d x d matmul per token
    "bert_large": (24, 512, 1024, 30522, 2 * 1024**2),
    "gpt2_small": (12, 1024, 768, 50257, 0),
    "gpt2_medium": (24, 1024, 1024, 50257, 0),
    "gpt2_large": (36, 1024, 1280, 50257, 0),
    "gpt2_xl": (48, 1024, 1600, 50257, 0),
    "gpt3_175b": (96, 2048, 12288, 50257, 0),
}

# name -> (published parameters, relative tolerance, source)
PUBLISHED_PARAMS = {
    "mlp": (609, 0.0, "1-16-32-1 with biases: 2*16 + 17*32 + 33*1"),
    "resnet50": (25.6e6, 0.01, "He et al. 2016; torchvision resnet50: 25,557,032"),
    # auxiliary classifier EXCLUDED (torchvision's 27,161,264 includes its 3,326,696 parameters)
    "inception_v3": (23.8e6, 0.005, "timm inception_v3.tv_in1k card: 23.8 M"),
    "vgg16": (138e6, 0.01, "Simonyan and Zisserman 2015 Table 2: 138 M; torchvision: 138,357,544"),
    "resnet101": (44.5e6, 0.005, "torchvision resnet101: 44,549,160 (He et al. 2016: 44.5 M)"),
    "resnet152": (60.2e6, 0.005, "torchvision resnet152: 60,192,808 (He et al. 2016: 60.2 M)"),
    "alexnet": (61.1e6, 0.005, "torchvision alexnet: 61,100,840"),
    # torchvision's layout (batch norm; auxiliary classifiers excluded, as in its published count)
    "googlenet": (6.6e6, 0.005, "torchvision googlenet: 6,624,904"),
    # no pooler (590,592); with the MLM transform and decoder bias
    "bert_base": (110e6, 0.01, "Devlin et al. 2019: 110 M (KerasHub bert_base_en_uncased with pooler: 109,482,240)"),
    "bert_large": (340e6, 0.02, "Devlin et al. 2019: 340 M (KerasHub with pooler: 335,141,888)"),
    "gpt2_small": (124_439_808, 0.0, "KerasHub gpt2_base_en (Radford et al. 2019 Table 2: 117 M)"),
    "gpt2_medium": (354_823_168, 0.0, "KerasHub gpt2_medium_en (Radford et al. 2019 Table 2: 345 M)"),
    "gpt2_large": (774_030_080, 0.0, "KerasHub gpt2_large_en (Radford et al. 2019 Table 2: 762 M)"),
    "gpt2_xl": (1.5576e9, 0.01, "KerasHub gpt2_extra_large_en: 1,557,611,200 (Radford et al. 2019 Table 2: 1542 M)"),
    "llama2_7b": (6_738_415_616, 0.0, "meta-llama/Llama-2-7b-hf's checkpoint"),
    "llama2_13b": (13_015_864_320, 0.0, "meta-llama/Llama-2-13b-hf's checkpoint"),
    "llama2_70b": (68_976_648_192, 0.0, "meta-llama/Llama-2-70b-hf's checkpoint"),
    "llama3_8b": (8_030_261_248, 0.0, "meta-llama/Meta-Llama-3-8B's checkpoint"),
    "llama3_70b": (70_553_706_496, 0.0, "meta-llama/Meta-Llama-3-70B's checkpoint"),
    "llama3_405b": (405_853_388_800, 0.0, "meta-llama/Llama-3.1-405B's checkpoint"),
    # dense attention in place of GPT-3's alternating sparse layers: the same parameters
    "gpt3_175b": (175.0e9, 0.005, "Brown et al. 2020 Table 2.1: 175.0B"),
    "mixtral_8x7b": (46_702_792_704, 0.0, "mistralai/Mixtral-8x7B-v0.1's checkpoint (Jiang et al. 2024: 47B)"),
    "deepseek_moe_16b": (16.4e9, 0.005, "Dai et al. 2024 section 5.1.1: 16.4B"),
}
# name -> (published parameters active per token, relative tolerance, source)
PUBLISHED_ACTIVE_PARAMS = {
    "mixtral_8x7b": (13e9, 0.01, "Jiang et al. 2024 section 1: 13B active parameters per token"),
    "deepseek_moe_16b": (2.8e9, 0.015, "Dai et al. 2024 section 5.1.1: about 2.8B activated parameters"),
}
# name -> (published forward GMACs per sample, relative tolerance): torchvision's 'GFLOPS' column
PUBLISHED_GMACS = {"resnet50": (4.1, 0.01), "inception_v3": (5.7, 0.01), "vgg16": (15.5, 0.01),
                   "resnet101": (7.80, 0.01), "resnet152": (11.51, 0.01), "alexnet": (0.71, 0.01),
                   "googlenet": (1.50, 0.01)}


def _meta(name: str) -> dict:
    return yaml.safe_load(resources.files("sim").joinpath("data", "workloads", f"{name}.yaml").read_text())


def _csv_text(name: str) -> str:
    return resources.files("sim").joinpath("data", "workloads", f"{name}.csv").read_text()


def test_the_zoo_holds_every_model_and_each_loads():
    assert set(ZOO) <= set(zoo_names())
    for name in ZOO:
        workload = load_workload(name)
        assert workload.name == name and workload.layers
        assert len({layer.name for layer in workload.layers}) == len(workload.layers), name
        assert workload.optimizer in OPTIMIZERS


@pytest.mark.parametrize("name", list(PUBLISHED_PARAMS))
def test_parameter_counts_match_published(name):
    published, tolerance, _source = PUBLISHED_PARAMS[name]
    assert load_workload(name).param_count == pytest.approx(published, rel=tolerance, abs=0.5)


@pytest.mark.parametrize("name", list(PUBLISHED_ACTIVE_PARAMS))
def test_moe_active_parameters_match_published(name):
    from sim.transformer import active_parameter_count

    published, tolerance, _source = PUBLISHED_ACTIVE_PARAMS[name]
    assert active_parameter_count(load_workload(name).architecture) == pytest.approx(published, rel=tolerance)


# name -> (layers, MoE blocks, d, kv width, dense SwiGLU width, experts, top k, expert width, shared experts, seq, vocab)
MOE = {"mixtral_8x7b": (32, 32, 4096, 1024, 14336, 8, 2, 14336, 0, 32768, 32000),
       "deepseek_moe_16b": (28, 27, 2048, 2048, 10944, 64, 6, 1408, 2, 4096, 102400)}


@pytest.mark.parametrize("name", list(MOE))
def test_moe_forward_flops_are_top_k_experts_per_token(name):
    """Per token, by hand: attention 2 x (2 d^2 + 2 d d_kv) + 4 T d per layer; a dense block's
    SwiGLU 6 d f; a MoE block's router 2 d E, its k routed experts 6 k d f_e and its shared
    experts 6 d (s f_e); the untied head 2 d V."""
    layers, moe_blocks, d, d_kv, f, experts, k, f_e, shared, seq, vocab = MOE[name]
    attention = layers * (2 * (2 * d * d + 2 * d * d_kv) + 4 * seq * d)
    dense = (layers - moe_blocks) * 6 * d * f
    moe = moe_blocks * (2 * d * experts + 6 * k * d * f_e + 6 * d * shared * f_e)
    assert load_workload(name).fwd_flops_per_sample == seq * (attention + dense + moe + 2 * d * vocab)
    experts_rows = [la for la in load_workload(name).layers if la.kind == "Experts"]
    assert len(experts_rows) == moe_blocks and all(r.param_count == 3 * experts * d * f_e for r in experts_rows)


@pytest.mark.parametrize("name", list(PUBLISHED_GMACS))
def test_cnn_forward_flops_are_twice_the_published_macs(name):
    gmacs, tolerance = PUBLISHED_GMACS[name]
    assert load_workload(name).fwd_flops_per_sample == pytest.approx(2 * gmacs * 1e9, rel=tolerance)
    assert _meta(name)["published"]["gmacs"] == pytest.approx(gmacs, rel=tolerance)


@pytest.mark.parametrize("name", list(TRANSFORMERS))
def test_transformer_forward_flops_match_kaplan_closed_form(name):
    """Kaplan et al. 2020 Table 1 per token: 24 L d^2 (weights) + 4 L T d (QK^T and AV, counted in
    full) + 2 d V (vocabulary projection). Biases, norms and softmax are not counted by torch."""
    layers, seq, d, vocab, extra = TRANSFORMERS[name]
    per_token = 24 * layers * d**2 + 4 * layers * seq * d + 2 * d * vocab + extra
    assert load_workload(name).fwd_flops_per_sample == pytest.approx(seq * per_token, rel=1e-9)
    cores = [layer for layer in load_workload(name).layers if layer.kind == "core"]
    assert len(cores) == layers and all(c.param_count == 0 for c in cores)
    assert all(c.fwd_flops == pytest.approx(4 * seq * seq * d) for c in cores)


# name -> (layers, d, heads, kv heads, SwiGLU width): Touvron et al. 2023; Meta's llama/model.py widths
LLAMA2 = {"llama2_7b": (32, 4096, 32, 32, 11008), "llama2_13b": (40, 5120, 40, 40, 13824),
          "llama2_70b": (80, 8192, 64, 8, 28672)}
# Llama Team 2024 Table 3: sequence 8192, vocabulary 128256
LLAMA3 = {"llama3_8b": (32, 4096, 32, 8, 14336), "llama3_70b": (80, 8192, 64, 8, 28672),
          "llama3_405b": (126, 16384, 128, 8, 53248)}


@pytest.mark.parametrize("name", [*LLAMA2, *LLAMA3])
def test_llama_forward_flops_match_the_closed_form_with_swiglu_and_gqa(name):
    """Per token: 2 x (Q and O: 2 d^2; K and V: 2 d d_kv; gate, up, down: 3 d f) per layer + 4 L T d
    (attention, full) + 2 d V (untied head); Llama 2: T = 4096, V = 32000; Llama 3: T = 8192, V = 128256."""
    layers, d, heads, kv, f = {**LLAMA2, **LLAMA3}[name]
    seq, vocab = (4096, 32000) if name in LLAMA2 else (8192, 128256)
    d_kv = kv * d // heads
    per_token = 2 * layers * (2 * d * d + 2 * d * d_kv + 3 * d * f) + 4 * layers * seq * d + 2 * d * vocab
    assert load_workload(name).fwd_flops_per_sample == seq * per_token


@pytest.mark.parametrize("name", ZOO)
def test_backward_is_twice_forward_except_the_first_layer(name):
    """Every counted op is a matmul or convolution: backward computes the input gradient and the
    weight gradient, each as costly as the forward. The model's first layer reads the data and
    needs no input gradient (transformers start with an embedding, which has no counted FLOPs)."""
    workload = load_workload(name)
    first, rest = workload.layers[0], workload.layers[1:]
    assert first.bwd_flops == first.fwd_flops
    assert all(layer.bwd_flops == 2 * layer.fwd_flops for layer in rest)
    assert workload.bwd_flops_per_sample == 2 * workload.fwd_flops_per_sample - first.fwd_flops


def test_activation_column_has_the_architectures_shapes():
    first = {name: load_workload(name).layers[0].activation_elems for name in ("resnet50", "vgg16", "inception_v3")}
    assert first == {"resnet50": 64 * 112 * 112, "vgg16": 64 * 224 * 224, "inception_v3": 32 * 149 * 149}
    assert load_workload("resnet50").layers[-1].activation_elems == 1000
    assert load_workload("gpt2_xl").layers[-1].activation_elems == 1024 * 50257
    # the position embedding does not grow with the batch: 0 elements per sample
    assert next(la for la in load_workload("gpt2_xl").layers if la.name == "embed.pos").activation_elems == 0


def test_defaults_and_their_sources():
    batches = {name: load_workload(name).batch_size for name in LARGE}
    assert batches == {"resnet50": 32, "inception_v3": 32, "vgg16": 32, "resnet101": 32, "resnet152": 32,
                       "alexnet": 128, "googlenet": 32, "bert_base": 16, "bert_large": 8, "gpt2_small": 8,
                       "gpt2_medium": 8, "gpt2_large": 4, "gpt2_xl": 1, "llama2_7b": 1, "llama2_13b": 1,
                       "llama2_70b": 1, **{name: 1 for name in LLMS}}
    for name in CNNS:
        assert load_workload(name).optimizer == "momentum", name
    for name in (*TRANSFORMERS, *LLAMA2, *LLMS):
        assert load_workload(name).optimizer == "adam", name
    for name in LARGE:
        meta = _meta(name)
        assert meta["default_batch_size_source"] and meta["optimizer_source"] and meta["published"]["source"]
        assert "2 FLOPs per multiply-accumulate" in meta["flop_convention"]


@pytest.mark.parametrize("name", ZOO)
def test_files_say_how_they_were_made_and_agree(name):
    meta = _meta(name)
    workload, derived = load_workload(name), meta["derived"]
    assert (derived["params"], derived["fwd_flops_per_sample"], derived["bwd_flops_per_sample"]) == (
        workload.param_count, workload.fwd_flops_per_sample, workload.bwd_flops_per_sample)
    if name in CLOSED_FORM:  # no table file: the architecture is the data
        assert "layers_file" not in meta and meta["architecture"]["seq_len"] > 0
        return
    text = _csv_text(name)
    assert f"scalebench layers --zoo {name}" in text.splitlines()[0]
    header = next(line for line in text.splitlines() if not line.startswith("#"))
    assert tuple(header.split(",")) == LAYER_COLUMNS


# -- with torch: the committed tables are what real.derive derives ------------------------------

def _rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("#")]


@pytest.mark.torch
@pytest.mark.parametrize("name", [*CPU_SIZED, "vgg16", "alexnet"])
def test_rederiving_tables_reproduces_the_committed_csv(name):
    """The CPU-sized models on CPU tensors (derive_checked also requires the same table on meta
    tensors), and VGG-16 and AlexNet, the quickest large models, on meta tensors."""
    pytest.importorskip("torch")
    from real.zoo_tables import derive_checked, zoo_csv

    rows, device = derive_checked(name)
    assert device.startswith("cpu") == (name in CPU_SIZED)
    assert _rows(zoo_csv(name, rows, device)) == _rows(_csv_text(name))


@pytest.mark.torch
@pytest.mark.parametrize("name", LARGE)
def test_large_models_on_meta_have_the_tables_parameter_counts(name):
    torch = pytest.importorskip("torch")
    from real.models import MODELS

    with torch.device("meta"):
        model = MODELS[name].build()
    assert all(p.is_meta for p in model.parameters())
    assert sum(p.numel() for p in model.parameters()) == load_workload(name).param_count


@pytest.mark.torch
@pytest.mark.slow
def test_every_committed_table_is_up_to_date():
    """Re-derives all tables (about a minute on 2 cores, transformers checked against their closed
    form) and compares them with the files."""
    pytest.importorskip("torch")
    from real.zoo_tables import write_zoo

    assert write_zoo([], check=True, say=lambda _: None) == []
