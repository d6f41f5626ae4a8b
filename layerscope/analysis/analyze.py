"""``layerscope.analyze``: static cost of a PyTorch model as a Report."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from layerscope.analysis import static_torch as st
from layerscope.core.report import Report
from layerscope.environment import environment
from layerscope.errors import UserError, first_line
from layerscope.core import values
from layerscope.frontends.torch_module import (LoadedModel, parse_dtype, parse_input, resolve,
                                               with_batch_size)

MODES = ("inference", "training")


def normalize_inputs(inputs: Any) -> list[Any]:
    """A tensor, a tuple of tensors, a shape, a list of shapes or '1x3x224x224' strings."""
    if inputs is None:
        return []
    if isinstance(inputs, (torch.Tensor, st.InputSpec, str)):
        inputs = [inputs]
    elif isinstance(inputs, (tuple, list)) and inputs and all(isinstance(d, int) for d in inputs):
        inputs = [tuple(inputs)]
    out = []
    for x in inputs:
        if isinstance(x, (torch.Tensor, st.InputSpec)):
            out.append(x)
        elif isinstance(x, str):
            out.append(parse_input(x))
        elif isinstance(x, (tuple, list, torch.Size)) and all(isinstance(d, int) for d in x):
            out.append(st.InputSpec(values.check_shape(x, "input shape")))
        else:
            raise UserError(f"cannot use {x!r} as an input: give a tensor, a shape or '1x3x224x224'")
    return out


def _describe(x: Any) -> dict[str, Any]:
    if isinstance(x, st.InputSpec):
        return {"shape": list(x.shape), "dtype": str(x.dtype).removeprefix("torch.")}
    return {"shape": list(x.shape), "dtype": str(x.dtype).removeprefix("torch.")}


def load(model: str | nn.Module, inputs: Any = None, batch_size: int | None = None,
         meta: bool = True, seed: int = 0) -> LoadedModel:
    """Resolve a spec and settle its inputs (explicit ones win over the model's defaults).

    ``meta``: build built-in models on the meta device (static analysis needs no weights);
    ``seed``: the seed built-in models and factories draw their random weights from."""
    loaded = resolve(model, meta=meta and isinstance(model, str), seed=seed)
    given = normalize_inputs(inputs)
    if given:
        loaded.inputs = given
    if not loaded.inputs:
        raise UserError(f"{loaded.name}: no default input is known for this model; "
                        "give one with --input, e.g. --input 1x3x224x224")
    if batch_size is not None:
        loaded.inputs = with_batch_size(loaded.inputs, batch_size)
    return loaded


def _analyze_onnx(path: str, inputs: Any, batch_size: int | None, depth: int | None,
                  dtype: Any, mode: str) -> Report:
    """ONNX graphs: one row per node, inference only (README "ONNX")."""
    from layerscope.analysis.static_onnx import analyze_onnx

    if mode != "inference":
        raise UserError(f"{path}: ONNX graphs are analysed for inference only (no --mode training)")
    if depth is not None:
        raise UserError(f"{path}: --depth needs a module hierarchy; ONNX rows are nodes "
                        "(each row's 'scope' names the module the exporter recorded)")
    if dtype is not None:
        raise UserError(f"{path}: --dtype does not apply to ONNX models; their types are fixed "
                        "in the graph")
    if isinstance(inputs, str):
        inputs = [inputs]
    elif isinstance(inputs, (tuple, list)) and inputs and all(isinstance(d, int) for d in inputs):
        inputs = ["x".join(map(str, inputs))]
    return analyze_onnx(path, [i if isinstance(i, str) else "x".join(map(str, i))
                               for i in inputs or []], batch_size=batch_size)


def analyze(model: str | nn.Module, inputs: Any = None, *, batch_size: int | None = None,
            depth: int | None = None, dtype: str | torch.dtype | None = None,
            mode: str = "inference", optimizer: str = "adam") -> Report:
    """Parameters, memory, MACs/FLOPs and bytes per layer, without running real arithmetic.

    ``model``: an ``nn.Module`` or a spec (``resnet50``, ``file.py:factory``, ``pkg.mod:factory``,
    ``model.pt``, ``model.onnx``). ``inputs``: a tensor, a tuple of tensors, or shapes (for ONNX:
    ``'NAME=1x3x224x224'`` strings). ``mode="training"`` adds
    the backward pass and gradient/optimizer-state bytes (``optimizer``: sgd, momentum, adam, adamw).
    """
    if mode not in MODES:
        raise UserError(f"unknown mode {mode!r}: use inference or training")
    if isinstance(model, str) and model.lower().endswith(".onnx"):
        return _analyze_onnx(model, inputs, batch_size, depth, dtype, mode)
    if optimizer not in st.OPTIMIZER_STATE_FACTOR:
        raise UserError(f"unknown optimizer {optimizer!r}: use one of "
                        f"{', '.join(st.OPTIMIZER_STATE_FACTOR)}")
    if depth is not None:
        depth = values.non_negative_int(depth, "--depth")
    if isinstance(dtype, str):
        dtype = parse_dtype(dtype)
    loaded = load(model, inputs, batch_size)
    fake = loaded.frontend == "torch"
    try:
        cap = st.capture(loaded.module, loaded.inputs, training=(mode == "training"),
                         dtype=dtype, fake=fake, owned=loaded.extras.get("owned", False))
    except st.ModelRunError as exc:
        shapes = ", ".join("x".join(map(str, _describe(x)["shape"])) for x in loaded.inputs)
        raise UserError(f"{loaded.name} rejected input {shapes}: {first_line(exc)}") from exc
    ops, coverage = st.uncounted(cap)
    return Report(
        model=loaded.name,
        frontend=loaded.frontend,
        inputs=[_describe(x) for x in loaded.inputs],
        totals=st.totals(cap, loaded.module, optimizer),
        layers=st.layer_rows(cap, depth),
        uncounted_ops=ops,
        op_coverage=coverage,
        settings={"mode": mode, "depth": depth,
                  "dtype": str(dtype).removeprefix("torch.") if dtype else None,
                  "optimizer": optimizer if mode == "training" else None},
        environment=environment(),
        notes=list(cap.warnings) + _frozen_note(loaded),
    )


def _frozen_note(loaded: LoadedModel) -> list[str]:
    if loaded.frontend == "torchscript" and next(loaded.module.parameters(), None) is None:
        return ["this TorchScript module has no parameters (frozen with torch.jit.freeze?): its "
                "weights are graph constants, not counted in params or weight_bytes"]
    return []
