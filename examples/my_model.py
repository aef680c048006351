"""An example of your own model for `scalebench layers` (README, "Your own model"): a small
MobileNet-style image classifier, with a depthwise-separable block (a grouped convolution, which
the layer table counts per group).

    scalebench layers examples/my_model.py:Net --input-shape 32,3,224,224 -o layers.csv

`Net` is called with no arguments and returns the nn.Module; the table is derived on the meta
device, so nothing is allocated whatever the size.
"""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(32)
        self.depthwise = nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False)  # one filter per channel
        self.pointwise = nn.Conv2d(32, 64, 1, bias=False)
        self.head = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.stem(x)))
        x = torch.relu(self.pointwise(torch.relu(self.depthwise(x))))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))
