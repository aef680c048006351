"""The built-in zoo: every table loads, and its totals match the published figures.

FLOP convention: torch's FlopCounterMode counts 2 FLOPs per multiply-accumulate (matmuls and
convolutions only), so a published "4.1 GMACs" (torchvision calls them GFLOPS) is 8.2 GFLOPs
in our tables. The published figures below are written out here, with their sources, so that
editing a YAML file cannot silence the test.
"""

from __future__ import annotations

import importlib.util
import sys
from importlib import resources
from pathlib import Path

import pytest
import yaml

from sim.workload import LAYER_COLUMNS, OPTIMIZERS, load_workload, zoo_names

ROOT = Path(__file__).resolve().parents[1]
ZOO = ("mlp", "small_cnn", "small_transformer", "resnet50", "inception_v3", "vgg16", "bert_large", "gpt2_xl")
CPU_SIZED = ("mlp", "small_cnn", "small_transformer")
LARGE = ("resnet50", "inception_v3", "vgg16", "bert_large", "gpt2_xl")
CNNS = ("small_cnn", "resnet50", "inception_v3", "vgg16")
TRANSFORMERS = {  # name -> (layers, seq, d_model, vocab, extra FLOPs per token)
    "small_transformer": (2, 64, 128, 1024, 0),
    "bert_large": (24, 512, 1024, 30522, 2 * 1024**2),  # BERT's MLM transform: one d x d matmul per token
    "gpt2_xl": (48, 1024, 1600, 50257, 0),
}

# name -> (published parameters, relative tolerance, source)
PUBLISHED_PARAMS = {
    "mlp": (609, 0.0, "1-16-32-1 with biases: 2*16 + 17*32 + 33*1"),
    "resnet50": (25.6e6, 0.01, "He et al. 2016; torchvision resnet50: 25,557,032"),
    # auxiliary classifier EXCLUDED (torchvision's 27,161,264 includes its 3,326,696 parameters)
    "inception_v3": (23.8e6, 0.005, "timm inception_v3.tv_in1k card: 23.8 M"),
    "vgg16": (138e6, 0.01, "Simonyan and Zisserman 2015 Table 2: 138 M; torchvision: 138,357,544"),
    "bert_large": (340e6, 0.02, "Devlin et al. 2019: 340 M (KerasHub with pooler: 335,141,888)"),
    "gpt2_xl": (1.5576e9, 0.01, "KerasHub gpt2_extra_large_en: 1,557,611,200 (Radford et al. 2019 Table 2: 1542 M)"),
}
# name -> (published forward GMACs per sample, relative tolerance): torchvision's 'GFLOPS' column
PUBLISHED_GMACS = {"resnet50": (4.1, 0.01), "inception_v3": (5.7, 0.01), "vgg16": (15.5, 0.01)}


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
    assert batches == {"resnet50": 32, "inception_v3": 32, "vgg16": 32, "bert_large": 8, "gpt2_xl": 1}
    for name in CNNS:
        assert load_workload(name).optimizer == "momentum", name
    for name in TRANSFORMERS:
        assert load_workload(name).optimizer == "adam", name
    for name in LARGE:
        meta = _meta(name)
        assert meta["default_batch_size_source"] and meta["optimizer_source"] and meta["published"]["source"]
        assert "2 FLOPs per multiply-accumulate" in meta["flop_convention"]


@pytest.mark.parametrize("name", ZOO)
def test_files_say_how_they_were_made_and_agree(name):
    text = _csv_text(name)
    assert f"python scripts/derive_layer_tables.py {name}" in text.splitlines()[0]
    header = next(line for line in text.splitlines() if not line.startswith("#"))
    assert tuple(header.split(",")) == LAYER_COLUMNS
    workload, derived = load_workload(name), _meta(name)["derived"]
    assert (derived["params"], derived["fwd_flops_per_sample"], derived["bwd_flops_per_sample"]) == (
        workload.param_count, workload.fwd_flops_per_sample, workload.bwd_flops_per_sample)
    # a gradient for every parameter: params counted once (GPT-2 and BERT tie the head to the embedding)
    assert sum(layer.param_count for layer in workload.layers) == workload.param_count


# -- with torch: the committed tables are what the script derives ----------------------------

def _derive_module():
    pytest.importorskip("torch")
    name = "derive_layer_tables"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / "derive_layer_tables.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("#")]


@pytest.mark.torch
@pytest.mark.parametrize("name", CPU_SIZED)
def test_rederiving_cpu_sized_tables_reproduces_the_committed_csv(name):
    derive = _derive_module()
    rows, device = derive.derive_checked(name)  # also checks: meta tensors give the same table
    assert device.startswith("cpu")
    assert _rows(derive.render_csv(name, rows, device)) == _rows(_csv_text(name))


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
    """Re-derives all tables (about a minute on 2 cores) and compares them with the files."""
    assert _derive_module().main(["--check"]) == 0
