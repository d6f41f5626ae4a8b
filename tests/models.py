"""The test zoo: small models and factories used by several tests."""
import torch
import torch.nn as nn


class TinyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc(x.flatten(1))


def tiny_with_example():
    """A factory returning (module, example_inputs)."""
    return TinyNet(), (torch.randn(2, 3, 8, 8),)


def tiny():
    return TinyNet()


class Huge(nn.Module):
    """40 layers of 16384x16384 Linear: 10.7 G parameters, 42.9 GB of fp32 weights."""

    def __init__(self, layers: int = 40, width: int = 16384):
        super().__init__()
        self.layers = nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(layers)])

    def forward(self, x):
        return self.layers(x)


def huge_on_meta():
    with torch.device("meta"):
        return Huge(), (torch.empty(1, 16384, device="meta"),)


def not_a_module():
    return 42
