"""``layerscope.analyze``: static cost of a model as a Report. Which engine runs is decided here:
an ONNX file goes to the graph walk (``static_onnx``, no PyTorch loaded), everything else to the
fake-tensor capture (``analyze_torch``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from layerscope.core.errors import UserError
from layerscope.core.report import Report
from layerscope.frontends.detect import detect
from layerscope.ops.rules import ATTENTION_COUNTS

if TYPE_CHECKING:
    import torch
    import torch.nn as nn

MODES = ("inference", "training")


def analyze(model: str | nn.Module, inputs: Any = None, *, kwargs: dict[str, Any] | None = None,
            batch_size: int | None = None, depth: int | None = None,
            dtype: str | torch.dtype | None = None, mode: str = "inference",
            optimizer: str = "adam", functions: bool = False, seq_len: int | None = None,
            attention: str = "causal") -> Report:
    """Parameters, memory, MACs/FLOPs and bytes per layer, without running real arithmetic.

    ``model``: an ``nn.Module`` or a spec (``resnet50``, ``file.py:factory``, ``pkg.mod:factory``,
    ``model.pt``, ``model.onnx``). ``inputs``: forward's positional arguments — a tensor, a shape,
    or a tuple of tensors, shapes and other values (for ONNX: ``'NAME=1x3x224x224'`` strings);
    ``kwargs``: forward's keyword arguments. ``mode="training"`` adds
    the backward pass and gradient/optimizer-state bytes (``optimizer``: sgd, momentum, adam,
    adamw). ``functions``: split each container's "(own ops)" row into one row per torch
    function its forward calls ("layer1.0 (add)", "layer1.0 (relu)"; not for ONNX/TorchScript).
    ``seq_len``: the S of token-id inputs (B x S; the LLM presets default to 2048).
    ``attention``: "causal" (default) counts ``is_causal`` attention kernels as the lower
    triangle incl. the diagonal, s(s+1)/2 scores per head; "full" counts the whole matrix (what
    the math fallback executes). For mixture-of-experts LLMs ``totals.params_active`` is the
    parameters one token uses under expected routing (k of E experts).
    """
    if mode not in MODES:
        raise UserError(f"unknown mode {mode!r}: use inference or training")
    if attention not in ATTENTION_COUNTS:
        raise UserError(f"unknown attention counting {attention!r}: use "
                        f"{' or '.join(ATTENTION_COUNTS)}")
    ref = detect(model)
    if ref.is_onnx:
        model = ref.spec  # a pathlib.Path as its text
        if seq_len is not None:
            raise UserError("seq_len: for an ONNX model give the inputs' shapes with inputs",
                            arguments=("seq_len", "inputs"))
        from layerscope.analysis.static_onnx import analyze_onnx_spec

        return analyze_onnx_spec(model, inputs, batch_size, depth, dtype, mode)
    from layerscope.analysis.analyze_torch import analyze_module

    return analyze_module(model, inputs, kwargs, batch_size, depth, dtype, mode, optimizer,
                          functions, seq_len, attention)
