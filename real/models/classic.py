"""AlexNet and GoogLeNet (Inception-v1) as torchvision defines them, in plain torch.

AlexNet: torchvision/models/alexnet.py (the one-GPU variant of Krizhevsky et al. 2012 with
64-192-384-256-256 filters, Krizhevsky 2014 "One weird trick", arXiv:1404.5997). GoogLeNet:
torchvision/models/googlenet.py without the auxiliary classifiers (they do not run in eval
mode and torchvision's published count excludes them); torchvision adds batch norm to every
convolution and, as its source notes, uses a 3x3 convolution where the paper's branch has 5x5
(kept for its pretrained weights). Dropout is left out (no parameters, no counted FLOPs).
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

from real.models.large import BasicConv2d, _classifier_head


def build_alexnet() -> nn.Sequential:
    features = nn.Sequential(OrderedDict(
        conv1=nn.Conv2d(3, 64, 11, stride=4, padding=2), relu1=nn.ReLU(inplace=True), pool1=nn.MaxPool2d(3, stride=2),
        conv2=nn.Conv2d(64, 192, 5, padding=2), relu2=nn.ReLU(inplace=True), pool2=nn.MaxPool2d(3, stride=2),
        conv3=nn.Conv2d(192, 384, 3, padding=1), relu3=nn.ReLU(inplace=True),
        conv4=nn.Conv2d(384, 256, 3, padding=1), relu4=nn.ReLU(inplace=True),
        conv5=nn.Conv2d(256, 256, 3, padding=1), relu5=nn.ReLU(inplace=True), pool5=nn.MaxPool2d(3, stride=2),
    ))
    return nn.Sequential(OrderedDict(
        features=features,
        fc6=nn.Sequential(OrderedDict(pool=nn.AdaptiveAvgPool2d(6), flatten=nn.Flatten(),
                                      fc=nn.Linear(256 * 6 * 6, 4096), relu=nn.ReLU(inplace=True))),
        fc7=nn.Sequential(OrderedDict(fc=nn.Linear(4096, 4096), relu=nn.ReLU(inplace=True))),
        fc8=nn.Sequential(OrderedDict(fc=nn.Linear(4096, 1000))),
    ))


class Inception(nn.Module):
    """GoogLeNet's module: 1x1 | 1x1 -> 3x3 | 1x1 -> 3x3 (torchvision's stand-in for 5x5) | pool -> 1x1."""

    def __init__(self, in_ch: int, ch1x1: int, ch3x3red: int, ch3x3: int, ch5x5red: int, ch5x5: int, pool_proj: int):
        super().__init__()
        self.branch1 = BasicConv2d(in_ch, ch1x1, 1)
        self.branch2 = nn.Sequential(BasicConv2d(in_ch, ch3x3red, 1), BasicConv2d(ch3x3red, ch3x3, 3, padding=1))
        self.branch3 = nn.Sequential(BasicConv2d(in_ch, ch5x5red, 1), BasicConv2d(ch5x5red, ch5x5, 3, padding=1))
        self.branch4 = nn.Sequential(nn.MaxPool2d(3, stride=1, padding=1, ceil_mode=True), BasicConv2d(in_ch, pool_proj, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)


GOOGLENET_MODULES = {  # name: (in, 1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool proj): Szegedy et al. 2015, Table 1
    "inception3a": (192, 64, 96, 128, 16, 32, 32), "inception3b": (256, 128, 128, 192, 32, 96, 64),
    "inception4a": (480, 192, 96, 208, 16, 48, 64), "inception4b": (512, 160, 112, 224, 24, 64, 64),
    "inception4c": (512, 128, 128, 256, 24, 64, 64), "inception4d": (512, 112, 144, 288, 32, 64, 64),
    "inception4e": (528, 256, 160, 320, 32, 128, 128),
    "inception5a": (832, 256, 160, 320, 32, 128, 128), "inception5b": (832, 384, 192, 384, 48, 128, 128),
}


def build_googlenet() -> nn.Sequential:
    units: OrderedDict[str, nn.Module] = OrderedDict(stem=nn.Sequential(OrderedDict(
        conv1=BasicConv2d(3, 64, 7, stride=2, padding=3), maxpool1=nn.MaxPool2d(3, stride=2, ceil_mode=True),
        conv2=BasicConv2d(64, 64, 1), conv3=BasicConv2d(64, 192, 3, padding=1),
        maxpool2=nn.MaxPool2d(3, stride=2, ceil_mode=True),
    )))
    for name, dims in GOOGLENET_MODULES.items():
        if name == "inception4a":
            units["maxpool3"] = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        elif name == "inception5a":
            units["maxpool4"] = nn.MaxPool2d(2, stride=2, ceil_mode=True)
        units[name] = Inception(*dims)
    units["head"] = _classifier_head(1024)
    return nn.Sequential(units)
