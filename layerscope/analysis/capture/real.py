"""The bounded real-tensor fallback, for models with data-dependent shapes and TorchScript: the
caller's model runs with private copies of its parameters and buffers swapped in (never a deep
copy of the model: that fails on attributes such as locks), so its own tensors, gradients and
running statistics are untouched. Inputs and weights are allocated for real; above
``REAL_INPUT_LIMIT`` / ``REAL_WEIGHT_LIMIT`` it refuses instead (README)."""
from __future__ import annotations

import torch
import torch.nn as nn

from layerscope.analysis.capture.dispatch import CountingMode
from layerscope.analysis.capture.inputs import (
    InputSpec,
    input_tensors,
    inputs_nbytes,
    map_inputs,
    zeros_for,
)
from layerscope.analysis.capture.liveness import Liveness
from layerscope.analysis.capture.records import Capture
from layerscope.analysis.capture.running import model_error, run_model
from layerscope.analysis.capture.script.run import capture_script, script_copy
from layerscope.analysis.capture.slots import slots, swapped
from layerscope.analysis.capture.tensors import model_device, tensor_nbytes
from layerscope.analysis.capture.tracker import ModuleTracker

REAL_INPUT_LIMIT = 256 * 10**6
REAL_WEIGHT_LIMIT = 4 * 10**9


class TooLargeForRealRun(Exception):
    """The real-tensor fallback would allocate more than ``REAL_INPUT_LIMIT`` bytes of inputs or
    a copy of more than ``REAL_WEIGHT_LIMIT`` bytes of weights."""


def check_real_size(model, inputs, kwargs, dtype) -> None:
    """Raise ``TooLargeForRealRun`` if a real run would allocate more than the bounds."""
    need = inputs_nbytes(inputs, kwargs, dtype)
    weights = sum(tensor_nbytes(t) for _, _, t in slots(model))
    if need > REAL_INPUT_LIMIT or weights > REAL_WEIGHT_LIMIT:
        from layerscope.core.units import megabytes as mb

        raise TooLargeForRealRun(
            f"this model needs real tensors (data-dependent shapes or TorchScript), and a real "
            f"run would allocate {mb(need)} MB of inputs and a {mb(weights)} MB copy of the "
            f"weights (limits {mb(REAL_INPUT_LIMIT)} MB and {mb(REAL_WEIGHT_LIMIT)} MB); "
            "analyse it with a smaller input")


def private_copy(t: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    copy_ = t.detach().clone()
    if dtype is not None and copy_.is_floating_point():
        copy_ = copy_.to(dtype)
    if isinstance(t, nn.Parameter):
        return nn.Parameter(copy_, requires_grad=t.requires_grad)
    return copy_


def capture_real(model, inputs, kwargs, stats, order, training, dtype,
                 owned: bool = False, functions: bool = False) -> Capture:
    """Run ``model`` once with real tensors (an ``owned`` TorchScript model, never run, is used as
    it is; any other TorchScript model through a fresh copy, see ``script``)."""
    check_real_size(model, inputs, kwargs, dtype)
    device = model_device(model)

    def real_input(x):
        return zeros_for(x, dtype, device) if isinstance(x, InputSpec) else x.detach().clone()

    real_args, real_kwargs = map_inputs((tuple(inputs), kwargs), real_input)
    in_tensors = input_tensors(real_args, real_kwargs)
    liveness = Liveness()
    for x in in_tensors:
        liveness.add(x)
    if isinstance(model, torch.jit.ScriptModule):
        work = model if owned else script_copy(model)
        if dtype is not None:
            work = work.to(dtype)
        for t in list(work.parameters()) + list(work.buffers()):
            liveness.add_resident(t)
        return capture_script(work, real_args, real_kwargs, stats, order, training, liveness)
    tracker = ModuleTracker(model, stats, tag_autograd=training)
    mode = CountingMode(tracker, stats, liveness)
    try:
        with swapped(model, lambda t: private_copy(t, dtype)) as memo:
            for t in memo.values():
                liveness.add_resident(t)
            output_bytes = run_model(lambda: model(*real_args, **real_kwargs), tracker, mode,
                                     training, functions)
    except Exception as exc:
        raise model_error(exc) from exc
    return Capture(stats, order, mode.op_calls, mode.uncounted, liveness.peak,
                   sum(map(tensor_nbytes, in_tensors)), output_bytes, training)
