"""One run of the model under a tracker and the counting mode, and the error it raises when the
model itself rejects its inputs."""
from __future__ import annotations

import contextlib

import torch
from torch.utils import _pytree as pytree

from layerscope.analysis.capture.tensors import tensor_nbytes
from layerscope.core.errors import first_line


class ModelRunError(Exception):
    """The model itself rejected the inputs (wrong shape, wrong dtype, ...)."""


def model_error(exc: Exception) -> ModelRunError:
    """The model's own exception as a one-line ``ModelRunError``."""
    return ModelRunError(first_line(exc, with_type=True))


def run_model(model_call, tracker, mode, training: bool, functions: bool = False) -> int:
    """Run forward (and, in training, backward from ones) under ``tracker`` and ``mode``;
    returns the bytes of forward's output tensors. ``functions``: also charge each module's own
    forward ops to the torch function that ran them (``ModuleStats.functions``)."""
    named = contextlib.nullcontext()
    if functions:
        from layerscope.analysis.capture.functions import FunctionTracker

        named = mode.functions = FunctionTracker(tracker)
    with tracker, mode, torch.set_grad_enabled(training):
        with named:  # forward only: torch.autograd.backward is no function of a module
            out = model_call()
        outs = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        if training:
            diff = _roots([t for t in outs if t.requires_grad])
            if diff:
                mode.paused = True
                grads = [torch.ones_like(t) for t in diff]
                mode.paused = False
                torch.autograd.backward(diff, grads)
    return sum(map(tensor_nbytes, outs))


def _roots(outs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The outputs backward starts from: those no other output was computed from. A model
    returning its logits and the loss made from them (nanoGPT, Hugging Face with labels) is
    trained by ``loss.backward()``; a gradient seeded into the logits as well would add an
    accumulation the training step does not run."""
    if len(outs) < 2:
        return outs
    reached: set[object] = set()
    for t in outs:
        stack = [f for f, _ in t.grad_fn.next_functions] if t.grad_fn is not None else []
        while stack:
            node = stack.pop()
            if node is None or node in reached:
                continue
            reached.add(node)
            stack.extend(f for f, _ in node.next_functions)
    return [t for t in outs if t.grad_fn is None or t.grad_fn not in reached] or outs
