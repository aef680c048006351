"""The large members of the zoo, in plain torch (torchvision does not load with this torch).

ResNet-50, Inception-v3 and VGG-16 follow torchvision's definitions layer for layer (so their
parameter counts equal torchvision's); BERT-large and GPT-2 XL follow the papers, with
attention written as explicit matmuls so torch's FLOP counter sees it. Each model is an
``nn.Sequential`` of named pipeline-splittable units (stem, blocks, head). Dropout is left out:
it has no parameters and no FLOPs the counter sees. These models do not run in the CPU
harness; ``scripts/derive_layer_tables.py`` builds them on the meta device.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import torch
from torch import nn

from real.models.small import (
    Block,
    Embedding,
    LMHead,
    ModelSpec,
    SelfAttention,
    token_batch,
    transformer_fwd_flops,
)

FLOP_CONVENTION = "2 FLOPs per multiply-accumulate; torch's FlopCounterMode counts matmuls and convolutions only"


def imagenet_batch(size: int) -> Callable[[int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]:
    """Synthetic ImageNet-shaped batches: 3 x size x size images, 1000 classes."""

    def make(batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(batch_size, 3, size, size, generator=generator)
        return x, torch.randint(0, 1000, (batch_size,), generator=generator)

    return make


def _classifier_head(features: int, classes: int = 1000) -> nn.Sequential:
    return nn.Sequential(OrderedDict(pool=nn.AdaptiveAvgPool2d(1), flatten=nn.Flatten(), fc=nn.Linear(features, classes)))


# -- ResNet-50 (torchvision v1.5: the stride sits on the 3x3 convolution) ---------------------

class Bottleneck(nn.Module):
    def __init__(self, in_ch: int, planes: int, stride: int):
        super().__init__()
        out_ch = 4 * planes
        self.conv1 = nn.Conv2d(in_ch, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out_ch, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), nn.BatchNorm2d(out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


def build_resnet50() -> nn.Sequential:
    units: OrderedDict[str, nn.Module] = OrderedDict()
    units["stem"] = nn.Sequential(OrderedDict(
        conv1=nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), bn1=nn.BatchNorm2d(64),
        relu=nn.ReLU(inplace=True), maxpool=nn.MaxPool2d(3, stride=2, padding=1),
    ))
    in_ch = 64
    for stage, (planes, blocks, stride) in enumerate([(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)], start=1):
        for i in range(blocks):
            units[f"layer{stage}_{i}"] = Bottleneck(in_ch, planes, stride if i == 0 else 1)
            in_ch = 4 * planes
    units["head"] = _classifier_head(2048)
    return nn.Sequential(units)


# -- Inception-v3 (torchvision's Inception3 without the auxiliary classifier) ----------------

class BasicConv2d(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, kernel_size, stride=1, padding=0):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, kernel_size, stride=stride, padding=padding, bias=False)
        self.bn = nn.BatchNorm2d(out_ch, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


def _avg3(x: torch.Tensor) -> torch.Tensor:
    return nn.functional.avg_pool2d(x, 3, stride=1, padding=1)


def _max3s2(x: torch.Tensor) -> torch.Tensor:
    return nn.functional.max_pool2d(x, 3, stride=2)


class InceptionA(nn.Module):
    def __init__(self, in_ch: int, pool_features: int):
        super().__init__()
        self.branch1x1 = BasicConv2d(in_ch, 64, 1)
        self.branch5x5_1 = BasicConv2d(in_ch, 48, 1)
        self.branch5x5_2 = BasicConv2d(48, 64, 5, padding=2)
        self.branch3x3dbl_1 = BasicConv2d(in_ch, 64, 1)
        self.branch3x3dbl_2 = BasicConv2d(64, 96, 3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(96, 96, 3, padding=1)
        self.branch_pool = BasicConv2d(in_ch, pool_features, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([
            self.branch1x1(x),
            self.branch5x5_2(self.branch5x5_1(x)),
            self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x))),
            self.branch_pool(_avg3(x)),
        ], 1)


class InceptionB(nn.Module):
    def __init__(self, in_ch: int):
        super().__init__()
        self.branch3x3 = BasicConv2d(in_ch, 384, 3, stride=2)
        self.branch3x3dbl_1 = BasicConv2d(in_ch, 64, 1)
        self.branch3x3dbl_2 = BasicConv2d(64, 96, 3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(96, 96, 3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([
            self.branch3x3(x),
            self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x))),
            _max3s2(x),
        ], 1)


class InceptionC(nn.Module):
    def __init__(self, in_ch: int, c7: int):
        super().__init__()
        self.branch1x1 = BasicConv2d(in_ch, 192, 1)
        self.branch7x7_1 = BasicConv2d(in_ch, c7, 1)
        self.branch7x7_2 = BasicConv2d(c7, c7, (1, 7), padding=(0, 3))
        self.branch7x7_3 = BasicConv2d(c7, 192, (7, 1), padding=(3, 0))
        self.branch7x7dbl_1 = BasicConv2d(in_ch, c7, 1)
        self.branch7x7dbl_2 = BasicConv2d(c7, c7, (7, 1), padding=(3, 0))
        self.branch7x7dbl_3 = BasicConv2d(c7, c7, (1, 7), padding=(0, 3))
        self.branch7x7dbl_4 = BasicConv2d(c7, c7, (7, 1), padding=(3, 0))
        self.branch7x7dbl_5 = BasicConv2d(c7, 192, (1, 7), padding=(0, 3))
        self.branch_pool = BasicConv2d(in_ch, 192, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dbl = x
        for conv in (self.branch7x7dbl_1, self.branch7x7dbl_2, self.branch7x7dbl_3, self.branch7x7dbl_4, self.branch7x7dbl_5):
            dbl = conv(dbl)
        return torch.cat([
            self.branch1x1(x),
            self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x))),
            dbl,
            self.branch_pool(_avg3(x)),
        ], 1)


class InceptionD(nn.Module):
    def __init__(self, in_ch: int):
        super().__init__()
        self.branch3x3_1 = BasicConv2d(in_ch, 192, 1)
        self.branch3x3_2 = BasicConv2d(192, 320, 3, stride=2)
        self.branch7x7x3_1 = BasicConv2d(in_ch, 192, 1)
        self.branch7x7x3_2 = BasicConv2d(192, 192, (1, 7), padding=(0, 3))
        self.branch7x7x3_3 = BasicConv2d(192, 192, (7, 1), padding=(3, 0))
        self.branch7x7x3_4 = BasicConv2d(192, 192, 3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b7 = self.branch7x7x3_4(self.branch7x7x3_3(self.branch7x7x3_2(self.branch7x7x3_1(x))))
        return torch.cat([self.branch3x3_2(self.branch3x3_1(x)), b7, _max3s2(x)], 1)


class InceptionE(nn.Module):
    def __init__(self, in_ch: int):
        super().__init__()
        self.branch1x1 = BasicConv2d(in_ch, 320, 1)
        self.branch3x3_1 = BasicConv2d(in_ch, 384, 1)
        self.branch3x3_2a = BasicConv2d(384, 384, (1, 3), padding=(0, 1))
        self.branch3x3_2b = BasicConv2d(384, 384, (3, 1), padding=(1, 0))
        self.branch3x3dbl_1 = BasicConv2d(in_ch, 448, 1)
        self.branch3x3dbl_2 = BasicConv2d(448, 384, 3, padding=1)
        self.branch3x3dbl_3a = BasicConv2d(384, 384, (1, 3), padding=(0, 1))
        self.branch3x3dbl_3b = BasicConv2d(384, 384, (3, 1), padding=(1, 0))
        self.branch_pool = BasicConv2d(in_ch, 192, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b3 = self.branch3x3_1(x)
        b3 = torch.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1)
        dbl = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        dbl = torch.cat([self.branch3x3dbl_3a(dbl), self.branch3x3dbl_3b(dbl)], 1)
        return torch.cat([self.branch1x1(x), b3, dbl, self.branch_pool(_avg3(x))], 1)


def build_inception_v3() -> nn.Sequential:
    stem = nn.Sequential(OrderedDict(
        Conv2d_1a_3x3=BasicConv2d(3, 32, 3, stride=2), Conv2d_2a_3x3=BasicConv2d(32, 32, 3),
        Conv2d_2b_3x3=BasicConv2d(32, 64, 3, padding=1), maxpool1=nn.MaxPool2d(3, stride=2),
        Conv2d_3b_1x1=BasicConv2d(64, 80, 1), Conv2d_4a_3x3=BasicConv2d(80, 192, 3), maxpool2=nn.MaxPool2d(3, stride=2),
    ))
    return nn.Sequential(OrderedDict(
        stem=stem,
        Mixed_5b=InceptionA(192, 32), Mixed_5c=InceptionA(256, 64), Mixed_5d=InceptionA(288, 64),
        Mixed_6a=InceptionB(288),
        Mixed_6b=InceptionC(768, 128), Mixed_6c=InceptionC(768, 160), Mixed_6d=InceptionC(768, 160), Mixed_6e=InceptionC(768, 192),
        Mixed_7a=InceptionD(768), Mixed_7b=InceptionE(1280), Mixed_7c=InceptionE(2048),
        head=_classifier_head(2048),
    ))


# -- VGG-16 (configuration D, no batch norm) ---------------------------------------------------

def build_vgg16() -> nn.Sequential:
    units: OrderedDict[str, nn.Module] = OrderedDict()
    in_ch = 3
    for stage, (width, convs) in enumerate([(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)], start=1):
        layers: OrderedDict[str, nn.Module] = OrderedDict()
        for i in range(1, convs + 1):
            layers[f"conv{stage}_{i}"] = nn.Conv2d(in_ch, width, 3, padding=1)
            layers[f"relu{stage}_{i}"] = nn.ReLU(inplace=True)
            in_ch = width
        layers[f"pool{stage}"] = nn.MaxPool2d(2, stride=2)
        units[f"stage{stage}"] = nn.Sequential(layers)
    units["fc6"] = nn.Sequential(OrderedDict(
        pool=nn.AdaptiveAvgPool2d(7), flatten=nn.Flatten(), fc=nn.Linear(512 * 7 * 7, 4096), relu=nn.ReLU(inplace=True)))
    units["fc7"] = nn.Sequential(OrderedDict(fc=nn.Linear(4096, 4096), relu=nn.ReLU(inplace=True)))
    units["fc8"] = nn.Sequential(OrderedDict(fc=nn.Linear(4096, 1000)))
    return nn.Sequential(units)


# -- BERT-large (post-norm encoder, masked-LM head tied to the token embedding) -----------------

BERT_LARGE = {"vocab": 30522, "seq": 512, "d_model": 1024, "heads": 16, "layers": 24}
BERT_MASK_TOKEN = 103
"""[MASK] in BERT's uncased WordPiece vocabulary."""


class BertEmbedding(Embedding):
    """Token + position + segment embeddings, then LayerNorm (all tokens in segment 0)."""

    def __init__(self, vocab: int, seq: int, d_model: int):
        super().__init__(vocab, seq, d_model)
        self.seg = nn.Embedding(2, d_model)
        self.ln = nn.LayerNorm(d_model, eps=1e-12)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.ln(super().forward(idx) + self.seg(torch.zeros_like(idx)))


class EncoderLayer(nn.Module):
    """BERT's post-norm layer: x = LN(x + attn(x)); x = LN(x + W2 gelu(W1 x))."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.attn = SelfAttention(d_model, heads, causal=False)
        self.ln1 = nn.LayerNorm(d_model, eps=1e-12)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.act = nn.GELU()
        self.out = nn.Linear(4 * d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.out(self.act(self.fc(x))))


class MLMHead(nn.Module):
    """Masked-LM head: dense + GELU + LayerNorm, then the decoder (tied to the token embedding)."""

    def __init__(self, d_model: int, vocab: int):
        super().__init__()
        self.dense = nn.Linear(d_model, d_model)
        self.act = nn.GELU()
        self.ln = nn.LayerNorm(d_model, eps=1e-12)
        self.decoder = nn.Linear(d_model, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.ln(self.act(self.dense(x)))).flatten(0, 1)


def build_bert(vocab: int, seq: int, d_model: int, heads: int, layers: int) -> nn.Sequential:
    units: OrderedDict[str, nn.Module] = OrderedDict(embed=BertEmbedding(vocab, seq, d_model))
    for i in range(layers):
        units[f"layer{i}"] = EncoderLayer(d_model, heads)
    units["head"] = MLMHead(d_model, vocab)
    model = nn.Sequential(units)
    model.head.decoder.weight = model.embed.tok.weight
    return model


def bert_batch(vocab: int, seq: int, mask_fraction: float = 0.15):
    """Random tokens with ``mask_fraction`` replaced by [MASK]; targets -100 (ignored) elsewhere."""

    def make(batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.randint(0, vocab, (batch_size, seq), generator=generator)
        masked = torch.rand(batch_size, seq, generator=generator) < mask_fraction
        targets = torch.where(masked, tokens, torch.full_like(tokens, -100))
        return tokens.masked_fill(masked, BERT_MASK_TOKEN), targets.reshape(-1)

    return make


# -- GPT-2 XL (pre-norm blocks of small.py, head tied to the token embedding, no head bias) -------

GPT2_XL = {"vocab": 50257, "seq": 1024, "d_model": 1600, "heads": 25, "layers": 48}


def build_gpt2(vocab: int, seq: int, d_model: int, heads: int, layers: int) -> nn.Sequential:
    units: OrderedDict[str, nn.Module] = OrderedDict(embed=Embedding(vocab, seq, d_model))
    for i in range(layers):
        units[f"block{i}"] = Block(d_model, heads)
    units["head"] = LMHead(d_model, vocab, bias=False)
    model = nn.Sequential(units)
    model.head.head.weight = model.embed.tok.weight
    return model


# -- the registry: definitions, batches, losses and the zoo metadata with sources -------------

TORCHVISION = "https://pytorch.org/vision/stable/models/generated/torchvision.models.{}.html"
GOYAL = "Goyal et al. 2017, Accurate, Large Minibatch SGD (arXiv:1706.02677)"
CNN_BATCH_NOTE = "32 images per GPU as in " + GOYAL + " (n = 32 per worker)"


def _cnn_zoo(description: str, source: str, batch_note: str, published: dict, optimizer_note: str) -> dict:
    return {
        "description": description, "source": source, "default_batch_size": 32,
        "default_batch_size_source": batch_note, "optimizer": "momentum", "optimizer_source": optimizer_note,
        "flop_convention": FLOP_CONVENTION, "published": published,
    }


def _transformer_zoo(cfg: dict, *, description: str, source: str, batch: int, batch_note: str,
                     params: int, params_source: str, extra_per_token: int = 0) -> dict:
    flops = transformer_fwd_flops(layers=cfg["layers"], seq=cfg["seq"], d_model=cfg["d_model"],
                                  vocab=cfg["vocab"], extra_per_token=extra_per_token)
    return {
        "description": description, "source": source, "default_batch_size": batch,
        "default_batch_size_source": batch_note, "optimizer": "adam",
        "optimizer_source": "Adam, as the model's authors trained it", "flop_convention": FLOP_CONVENTION,
        "published": {
            "params": params,
            "fwd_gflops_per_sample": round(flops / 1e9, 3),
            "source": params_source + "; FLOPs per sequence: Kaplan et al. 2020 (arXiv:2001.08361) Table 1, "
                      "2N + 4 n_layer n_ctx d (QK^T and AV in full) + 2 d n_vocab per token"
                      + (" + the MLM transform 2 d^2" if extra_per_token else ""),
        },
    }


LARGE_MODELS: dict[str, ModelSpec] = {
    "resnet50": ModelSpec(
        build_resnet50, imagenet_batch(224), nn.CrossEntropyLoss, cpu_sized=False, info={"input": "3x224x224"},
        zoo=_cnn_zoo(
            "ResNet-50 v1.5 (torchvision layout), 224x224 ImageNet images",
            "He et al. 2016 (arXiv:1512.03385); torchvision.models.resnet50",
            CNN_BATCH_NOTE,
            {"params": 25_557_032, "gmacs": 4.09,
             "source": TORCHVISION.format("resnet50") + " (ResNet50_Weights.IMAGENET1K_V1: num_params 25557032, "
                       "'GFLOPS' 4.09, which counts multiply-accumulates)"},
            "SGD with momentum 0.9 (" + GOYAL + ")",
        ),
    ),
    "inception_v3": ModelSpec(
        build_inception_v3, imagenet_batch(299), nn.CrossEntropyLoss, cpu_sized=False, info={"input": "3x299x299"},
        zoo=_cnn_zoo(
            "Inception-v3 (torchvision layout) without the auxiliary classifier, 299x299 images",
            "Szegedy et al. 2016 (arXiv:1512.00567); torchvision.models.inception_v3",
            "32 per replica as in Szegedy et al. 2016 section 8 (50 replicas, batch 32 each)",
            {"params": 23_834_568, "params_with_aux_classifier": 27_161_264, "gmacs": 5.71,
             "source": TORCHVISION.format("inception_v3") + " (Inception_V3_Weights.IMAGENET1K_V1: num_params "
                       "27161264 with the auxiliary classifier, 'GFLOPS' 5.71 = multiply-accumulates at 299x299 in "
                       "eval mode, where the auxiliary head does not run); the auxiliary head has "
                       "98560 + 2459136 + 769000 = 3326696 parameters; timm's inception_v3.tv_in1k card: 23.8 M, 5.7 GMACs"},
            "Szegedy et al. trained with RMSProp; the simulator's 'momentum' has the same optimizer memory traffic "
            "(one state array per parameter)",
        ),
    ),
    "vgg16": ModelSpec(
        build_vgg16, imagenet_batch(224), nn.CrossEntropyLoss, cpu_sized=False, info={"input": "3x224x224"},
        zoo=_cnn_zoo(
            "VGG-16 (configuration D, torchvision layout), 224x224 images",
            "Simonyan and Zisserman 2015 (arXiv:1409.1556); torchvision.models.vgg16",
            CNN_BATCH_NOTE + "; Simonyan and Zisserman used 256 over 4 GPUs (64 each)",
            {"params": 138_357_544, "gmacs": 15.47,
             "source": TORCHVISION.format("vgg16") + " (VGG16_Weights.IMAGENET1K_V1: num_params 138357544, "
                       "'GFLOPS' 15.47 = multiply-accumulates)"},
            "SGD with momentum 0.9 (Simonyan and Zisserman 2015)",
        ),
    ),
    "bert_large": ModelSpec(
        lambda: build_bert(**BERT_LARGE), bert_batch(BERT_LARGE["vocab"], BERT_LARGE["seq"]), nn.CrossEntropyLoss,
        cpu_sized=False, info=dict(BERT_LARGE),
        zoo=_transformer_zoo(
            BERT_LARGE,
            description="BERT-large (24 layers, d 1024, 16 heads), masked-LM pretraining at sequence length 512; "
                        "no pooler or next-sentence head",
            source="Devlin et al. 2019 (arXiv:1810.04805)",
            batch=8,
            batch_note="fits a 32 GB V100 in fp32 training (our estimate, not a measurement): Adam keeps 16 B per "
                       "parameter (weights, gradients, two moments) = 5.4 GB; one 512-token sequence saves about "
                       "1.9 GB of activations (per layer ~18 M elements: Q, K, V, two 16x512x512 attention maps, "
                       "the 4096-wide MLP input and GELU output; plus 512 x 30522 logits), so 8 sequences need "
                       "about 21 GB and 12 about 29 GB. Devlin et al. used 256 sequences per step on TPUs",
            params=335_141_888,
            params_source="Devlin et al. 2019: 340M; KerasHub preset bert_large_en_uncased: 335141888 (with the "
                          "pooler, 1049600, which this model lacks; it has the MLM transform and decoder bias, 1082170)",
            extra_per_token=2 * BERT_LARGE["d_model"] ** 2,
        ),
    ),
    "gpt2_xl": ModelSpec(
        lambda: build_gpt2(**GPT2_XL), token_batch(GPT2_XL["vocab"], GPT2_XL["seq"]), nn.CrossEntropyLoss,
        cpu_sized=False, info=dict(GPT2_XL),
        zoo=_transformer_zoo(
            GPT2_XL,
            description="GPT-2 XL, the 1.5B model (48 layers, d 1600, 25 heads, context 1024, vocab 50257), "
                        "language-model training",
            source="Radford et al. 2019, Language Models are Unsupervised Multitask Learners",
            batch=1,
            batch_note="one 1024-token sequence, and only with activation checkpointing (which the simulator does "
                       "not model: recomputation costs about one more forward): fp32 Adam keeps 16 B per parameter "
                       "= 24.9 GB of a 32 GB V100; one sequence saves about 20 GB of activations without "
                       "recomputation (per block ~105 M elements, mostly two 25x1024x1024 attention maps), about "
                       "1 GB with per-block checkpointing (our estimate). Megatron-LM's single-GPU baseline "
                       "(Shoeybi et al. 2019) is a 1.2B GPT-2 on a 32 GB V100 with mixed precision and checkpointing",
            params=1_557_611_200,
            params_source="Radford et al. 2019 Table 2: 1542M; KerasHub preset gpt2_extra_large_en: 1557611200 "
                          "(head tied to the token embedding)",
        ),
    ),
}
