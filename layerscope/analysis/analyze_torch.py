"""``layerscope.analyze`` of a PyTorch model (a module, a spec, a TorchScript file): the fake-tensor
capture of one forward (or training step) as a Report; and ``load``, the model resolution the
other analyses share."""
from __future__ import annotations

import contextlib
from typing import Any

import torch.nn as nn

from layerscope.analysis import capture, dense_experts, llm_counts, static
from layerscope.analysis.attention_kernels import MixedWidthAttention
from layerscope.analysis.attention_structure import count_eager, eager_notes, layer_masks
from layerscope.analysis.capture.nodynamo import without_dynamo
from layerscope.analysis.llm_counts import attention_notes
from layerscope.analysis.model_prep import (
    has_forward,
    is_lazy,
    materialized_copy,
    needs_arguments,
    unwrap,
)
from layerscope.core.environment import environment
from layerscope.core.errors import UserError, first_line
from layerscope.core.report import Report
from layerscope.frontends.inputs import call_text, describe_all, parse_dtype, split_inputs
from layerscope.frontends.torch_module import (
    LoadedModel,
    kwargs_with_batch_size,
    resolve,
    with_batch_size,
    with_seq_len,
)
from layerscope.ops.aten import attention_counting


def normalize_inputs(inputs: Any) -> list[Any]:
    """Positional inputs only (commands that run ``module(*inputs)``); see
    ``inputs.split_inputs``."""
    args, kwargs = split_inputs(inputs)
    if kwargs:
        raise UserError(f"keyword inputs ({', '.join(kwargs)}=...) are not supported by this "
                        "command; give forward's arguments in order")
    return args


def load(model: str | nn.Module, inputs: Any = None, batch_size: int | None = None,
         meta: bool = True, kwargs: dict[str, Any] | None = None, seed: int = 0,
         seq_len: int | None = None) -> LoadedModel:
    """Resolve a spec and settle its inputs (explicit ones win over the model's defaults).

    ``meta``: build built-in models on the meta device (static analysis needs no weights);
    ``seed``: the seed built-in models and factories draw their random weights from;
    ``seq_len``: the S of token-id inputs (B x S), e.g. of the LLM presets."""
    loaded = resolve(model, meta=meta and isinstance(model, str), seed=seed)
    args, named = split_inputs(inputs, kwargs)
    if args or named:
        loaded.inputs, loaded.kwargs = args, named
    if (not loaded.inputs and not loaded.kwargs
            and needs_arguments(unwrap(loaded.module, loaded.name)[0])):
        raise UserError(f"{loaded.name}: no default input is known for this model; "
                        "give one with inputs, e.g. 1x3x224x224", arguments="inputs")
    if batch_size is not None:
        loaded.inputs = with_batch_size(loaded.inputs, batch_size)
        loaded.kwargs = kwargs_with_batch_size(loaded.kwargs, batch_size)
    if seq_len is not None:
        llm = loaded.extras.get("llm_config") or getattr(loaded.module, "config", None)
        table = loaded.extras.get("position_table") or (
            "learned position table" if getattr(llm, "position", None) == "learned" else None)
        loaded.inputs, loaded.kwargs = with_seq_len(
            loaded.inputs, loaded.kwargs, seq_len, loaded.name,
            llm.max_position if table else None, table or "learned position table")
    return loaded


@without_dynamo()  # loading and capture compile nothing
def analyze_module(s: Any, kwargs: dict[str, Any] | None) -> Report:
    """``layerscope.analyze`` of anything but an ONNX file; ``s``: its ``AnalyzeSettings``
    (checked there; not imported here, since ``analyze`` imports this module)."""
    dtype = parse_dtype(s.dtype) if isinstance(s.dtype, str) else s.dtype
    mode, functions, attention = s.mode, s.functions, s.attention
    loaded = load(s.model, s.inputs, s.batch_size, kwargs=kwargs, seq_len=s.seq_len)
    module, notes = unwrap(loaded.module, loaded.name)
    notes += loaded.extras.get("notes", [])  # the frontend's (an hf: config's defaults)
    if not has_forward(module):
        cap = capture.parameters_only(module, training=(mode == "training"), dtype=dtype)
        notes.append(f"{type(module).__name__} has no forward(): no forward ran; the report "
                     "lists parameters and buffers only (no MACs, FLOPs or activations)")
    else:
        if is_lazy(module):
            module, lazy_notes = materialized_copy(module, loaded.inputs, loaded.kwargs,
                                                   loaded.name)
            notes += lazy_notes
        try:
            masks = layer_masks(module, loaded.inputs, loaded.kwargs) \
                if attention == "causal" else None
            with attention_counting(attention, masks) as counting, \
                    masks if masks is not None else contextlib.nullcontext(), \
                    MixedWidthAttention():
                cap = capture.capture(module, loaded.inputs, kwargs=loaded.kwargs,
                                      training=(mode == "training"), dtype=dtype,
                                      fake=loaded.frontend == "torch",
                                      owned=loaded.extras.get("owned", False),
                                      functions=functions)
            notes += attention_notes(counting)
            notes += count_eager(cap, module, masks) if masks is not None and \
                mode != "training" else eager_notes(module)
        except capture.TooLargeForRealRun as exc:
            raise UserError(f"{loaded.name}: {exc}") from None
        except capture.ModelRunError as exc:
            raise UserError(f"{loaded.name} rejected input "
                            f"{call_text(loaded.inputs, loaded.kwargs)}: "
                            f"{first_line(exc)}") from exc
    routing = llm_counts.routing(module, loaded.extras.get("llm_config"))
    if routing is not None:  # experts computed densely: counted as the router's top-k
        notes += dense_experts.count_routed(cap, routing)
    ops, coverage = static.uncounted(cap)
    totals = static.totals(cap, module, s.optimizer)
    if routing is not None:
        totals.params_active = llm_counts.active_params(module, totals.params, routing)
        notes += llm_counts.moe_notes(routing)
    return Report(
        model=loaded.name,
        frontend=loaded.frontend,
        inputs=describe_all(loaded.inputs, loaded.kwargs),
        totals=totals,
        layers=static.layer_rows(cap, s.depth, functions),
        uncounted_ops=ops,
        op_coverage=coverage,
        settings={"mode": mode, "depth": s.depth,
                  "dtype": str(dtype).removeprefix("torch.") if dtype else None,
                  "optimizer": s.optimizer if mode == "training" else None,
                  "attention": attention,
                  **({"functions": True} if functions else {})},
        environment=environment(),
        notes=notes + list(cap.warnings) + _frozen_note(loaded),
    )


def _frozen_note(loaded: LoadedModel) -> list[str]:
    if loaded.frontend == "torchscript" and next(loaded.module.parameters(), None) is None:
        return ["this TorchScript module has no parameters (frozen with torch.jit.freeze?): its "
                "weights are graph constants, not counted in params or weight_bytes"]
    return []
