"""Built-in models: the reference workloads plus every torchvision classifier by its name."""
from __future__ import annotations

import contextlib
import difflib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from layerscope.core.limits import check_input_bytes
from layerscope.frontends import llm_configs, llm_models


class BasicBlock(nn.Module):
    """CIFAR ResNet basic block; a 1x1 conv + BN projection where the shape changes (option B)."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet20(nn.Module):
    """ResNet-20 for CIFAR-10 (He et al. 2016, section 4.2): 3x3 stem with 16 channels, three
    stages of three basic blocks at 16/32/64 channels, strides 1/2/2, global average pool,
    linear."""

    def __init__(self, num_classes: int = 10, blocks: int = 3):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        stages, in_planes = [], 16
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            layers = []
            for i in range(blocks):
                layers.append(BasicBlock(in_planes, planes, stride if i == 0 else 1))
                in_planes = planes
            stages.append(nn.Sequential(*layers))
        self.layer1, self.layer2, self.layer3 = stages
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        out: torch.Tensor = self.fc(torch.flatten(self.pool(x), 1))
        return out


class MnistCNN(nn.Module):
    """The network of PyTorch's examples/mnist/main.py."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


@dataclass(frozen=True)
class ZooEntry:
    name: str
    build: Callable[[], nn.Module]
    input_shape: tuple[int, ...]  # without the batch dimension
    source: str
    input_dtype: torch.dtype = torch.float32
    group: str = ""  # the heading 'layerscope models' lists it under; default: its source


# Inputs torchvision's models need beyond 224x224 RGB.
_TV_INPUT = {"inception_v3": (3, 299, 299)}
# Auxiliary classifier heads are off by default: they only run in training and users expect the
# inference parameter counts (GoogLeNet 6,624,904).
_TV_KWARGS = {"googlenet": {"aux_logits": False, "init_weights": False},
              "inception_v3": {"aux_logits": False, "init_weights": False}}


def _torchvision_names() -> list[str]:
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models))


def _torchvision_entry(name: str) -> ZooEntry:
    import torchvision

    def build() -> nn.Module:
        model: nn.Module = torchvision.models.get_model(name, weights=None,
                                                        **_TV_KWARGS.get(name, {}))
        return model

    return ZooEntry(name, build, _TV_INPUT.get(name, (3, 224, 224)), "torchvision")


_OWN = {
    "resnet20": ZooEntry("resnet20", ResNet20, (3, 32, 32), "layerscope"),
    "mnist-cnn": ZooEntry("mnist-cnn", MnistCNN, (1, 28, 28), "layerscope"),
}


def _llm_entry(cfg: llm_configs.LLMConfig) -> ZooEntry:
    # token ids (1, S): S = the preset's default sequence length (gpt2: its 1024 positions)
    return ZooEntry(cfg.name, lambda: llm_models.build(cfg), (cfg.default_seq_len,),
                    "layerscope", torch.int64, "LLM")


# The LLM presets (frontends/llm_configs.py); analyses build them on the meta device.
_LLM = {name: _llm_entry(cfg) for name, cfg in llm_configs.PRESETS.items()}


def is_llm(name: str) -> bool:
    return name in _LLM


DEFAULT_SEED = 0  # every command builds models under this seed unless told otherwise (--seed)


@contextlib.contextmanager
def seeded(seed: int = DEFAULT_SEED) -> Iterator[None]:
    """Random weights drawn from ``seed``, so that ``export`` then ``verify`` (or two runs of one
    command) see the same model; the caller's global RNG state is restored afterwards.

    Only the CPU generator is forked and seeded (models are built on the CPU): ``manual_seed``
    would also reseed the caller's CUDA generators."""
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        yield


def build(entry: ZooEntry, seed: int = DEFAULT_SEED, meta: bool = False) -> nn.Module:
    """The one place built-in models are instantiated. ``meta``: on the meta device (no weight
    memory, no init time; static analysis never reads values). An LLM preset with real weights
    (commands that run the model) is refused above the input-size limit (core.limits): Llama-3-8B
    would need 32 GB of float32 weights."""
    if not meta and entry.group == "LLM":
        with torch.device("meta"):
            params = sum(p.numel() for p in entry.build().parameters())
        check_input_bytes(entry.name, [((params,), 4)],
                          noun="its float32 weights (analyze counts it without them, on the "
                               "meta device)")
    if meta:
        try:
            with torch.device("meta"):
                return entry.build()
        except (NotImplementedError, RuntimeError):
            # The constructor computes with tensors (torchvision's RegNet derives its widths
            # with .tolist()), which the meta device cannot give values for: build on the CPU
            # with only parameters and buffers sent to meta as they are registered.
            with _parameters_on_meta():
                return entry.build()
    with seeded(seed):
        return entry.build()


@contextlib.contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Every parameter and buffer a module registers goes to the meta device at once, so
    building a large model costs one layer's tensor at a time (the approach of accelerate's
    ``init_empty_weights``); the two methods are restored on exit."""
    register_parameter, register_buffer = nn.Module.register_parameter, nn.Module.register_buffer

    def parameter(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        register_parameter(module, name, param)
        if param is not None:
            moved = param.to("meta")
            module._parameters[name] = type(param)(moved, requires_grad=param.requires_grad)

    def buffer(module: nn.Module, name: str, tensor: torch.Tensor | None,
               persistent: bool = True) -> None:
        register_buffer(module, name, None if tensor is None else tensor.to("meta"), persistent)

    nn.Module.register_parameter = parameter  # type: ignore[method-assign,assignment]
    nn.Module.register_buffer = buffer  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        nn.Module.register_parameter = register_parameter  # type: ignore[method-assign]
        nn.Module.register_buffer = register_buffer  # type: ignore[method-assign]


def names() -> list[str]:
    return sorted(_OWN) + sorted(_LLM) + _torchvision_names()


def groups() -> dict[str, list[str]]:
    """The built-in names under the headings ``layerscope models`` prints."""
    return {"layerscope": sorted(_OWN), "LLM": list(_LLM),
            "torchvision": _torchvision_names()}


def lookup(name: str) -> ZooEntry | None:
    if name in _OWN:
        return _OWN[name]
    if name in _LLM:
        return _LLM[name]
    if name in _torchvision_names():
        return _torchvision_entry(name)
    return None


def suggestions(name: str, n: int = 3) -> list[str]:
    return difflib.get_close_matches(name, names(), n=n, cutoff=0.5)
