"""A ``layerscope train`` run folder or checkpoint as a model: the recipe's module with the
trained weights. The router (``frontends.torch_module``) sniffs run folders and calls
``load_trained`` through ``frontends.run_files.load_run``."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch.nn as nn

from layerscope.core.errors import UserError


@dataclass
class TrainedModel:
    module: nn.Module  # in eval mode, with the trained weights
    recipe: Any  # training.recipes.Recipe
    state: dict[str, Any]  # the bundle: model, config, classes, ...
    path: str  # the file the weights came from

    @property
    def input_shape(self) -> tuple[int, ...]:
        """One sample as the recipe trains on it (channels first, no batch dimension)."""
        from layerscope.training.data import DATASETS

        shape = DATASETS[self.recipe.data].shape
        size = self.recipe.image_size
        return (shape[0], size, size) if size else tuple(shape)


def weights_file(path: str) -> str:
    """A run folder's final ``model.pt`` (its newest epoch checkpoint when there is none yet);
    any other path is taken as a checkpoint file."""
    from layerscope.training import checkpoint as ckpt

    if os.path.isdir(path) and os.path.isfile(os.path.join(path, "model.pt")):
        return os.path.join(path, "model.pt")
    return ckpt.resolve_checkpoint(path)


def load_trained(path: str) -> TrainedModel:
    """The recipe's model with the trained weights (loaded with ``weights_only=True``)."""
    from layerscope.analysis import modes
    from layerscope.training import checkpoint as ckpt
    from layerscope.training.recipes import lookup

    source = weights_file(path)
    state = ckpt.load(source)
    config = state["config"]
    name = config.get("recipe") or state.get("recipe")
    if not name:
        raise UserError(f"{source}: the checkpoint names no recipe")
    recipe = lookup(name)
    module = recipe.build()
    ckpt.load_weights(module, state, source)
    modes.set_mode(module, False)
    return TrainedModel(module, recipe, state, source)
