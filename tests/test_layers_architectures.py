"""`scalebench layers` on the blocks of the architectures users bring: grouped and depthwise
convolutions counted per group, nn.MultiheadAttention (ViT, nn.TransformerEncoder) and
attention modules that use a child's weight without calling it, and every row's backward checked
against its forward.

torchvision itself is not installed: PyPI's torchvision does not import beside torch 2.13.0 here
(/work/.library/env/machines/python.md), so its architectures' blocks are built below from torch.nn
as torchvision writes them (resnet50's bottleneck, efficientnet_b0's MBConv, convnext_tiny's CNBlock,
vit_b_16's EncoderBlock, Swin's functional window attention). Expected FLOPs are computed by hand
from each layer's shape: a convolution is N x H_out W_out x k^2 x C_out x C_in / g x 2, a linear
layer tokens x in x out x 2, attention 2 x tokens^2 x d per head for QK^T and as much for AV."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from real.derive import MAX_BACKWARD_RATIO, DeriveError, derive  # noqa: E402

pytestmark = pytest.mark.torch


def _batch_of(*shape):
    def batch_of(n):
        return (torch.randn(n, *shape, device="meta"),), lambda out: (out[0] if isinstance(out, tuple) else out).sum()
    return batch_of


def _rows(model, *shape):
    with torch.device("meta"):
        built = model() if callable(model) and not isinstance(model, nn.Module) else model
    return {r.layer: r for r in derive(built.to("meta").train(), _batch_of(*shape), "test").rows}


def _conv(n_out_pixels, k, c_out, c_in_per_group):
    return n_out_pixels * k * k * c_out * c_in_per_group * 2


def test_a_depthwise_convolution_counts_its_weight_gradient_per_group():
    """EfficientNet-B0's 480-channel 5x5 depthwise layer on 14 x 14: forward 4,704,000 FLOPs per
    sample; as the model's first layer it has no input gradient, so backward = weight gradient =
    the forward (torch's own formula counted 480x)."""
    rows = _rows(nn.Sequential(nn.Conv2d(480, 480, 5, padding=2, groups=480, bias=False)), 480, 14, 14)
    fwd = _conv(196, 5, 480, 1)
    assert fwd == 4_704_000
    assert (rows["0"].fwd_flops, rows["0"].bwd_flops) == (fwd, fwd)


def test_a_grouped_convolution_after_another_layer_has_backward_twice_its_forward():
    """ResNeXt-style 3x3 conv of 128 channels in 32 groups, after a dense conv: input gradient and
    weight gradient, each a forward's worth."""
    model = nn.Sequential(nn.Conv2d(64, 128, 3, padding=1), nn.Conv2d(128, 128, 3, padding=1, groups=32))
    rows = _rows(model, 64, 16, 16)
    fwd = _conv(256, 3, 128, 128 // 32)
    assert (rows["1"].fwd_flops, rows["1"].bwd_flops) == (fwd, 2 * fwd)
    assert rows["0"].bwd_flops == rows["0"].fwd_flops == _conv(256, 3, 128, 64)  # first: no input gradient


class SqueezeExcitation(nn.Module):  # torchvision.ops.SqueezeExcitation
    def __init__(self, c, s):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1, self.fc2 = nn.Conv2d(c, s, 1), nn.Conv2d(s, c, 1)

    def forward(self, x):
        return x * torch.sigmoid(self.fc2(nn.functional.silu(self.fc1(self.avgpool(x)))))


class MBConv(nn.Module):  # torchvision.models.efficientnet.MBConv, expand 6, kernel 5, with SE
    def __init__(self, c=40, e=6, k=5):
        super().__init__()
        h = c * e
        self.expand = nn.Sequential(nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.SiLU())
        self.dw = nn.Sequential(nn.Conv2d(h, h, k, padding=k // 2, groups=h, bias=False), nn.BatchNorm2d(h), nn.SiLU())
        self.se = SqueezeExcitation(h, c // 4)
        self.project = nn.Sequential(nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return x + self.project(self.se(self.dw(self.expand(x))))


def test_mbconv_rows_and_totals():
    rows = _rows(MBConv, 40, 28, 28)
    pixels = 28 * 28
    assert rows["dw.0"].fwd_flops == _conv(pixels, 5, 240, 1)
    assert rows["dw.0"].bwd_flops == 2 * rows["dw.0"].fwd_flops
    assert rows["project.0"].fwd_flops == _conv(pixels, 1, 40, 240)
    fwd = sum(r.fwd_flops for r in rows.values())
    bwd = sum(r.bwd_flops for r in rows.values())
    first = rows["expand.0"].fwd_flops  # the first layer computes no input gradient
    assert bwd == 2 * fwd - first  # every row 2x its forward but the first (EfficientNet-B0: 31.4 G vs 0.77 G before)


class LayerNorm2d(nn.LayerNorm):  # torchvision.models.convnext.LayerNorm2d
    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class CNBlock(nn.Module):  # torchvision.models.convnext.CNBlock (convnext_tiny: dim 96 in stage 1)
    def __init__(self, dim=96):
        super().__init__()
        self.block = nn.Sequential(nn.Conv2d(dim, dim, 7, padding=3, groups=dim), LayerNorm2d(dim),
                                   nn.Conv2d(dim, 4 * dim, 1), nn.GELU(), nn.Conv2d(4 * dim, dim, 1))
        self.layer_scale = nn.Parameter(torch.full((dim, 1, 1), 1e-6))

    def forward(self, x):
        return x + self.layer_scale * self.block(x)


def test_a_convnext_block_has_a_backward_of_about_twice_its_forward():
    """The stem (4x4 stride 4) then a block on 16 x 16: ConvNeXt's backward was 7.7x its forward."""
    rows = _rows(nn.Sequential(nn.Conv2d(3, 96, 4, stride=4), LayerNorm2d(96), CNBlock(96)), 3, 64, 64)
    pixels = 16 * 16
    assert rows["2.block.0"].fwd_flops == _conv(pixels, 7, 96, 1)
    assert rows["2.block.0"].bwd_flops == 2 * _conv(pixels, 7, 96, 1)
    assert rows["2"].param_count == 96  # layer_scale: the block's own parameter, its own row
    fwd = sum(r.fwd_flops for r in rows.values())
    ratio = sum(r.bwd_flops for r in rows.values()) / fwd
    assert ratio == pytest.approx((2 * fwd - rows["0"].fwd_flops) / fwd) and 1.9 < ratio < 2


class EncoderBlock(nn.Module):  # torchvision.models.vision_transformer.EncoderBlock
    def __init__(self, dim, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.self_attention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        y = self.ln_1(x)
        y, _ = self.self_attention(y, y, y, need_weights=False)
        x = x + y
        return x + self.mlp(self.ln_2(x))


class ViT(nn.Module):  # torchvision.models.VisionTransformer, small: 64 x 64 image, 16 x 16 patches
    def __init__(self, dim=192, heads=3, patch=16, image=64, depth=2, classes=10):
        super().__init__()
        self.conv_proj = nn.Conv2d(3, dim, patch, stride=patch)
        self.class_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embedding = nn.Parameter(torch.zeros(1, (image // patch) ** 2 + 1, dim))
        self.layers = nn.Sequential(*[EncoderBlock(dim, heads) for _ in range(depth)])
        self.ln = nn.LayerNorm(dim)
        self.heads = nn.Sequential(nn.Linear(dim, classes))

    def forward(self, x):
        x = self.conv_proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embedding
        return self.heads(self.ln(self.layers(x))[:, 0])


def _attention_fwd(tokens, dim, heads):
    projections = tokens * dim * 3 * dim * 2 + tokens * dim * dim * 2  # in_proj (q, k, v) and out_proj
    scores = 2 * heads * tokens * tokens * (dim // heads) * 2  # QK^T and AV
    return projections + scores


def test_a_vit_with_nn_multiheadattention_is_derived_with_its_output_projection():
    """nn.MultiheadAttention passes out_proj.weight to F.multi_head_attention_forward without
    calling out_proj: its parameters count in the attention's row, where its FLOPs ran (the model
    was refused: 'rows sum to ... whole model to ...')."""
    model = ViT()
    rows = _rows(model, 3, 64, 64)
    attention = rows["layers.0.self_attention"]
    assert attention.param_count == 3 * 192 * 192 + 3 * 192 + 192 * 192 + 192  # in_proj + out_proj
    assert attention.fwd_flops == _attention_fwd(17, 192, 3) == 5_235_456
    assert attention.bwd_flops == 2 * attention.fwd_flops
    assert "layers.0.self_attention.out_proj" not in rows
    assert sum(r.param_count for r in rows.values()) == sum(p.numel() for p in model.parameters())


def test_nn_transformer_encoder_is_derived():
    layer = nn.TransformerEncoderLayer(128, 4, 512, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    rows = _rows(model, 16, 128)
    tokens = 16
    for i in (0, 1):
        assert rows[f"layers.{i}.self_attn"].fwd_flops == _attention_fwd(tokens, 128, 4)
        assert rows[f"layers.{i}.linear1"].fwd_flops == tokens * 128 * 512 * 2
    # the first layer has no input gradient: its in_proj's backward is its weight gradient alone
    in_proj = tokens * 128 * 3 * 128 * 2
    assert rows["layers.0.self_attn"].bwd_flops == 2 * _attention_fwd(tokens, 128, 4) - in_proj
    assert rows["layers.1.self_attn"].bwd_flops == 2 * _attention_fwd(tokens, 128, 4)
    assert sum(r.param_count for r in rows.values()) == sum(p.numel() for p in model.parameters())


class WindowAttention(nn.Module):
    """Swin's pattern (torchvision.models.swin_transformer.ShiftedWindowAttention): a parameter of
    its own, and qkv / proj Linear children whose weights a function uses without calling them."""

    def __init__(self, dim=64, heads=2):
        super().__init__()
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.relative_position_bias_table = nn.Parameter(torch.zeros(heads, 1, 1))
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = nn.functional.linear(x, self.qkv.weight, self.qkv.bias).reshape(b, t, 3, self.heads, -1).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        attn = (q @ k.transpose(-2, -1) + self.relative_position_bias_table).softmax(-1)
        y = (attn @ v).transpose(1, 2).reshape(b, t, d)
        return nn.functional.linear(y, self.proj.weight, self.proj.bias)


def test_weights_used_without_calling_their_module_count_where_they_ran():
    model = nn.Sequential(nn.Linear(64, 64), WindowAttention())
    rows = _rows(model, 49, 64)
    assert rows["1"].param_count == 64 * 192 + 192 + 64 * 64 + 64 + 2
    assert rows["1"].fwd_flops == _attention_fwd(49, 64, 2)
    assert set(rows) == {"0", "1"}


def test_unused_parameters_are_named():
    class Unused(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.aux = nn.Linear(8, 8), nn.Linear(8, 4)

        def forward(self, x):
            return self.fc(x)

    with pytest.raises(DeriveError, match=r"36 parameters get no gradient .*aux\.bias, aux\.weight"):
        _rows(Unused(), 8)


def test_a_backward_beyond_its_bound_is_refused_naming_the_layer(monkeypatch):
    """Torch's own dense count of a grouped convolution's weight gradient (what the derivation
    used to write) is refused by the ratio check."""
    from torch.utils.flop_counter import FlopCounterMode

    import real.derive

    monkeypatch.setattr(real.derive, "flop_counter", lambda: FlopCounterMode(display=False))
    model = nn.Sequential(nn.Conv2d(8, 8, 3), nn.Conv2d(8, 8, 3, groups=8))
    with pytest.raises(DeriveError, match=r"'1' counts 9x its forward FLOPs in its backward .* at most 3x"):
        _rows(model, 8, 12, 12)
    assert MAX_BACKWARD_RATIO["layer"] == 3.0


def test_every_row_of_every_block_is_within_the_bound():
    for model, shape in ((MBConv(), (40, 28, 28)), (ViT(), (3, 64, 64)), (CNBlock(), (96, 16, 16))):
        for row in _rows(model, *shape).values():
            assert row.bwd_flops <= 2 * row.fwd_flops, row


TORCHVISION_MODELS = ("resnet50", "efficientnet_b0", "convnext_tiny", "vit_b_16", "swin_t")


@pytest.mark.parametrize("name", TORCHVISION_MODELS)
def test_torchvision_models_where_torchvision_imports(name):
    """Where a torchvision that imports beside the installed torch is there (not the CPU torch
    2.13.0 of CI: checked by hand with torch 2.14.1 and torchvision 0.29.1), its models derive with
    torchvision's own published parameter count and 2 x its published multiply-accumulates
    (``Weights.meta['num_params']`` and ``['_ops']``, GMACs at 224 x 224, rounded to 3 decimals),
    and a backward of about twice the forward."""
    try:
        import torchvision
    except Exception as err:  # PyPI's torchvision beside torch 2.13.0: "operator torchvision::nms does not exist"
        pytest.skip(f"torchvision does not import here ({type(err).__name__})")
    weights = torchvision.models.get_model_weights(name).DEFAULT
    rows = _rows(lambda: torchvision.models.get_model(name), 3, 224, 224).values()
    fwd = sum(r.fwd_flops for r in rows)
    assert sum(r.param_count for r in rows) == weights.meta["num_params"]
    assert fwd / 1e9 == pytest.approx(2 * weights.meta["_ops"], abs=2 * 0.0005 + 1e-3)
    assert 1.9 < sum(r.bwd_flops for r in rows) / fwd <= 2
    assert all(r.bwd_flops <= 2 * r.fwd_flops for r in rows)
