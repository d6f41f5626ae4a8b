"""Train/eval mode set as ``nn.Module.train(mode)`` sets it, without calling a method the model
gave another meaning.

A model's ``train``/``eval`` are its own to override, and some mean something else by them:
pytorch/examples' forward-forward ``Layer.train(x_pos, x_neg)`` trains the layer, a model may
have an ``eval(loader)`` that evaluates it. Calling ``model.eval()`` (or
``nn.Module.train(model, mode)``, which calls ``child.train(mode)`` on every child) would run
them. Layerscope therefore never calls ``eval`` on a user's module, and calls a module's
``train`` only where it is ``nn.Module.train`` or an override with its signature
(``train(self, mode=True)``: a detection backbone that keeps its BatchNorm layers in eval mode
while training; the override sets the flags below it as it means to). Any other module gets its
``training`` flag set here, as the default method would, and its children are visited the same
way. Every flag comes back as it was afterwards (a model may mix train and eval submodules).
"""
from __future__ import annotations

import inspect
from typing import Any

Flags = list[tuple[Any, bool]]


def flags(model: Any) -> Flags:
    """Every submodule with its ``training`` flag (frozen TorchScript modules have none)."""
    return [(m, m.training) for m in model.modules() if hasattr(m, "training")]


def _takes_mode(method: Any) -> bool:
    """Whether a ``train`` override has ``nn.Module.train``'s signature: one parameter besides
    ``self``, named ``mode`` (``train(x_pos, x_neg)``, ``train(epochs=1)`` are other methods)."""
    try:
        params = list(inspect.signature(method).parameters.values())
    except (TypeError, ValueError):
        return False
    return len(params) == 1 and params[0].name == "mode" and params[0].kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.POSITIONAL_ONLY)


def _set(module: Any, training: bool) -> None:
    import torch.nn as nn

    method = getattr(type(module), "train", None)
    if isinstance(module, nn.Module) and method is not nn.Module.train \
            and _takes_mode(getattr(module, "train", None)):
        module.train(training)  # the model's own mode switch (it sets its submodules' flags)
        return
    if hasattr(module, "training"):
        module.training = training
    for child in module.children():
        _set(child, training)


def set_mode(model: Any, training: bool) -> Flags:
    """``model`` in training (True) or eval (False) mode, as ``model.train(training)`` puts it,
    without calling a ``train`` or ``eval`` that means something else; returns the flags as they
    were, for ``restore``."""
    saved = flags(model)
    _set(model, training)
    return saved


def restore(saved: Flags) -> None:
    """Put back the flags ``flags`` or ``set_mode`` returned."""
    for m, flag in saved:
        m.training = flag
