"""One training step: the body ``layerscope train`` runs for each batch and ``layerscope memory
--mode training`` (so ``--fit``) tracks, one definition for both, so that what the memory
figures count is what the training run allocates.

The step, in order: ``optimizer.zero_grad(set_to_none=...)``, the forward, the loss (under
``autocast`` with the forward), backward from the loss, ``optimizer.step()`` (through a
``GradScaler`` where one is given). ``done(phase, value)`` is called as each phase ends
(``zero_grad``, ``forward`` with the outputs, ``loss`` with the loss, ``backward``,
``optimizer``): the training loop times the phases there, the memory tracker enters its next
phase. The forward's outputs and the loss stay alive to the end of the step (the loop reads its
accuracy and loss from them).

The loss of a classifier (a forward returning one floating tensor of shape (batch, classes))
is the recipes' own: ``nll`` when the model ends in ``log_softmax`` (the output's autograd node
says so), else ``cross_entropy``, against class-index labels (int64, one per sample), as
``layerscope train`` feeds them. Any other output (a language model's logits, a tuple, a dict)
has no such loss: the step backpropagates a gradient of ones shaped like each output that
requires one (its sum as the loss), freed once backward is done."""
from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F

# loss name -> function of (outputs, labels); the recipes' choices
LOSSES: dict[str, Callable[..., torch.Tensor]] = {"cross_entropy": F.cross_entropy,
                                                    "nll": F.nll_loss}
LABELS_DTYPE = torch.int64  # class indices, as a DataLoader collates Python ints


def _nothing(phase: str, value: Any) -> None:
    return None


def step(model: Any, args: tuple, kwargs: dict[str, Any], loss: Callable[[Any], Any],
         optimizer: torch.optim.Optimizer, *, set_to_none: bool = True, autocast: Any = None,
         scaler: Any = None, done: Callable[[str, Any], None] = _nothing) -> tuple[Any, Any]:
    """One step of ``model`` on ``args``/``kwargs`` (see the module's doc). ``loss(outputs)``
    returns the loss (a tensor) or ``(tensors, gradients)`` to backpropagate from. Returns the
    outputs and the loss tensor (None for ``(tensors, gradients)``, whose gradients are freed
    after backward)."""
    optimizer.zero_grad(set_to_none=set_to_none)
    done("zero_grad", None)
    with autocast if autocast is not None else nullcontext():
        out = model(*args, **kwargs)
        done("forward", out)
        value = loss(out)
    done("loss", value)
    roots, grads = value if isinstance(value, tuple) else ([value], None)
    if scaler is not None:
        roots = [scaler.scale(r) for r in roots]
    if isinstance(value, tuple):
        value = None
    torch.autograd.backward(roots, grads)
    del roots, grads
    done("backward", None)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    done("optimizer", None)
    return out, value


def classifier_loss(out: Any) -> str | None:
    """The loss a recipe gives a model with these outputs (see the module's doc): ``nll``,
    ``cross_entropy``, or None (no classifier's output)."""
    if not (isinstance(out, torch.Tensor) and out.dim() == 2 and out.is_floating_point()
            and out.requires_grad):
        return None
    node = out.grad_fn
    return "nll" if node is not None and node.name().startswith("LogSoftmaxBackward") \
        else "cross_entropy"


def labels_for(out: torch.Tensor) -> torch.Tensor:
    """Class-index labels for a classifier's outputs: one int64 per sample (zeros: what they
    hold does not change what the step allocates)."""
    return torch.zeros(out.shape[0], dtype=LABELS_DTYPE, device=out.device)
