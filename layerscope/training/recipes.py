"""Training recipes: model, data, optimizer, schedule and defaults of the reference studies.

What differs between recipes is data here (which optimizer, scheduler and loss by name, the input
size, the weights a transfer-learning recipe starts from); the training loop reads these fields
and never asks which recipe it runs."""
from __future__ import annotations

import glob
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from layerscope.analysis.train_step import LOSSES
from layerscope.core.errors import LayerscopeWarning, UserError, first_line
from layerscope.training.checkpoint import is_state_dict

# optimizer name -> (parameters, lr) -> optimizer; the CLI's --optimizer choices
_OPTIMIZERS: dict[str, Callable[[Any, float], torch.optim.Optimizer]] = {
    "sgd": lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9),
    "adam": lambda params, lr: torch.optim.Adam(params, lr=lr),
    "adamw": lambda params, lr: torch.optim.AdamW(params, lr=lr),
    "adadelta": lambda params, lr: torch.optim.Adadelta(params, lr=lr),
}
OPTIMIZERS = tuple(_OPTIMIZERS)
# scheduler name -> (optimizer, recipe) -> scheduler stepped once per epoch; None: constant lr
SCHEDULERS: dict[str | None, Callable[[torch.optim.Optimizer, Any], Any]] = {
    None: lambda optimizer, recipe: None,
    "step": lambda optimizer, recipe: torch.optim.lr_scheduler.StepLR(optimizer, 1,
                                                                      gamma=recipe.gamma),
}


class DigitsCNN(nn.Module):
    """A small CNN for scikit-learn's 8x8 digits (1,797 images, 10 classes)."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


@dataclass(frozen=True)
class Recipe:
    name: str
    data: str  # key of training.data.DATASETS
    build: Callable[[], nn.Module]
    optimizer: str
    lr: float
    batch_size: int
    epochs: int
    eval_batch_size: int = 1000
    scheduler: str | None = None  # "step" = StepLR(step_size=1, gamma)
    gamma: float = 0.7
    augment: bool = False
    image_size: int | None = None
    loss: str = "cross_entropy"  # or "nll" for models ending in log_softmax
    notes: str = ""
    extras: dict[str, Any] = field(default_factory=dict)
    # Transfer learning: (the built model, --weights FILE or None) -> a note saying what was
    # loaded. The recipe's ``build`` already replaced the layers that are trained from scratch.
    init_weights: Callable[[nn.Module, str | None], str] | None = None

    def __post_init__(self):  # a recipe naming an unknown choice is a programming error
        for kind, value, known in (("optimizer", self.optimizer, OPTIMIZERS),
                                   ("scheduler", self.scheduler, SCHEDULERS),
                                   ("loss", self.loss, LOSSES)):
            if value not in known:
                raise ValueError(f"recipe {self.name!r}: unknown {kind} {value!r}")


def _mnist_cnn() -> nn.Module:
    from layerscope.frontends.zoo import MnistCNN

    return MnistCNN()


def _resnet20() -> nn.Module:
    from layerscope.frontends.zoo import ResNet20

    return ResNet20()


def _imagenet_resnet50(model: nn.Module, weights: str | None) -> str:
    return load_pretrained_resnet50(model, weights)


def _resnet50_cifar100() -> nn.Module:
    import torchvision

    model = torchvision.models.resnet50(weights=None)
    model.fc = nn.Linear(model.fc.in_features, 100)
    return model


RECIPES = {
    "digits-cnn": Recipe("digits-cnn", "digits", DigitsCNN, "adam", 1e-3, 64, 15,
                         eval_batch_size=360,
                         notes="scikit-learn's bundled digits: real data, no download"),
    "mnist-cnn": Recipe("mnist-cnn", "mnist", _mnist_cnn, "adadelta", 1.0, 64, 14,
                        scheduler="step", gamma=0.7, loss="nll",
                        notes="PyTorch examples/mnist: Adadelta lr 1.0, StepLR gamma 0.7"),
    "cifar10-resnet20": Recipe("cifar10-resnet20", "cifar10", _resnet20, "adam", 1e-3, 128, 10,
                               augment=True, notes="ResNet-20, Adam, batch 128, 10 epochs"),
    "cifar100-resnet50": Recipe("cifar100-resnet50", "cifar100", _resnet50_cifar100, "adam",
                                1e-4, 64, 5, augment=True, image_size=224,
                                notes="ImageNet ResNet-50, new 100-way head, fine-tuned",
                                init_weights=_imagenet_resnet50),
}


def lookup(name: str) -> Recipe:
    if name not in RECIPES:
        import difflib

        close = difflib.get_close_matches(name, RECIPES, n=2)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise UserError(f"unknown recipe {name!r}.{hint} Recipes: {', '.join(RECIPES)}")
    return RECIPES[name]


def make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    if name in _OPTIMIZERS:
        return _OPTIMIZERS[name](params, lr)
    raise UserError(f"unknown optimizer {name!r}: use one of {', '.join(OPTIMIZERS)}")


def make_scheduler(recipe: Recipe, optimizer: torch.optim.Optimizer):
    """The recipe's learning-rate schedule (None: constant)."""
    return SCHEDULERS[recipe.scheduler](optimizer, recipe)


def loss_function(recipe: Recipe):
    return LOSSES[recipe.loss]


def load_pretrained_resnet50(model: nn.Module, weights: str | None) -> str:
    """ImageNet weights from ``weights`` or torchvision's cache; the new head stays random.

    Returns a sentence saying what was loaded (the caller reports it)."""
    path = weights
    if path is None:
        hub = os.path.join(torch.hub.get_dir(), "checkpoints", "resnet50-*.pth")
        found = sorted(glob.glob(hub))
        path = found[-1] if found else None
    if path is None:
        warnings.warn("no ImageNet weights for resnet50 (pass --weights FILE or put torchvision's "
                      "resnet50 weights in its cache); training from random initialisation",
                      LayerscopeWarning, stacklevel=2)
        return "random initialisation (no pretrained weights found)"
    if not os.path.isfile(path):
        raise UserError(f"weights {path}: no such file", arguments="weights")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise UserError(f"weights {path} could not be loaded: {first_line(exc)}",
                        arguments="weights") from exc
    if not is_state_dict(state):
        raise UserError(f"weights {path} holds a {type(state).__name__}, not a state dict "
                        "(parameter names to tensors, as torch.save(model.state_dict()) writes)",
                        arguments="weights")
    state = {k: v for k, v in state.items() if not k.startswith("fc.")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or any(not k.startswith("fc.") for k in missing):
        raise UserError(f"weights {path} does not hold torchvision resnet50 weights",
                        arguments="weights")
    return f"ImageNet weights from {path} (new 100-way head)"
