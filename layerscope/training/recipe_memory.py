"""``layerscope.memory`` (and ``layerscope memory``) given a training recipe's name: the step
``layerscope train RECIPE`` runs, so that ``memory RECIPE --mode training --fit SIZE`` answers
for ``train RECIPE --memory-limit SIZE``.

A recipe's name stands for the model the recipe builds (its own random initialisation, made
without touching the caller's random state), fed one sample of its data's shape (batch from
``batch_size``; ``inputs`` where given), stepped by the recipe's optimizer built as ``train``
builds it (unless ``optimizer`` names another), with ``train_step``'s loss (the recipe's own:
checked). Any other model goes to ``analysis.memory_usage.memory`` as given (optimizer default
adam)."""
from __future__ import annotations

from typing import Any

import torch

from layerscope.analysis.memory_settings import MemorySettings, memory_settings
from layerscope.core.records.memory import MemoryReport


def memory(model: Any = None, inputs: Any = None, *, settings: MemorySettings | None = None,
           kwargs: dict[str, Any] | None = None, **overrides: Any) -> MemoryReport:
    """``analysis.memory_usage.memory`` (see it for every argument; ``settings``: a
    ``MemorySettings``, keyword arguments override its fields), with a training recipe's name
    resolved as the module's doc says. ``optimizer``: None is the recipe's own optimizer (adam
    for a model that is not a recipe's)."""
    from layerscope.analysis.memory_usage import memory as analysed
    from layerscope.training.recipes import RECIPES, make_optimizer

    s = memory_settings(settings, model, inputs, overrides)
    recipe = RECIPES.get(s.model) if isinstance(s.model, str) \
        and not s.fit_seq else None  # fit_seq: for a language model, by name
    if recipe is None:
        return analysed(settings=s, kwargs=kwargs)
    from layerscope.training.data import DATASETS

    shape = DATASETS[recipe.data].shape
    if recipe.image_size:
        shape = (shape[0], recipe.image_size, recipe.image_size)
    with torch.random.fork_rng(devices=[]):
        module = recipe.build()
    name, lr = recipe.optimizer, recipe.lr
    optimizer, inputs = s.optimizer, s.inputs
    chosen = optimizer if optimizer is not None else (
        lambda params: make_optimizer(name, params, lr))
    given = inputs if inputs is not None else ["1x" + "x".join(map(str, shape))]
    report = analysed(settings=MemorySettings.of(s, model=module, inputs=given,
                                                 optimizer=chosen), kwargs=kwargs)
    report.model = recipe.name
    if report.optimizer is None:  # inference
        report.notes.append(f"{recipe.name}: the recipe's model")
        return report
    report.optimizer = optimizer if isinstance(optimizer, str) else (
        f"{name} (the recipe's)" if optimizer is None else "custom")
    report.notes.append(f"{recipe.name}: the recipe's model, "
                        + (f"its {recipe.data} data's sample shape ({'x'.join(map(str, shape))}), "
                           if inputs is None else "")
                        + (f"its optimizer ({name}, lr {lr:g}) " if optimizer is None else "")
                        + f"and its loss ({recipe.loss}), as layerscope train steps it")
    return report
