"""The large CNNs of the zoo, in plain torch (torchvision does not install beside this torch).

ResNet-50/101/152, Inception-v3 and VGG-16 follow torchvision's definitions layer for layer (so
their parameter counts equal torchvision's); AlexNet and GoogLeNet are in ``real.models.classic``,
the transformers in ``real.models.transformers`` and ``real.models.presets``. Each model is an
``nn.Sequential`` of named pipeline-splittable units (stem, blocks, head). Dropout is left out:
it has no parameters and no FLOPs the counter sees. These models do not run in the CPU
harness; ``real.derive`` builds them on the meta device.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import torch
from torch import nn


def imagenet_batch(size: int) -> Callable[[int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]:
    """Synthetic ImageNet-shaped batches: 3 x size x size images, 1000 classes."""

    def make(batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(batch_size, 3, size, size, generator=generator)
        return x, torch.randint(0, 1000, (batch_size,), generator=generator)

    return make


def _classifier_head(features: int, classes: int = 1000) -> nn.Sequential:
    return nn.Sequential(OrderedDict(pool=nn.AdaptiveAvgPool2d(1), flatten=nn.Flatten(), fc=nn.Linear(features, classes)))


# -- ResNet-50, -101, -152 (torchvision v1.5: the stride sits on the 3x3 convolution) ---------------------

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


RESNET_BLOCKS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}
"""Bottleneck blocks per stage (He et al. 2016, Table 1)."""


def build_resnet(depth: int) -> nn.Sequential:
    units: OrderedDict[str, nn.Module] = OrderedDict()
    units["stem"] = nn.Sequential(OrderedDict(
        conv1=nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), bn1=nn.BatchNorm2d(64),
        relu=nn.ReLU(inplace=True), maxpool=nn.MaxPool2d(3, stride=2, padding=1),
    ))
    in_ch = 64
    stages = zip((64, 128, 256, 512), RESNET_BLOCKS[depth], (1, 2, 2, 2), strict=True)
    for stage, (planes, blocks, stride) in enumerate(stages, start=1):
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
