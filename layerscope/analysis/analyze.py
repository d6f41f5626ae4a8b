"""``layerscope.analyze``: static cost of a model as a Report. The one router of the command, for
the API and the CLI alike (``cli/analyze_cmd.py`` parses flags and calls ``analyze``): it checks
the arguments, refuses those that do not apply to the model's kind, and sends an ONNX file to the
graph walk (``static_onnx``, no PyTorch loaded) and everything else to the fake-tensor capture
(``analyze_torch``, which loads torch)."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from layerscope.core import options, values
from layerscope.core.errors import UserError
from layerscope.core.report import Report
from layerscope.core.settings import Settings, of_call, option
from layerscope.frontends.detect import detect

if TYPE_CHECKING:
    import torch.nn as nn

MODES = options.MODES
DTYPES = ("float32", "float16", "bfloat16", "float64")


@dataclasses.dataclass(kw_only=True, eq=False)
class AnalyzeSettings(Settings):
    """Every setting of ``layerscope analyze`` and ``layerscope.analyze``: a new one is a field
    here (the CLI's option, the API's argument and the saved report's ``settings`` follow)."""

    model: Any = options.model(options.MODEL_HELP.replace(
        " or a TorchScript file", ", a TorchScript file or an ONNX file (.onnx)"))
    inputs: Any = options.inputs(
        options.INPUTS_HELP + "; for an ONNX model NAME=SHAPE binds the input NAME")
    batch_size: int | None = options.batch_size()
    depth: int | None = option(None, "module depth to show (0 = whole model); default: leaf "
                                     "layers", parse=values.non_negative_int)
    # recorded by the run itself, and only when set (a plain report has no "functions")
    functions: bool = option(False, "split each container's '(own ops)' row into one row per "
                                    "torch function its forward calls (residual add, F.relu, "
                                    "flatten): 'layer1.0 (add)'", record=False)
    dtype: Any = option(None, "analyse with parameters and inputs in this dtype",
                        choices=DTYPES)
    mode: str = options.mode()
    seq_len: int | None = options.seq_len()
    attention: str = options.attention()
    optimizer: str = options.optimizer("optimizer whose state --mode training counts")


def analyze(model: str | nn.Module | None = None, inputs: Any = None, *,
            settings: AnalyzeSettings | None = None, kwargs: dict[str, Any] | None = None,
            **overrides: Any) -> Report:
    """Parameters, memory, MACs/FLOPs and bytes per layer, without running real arithmetic.

    ``model``: an ``nn.Module`` or a spec (``resnet50``, ``file.py:factory``, ``pkg.mod:factory``,
    ``model.pt``, ``model.onnx``). ``inputs``: forward's positional arguments — a tensor, a shape,
    or a tuple of tensors, shapes and other values (for ONNX: ``'NAME=1x3x224x224'`` strings);
    ``kwargs``: forward's keyword arguments. ``settings``: an ``AnalyzeSettings``; keyword
    arguments override its fields (``batch_size``, ``depth``, ``dtype``, ...).
    ``mode="training"`` adds the backward pass and gradient/optimizer-state bytes
    (``optimizer``: sgd, momentum, adam, adamw). ``functions``: split each container's
    "(own ops)" row into one row per torch function its forward calls ("layer1.0 (add)",
    "layer1.0 (relu)"; not for ONNX/TorchScript). ``seq_len``: the S of token-id inputs
    (B x S; the LLM presets default to 2048). ``attention``: "causal" (default) counts
    ``is_causal`` attention kernels as the lower triangle incl. the diagonal, s(s+1)/2 scores
    per head; "full" counts the whole matrix (what the math fallback executes). For
    mixture-of-experts LLMs ``totals.params_active`` is the parameters one token uses under
    expected routing (k of E experts).
    """
    s = of_call(AnalyzeSettings, settings, overrides, "analyze", model=model, inputs=inputs)
    ref = detect(s.model)
    if ref.is_onnx:
        _refuse_torch_options(ref.spec, kwargs, s)
        from layerscope.analysis.static_onnx import analyze_onnx_spec

        # ref.spec: a Path as its text
        report = analyze_onnx_spec(ref.spec, s.inputs, s.batch_size)
    else:
        from layerscope.analysis.analyze_torch import analyze_module

        report = analyze_module(s, kwargs)
    # every recorded setting, below what the analysis itself wrote (the dtype's name); an
    # optimizer is a setting of a training step only
    recorded = {**s.recorded(), "optimizer": s.optimizer if s.mode == "training" else None}
    report.settings = {**recorded, **(report.settings or {})}
    return report


def _refuse_torch_options(path: str, kwargs: dict[str, Any] | None,
                          s: AnalyzeSettings) -> None:
    """An ONNX graph is analysed per node, for inference, with the types and input names it
    declares: the arguments that only a PyTorch module gives a meaning are refused, not ignored."""
    if s.seq_len is not None:
        raise UserError("seq_len: for an ONNX model give the inputs' shapes with inputs",
                        arguments=("seq_len", "inputs"))
    if s.mode != "inference":
        raise UserError(f"{path}: ONNX graphs are analysed for inference only (no mode "
                        "training)", arguments="mode")
    if s.depth is not None:
        raise UserError(f"{path}: depth needs a module hierarchy; ONNX rows are nodes "
                        "(each row's 'scope' names the module the exporter recorded)",
                        arguments="depth")
    if s.functions:
        raise UserError(f"{path}: functions splits a PyTorch module's rows by torch function; "
                        "ONNX rows are nodes already", arguments="functions")
    if s.dtype is not None:
        raise UserError(f"{path}: dtype does not apply to ONNX models; their types are fixed "
                        "in the graph", arguments="dtype")
    if kwargs:
        raise UserError(f"{path}: kwargs: an ONNX model's inputs are named in the graph; give "
                        "their shapes with inputs ('NAME=SHAPE')", arguments=("kwargs", "inputs"))
