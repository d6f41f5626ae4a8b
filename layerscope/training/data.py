"""Datasets for the training recipes: real (digits bundled with scikit-learn; MNIST / CIFAR from
``--data-dir``) or synthetic (deterministic tensors of the real shapes and class counts)."""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch.utils.data import Dataset, TensorDataset

from layerscope.core import values
from layerscope.core.errors import UserError, first_line

CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                   "ship", "truck"]


@dataclass(frozen=True)
class DataSpec:
    """What a recipe trains on."""

    name: str  # digits | mnist | cifar10 | cifar100
    shape: tuple[int, ...]  # one sample, channels first
    classes: int
    train_size: int
    val_size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]


DATASETS = {
    "digits": DataSpec("digits", (1, 8, 8), 10, 1437, 360, (0.0,), (1.0,)),
    "mnist": DataSpec("mnist", (1, 28, 28), 10, 60000, 10000, (0.1307,), (0.3081,)),
    "cifar10": DataSpec("cifar10", (3, 32, 32), 10, 50000, 10000, (0.4914, 0.4822, 0.4465),
                        (0.2470, 0.2435, 0.2616)),
    "cifar100": DataSpec("cifar100", (3, 32, 32), 100, 50000, 10000,
                         (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}


class SyntheticDataset(Dataset):
    """Sample i is a pure function of (seed, i): the same tensors in every process and order.

    Labels cycle through the classes; each image carries a faint class-dependent offset so a
    model can learn something, which keeps loss curves meaningful in smoke runs."""

    def __init__(self, shape: tuple[int, ...], classes: int, size: int, seed: int):
        self.shape, self.classes, self.size, self.seed = shape, classes, size, seed

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        if not 0 <= index < self.size:
            raise IndexError(index)
        gen = torch.Generator().manual_seed(values.derived_seed(self.seed, index,
                                                                factor=1_000_003))
        label = index % self.classes
        x = torch.randn(self.shape, generator=gen) + (label / self.classes - 0.5)
        return x, label


def _digits(seed: int) -> tuple[Dataset, Dataset, list[str]]:
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(data.target, dtype=torch.long)
    # fixed split: 80 % train / 20 % validation, shuffled once with the seed
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(y))
    train, val = order[:cut], order[cut:]
    names = [str(c) for c in data.target_names]
    return TensorDataset(x[train], y[train]), TensorDataset(x[val], y[val]), names


def _missing(spec: DataSpec, data_dir: str) -> UserError:
    return UserError(
        f"{spec.name} not found in data_dir {data_dir!r}: pass download to fetch it there, "
        f"point it at an existing copy, or use synthetic for generated data",
        arguments=("data_dir", "download", "synthetic"))


def _torchvision(spec: DataSpec, data_dir: str, download: bool, augment: bool,
                 image_size: int | None) -> tuple[Dataset, Dataset, list[str]]:
    import torchvision
    from torchvision import transforms as T

    cls = {"mnist": torchvision.datasets.MNIST, "cifar10": torchvision.datasets.CIFAR10,
           "cifar100": torchvision.datasets.CIFAR100}[spec.name]
    norm = [T.ToTensor(), T.Normalize(spec.mean, spec.std)]
    resize = [T.Resize(image_size)] if image_size and image_size != spec.shape[-1] else []
    train_tf = list(resize)
    if augment:
        # the standard CIFAR augmentation (He et al. 2016): 4-pixel padded crop, horizontal flip
        train_tf += [T.RandomCrop(image_size or spec.shape[-1], padding=4),
                     T.RandomHorizontalFlip()]
    try:
        train = cls(data_dir, train=True, download=download, transform=T.Compose(train_tf + norm))
        val = cls(data_dir, train=False, download=download, transform=T.Compose(resize + norm))
    except RuntimeError as exc:
        if "not found" in str(exc).lower() or "corrupted" in str(exc).lower():
            raise _missing(spec, data_dir) from exc
        raise UserError(f"{spec.name} in {data_dir!r} could not be read: "
                        f"{first_line(exc)}") from exc
    except OSError as exc:  # --download without a network, unreadable files
        raise UserError(f"{spec.name}: {first_line(exc)}; use synthetic to run without the "
                        "data", arguments="synthetic") from exc
    names = list(getattr(train, "classes", [str(i) for i in range(spec.classes)]))
    return train, val, names


def datasets(name: str, *, synthetic: bool, data_dir: str | None, download: bool,
             augment: bool, seed: int, image_size: int | None = None,
             synthetic_size: tuple[int, int] | None = None) -> tuple[Dataset, Dataset, list[str]]:
    """(train, validation, class names) for a recipe's data."""
    spec = DATASETS[name]
    if synthetic:
        shape = spec.shape if not image_size else (spec.shape[0], image_size, image_size)
        n_train, n_val = synthetic_size or (spec.train_size, spec.val_size)
        names = [str(i) for i in range(spec.classes)]
        if name == "cifar10":
            names = CIFAR10_CLASSES
        return (SyntheticDataset(shape, spec.classes, n_train, seed),
                SyntheticDataset(shape, spec.classes, n_val, seed + 1), names)
    if name == "digits":
        return _digits(seed)
    data_dir = data_dir or os.path.join(os.path.expanduser("~"), ".cache", "layerscope", "data")
    if not download and not os.path.isdir(data_dir):
        raise _missing(spec, data_dir)
    return _torchvision(spec, data_dir, download, augment, image_size)

