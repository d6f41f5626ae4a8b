"""``layerscope.analyze``: static cost of a model as a Report. The one router of the command, for
the API and the CLI alike (``cli/analyze_cmd.py`` parses flags and calls ``analyze``): it checks
the arguments, refuses those that do not apply to the model's kind, and sends an ONNX file to the
graph walk (``static_onnx``, no PyTorch loaded) and everything else to the fake-tensor capture
(``analyze_torch``, which loads torch)."""
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
        _refuse_torch_options(ref.spec, kwargs, depth, dtype, mode, functions, seq_len)
        from layerscope.analysis.static_onnx import analyze_onnx_spec

        return analyze_onnx_spec(ref.spec, inputs, batch_size)  # ref.spec: a Path as its text
    from layerscope.analysis.analyze_torch import analyze_module

    return analyze_module(model, inputs, kwargs, batch_size, depth, dtype, mode, optimizer,
                          functions, seq_len, attention)


def _refuse_torch_options(path: str, kwargs: dict[str, Any] | None, depth: int | None,
                          dtype: Any, mode: str, functions: bool, seq_len: int | None) -> None:
    """An ONNX graph is analysed per node, for inference, with the types and input names it
    declares: the arguments that only a PyTorch module gives a meaning are refused, not ignored."""
    if seq_len is not None:
        raise UserError("seq_len: for an ONNX model give the inputs' shapes with inputs",
                        arguments=("seq_len", "inputs"))
    if mode != "inference":
        raise UserError(f"{path}: ONNX graphs are analysed for inference only (no mode "
                        "training)", arguments="mode")
    if depth is not None:
        raise UserError(f"{path}: depth needs a module hierarchy; ONNX rows are nodes "
                        "(each row's 'scope' names the module the exporter recorded)",
                        arguments="depth")
    if functions:
        raise UserError(f"{path}: functions splits a PyTorch module's rows by torch function; "
                        "ONNX rows are nodes already", arguments="functions")
    if dtype is not None:
        raise UserError(f"{path}: dtype does not apply to ONNX models; their types are fixed "
                        "in the graph", arguments="dtype")
    if kwargs:
        raise UserError(f"{path}: kwargs: an ONNX model's inputs are named in the graph; give "
                        "their shapes with inputs ('NAME=SHAPE')", arguments=("kwargs", "inputs"))
