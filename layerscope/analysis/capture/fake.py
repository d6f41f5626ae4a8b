"""The default capture: the model runs on *fake* copies of its parameters and inputs
(``FakeTensorMode``), so no arithmetic is done and no weight memory is needed. Parameters on the
meta device are analysed as CPU tensors, so the CPU kernels are chosen. A model that needs real
values (data-dependent shapes), or reaches a tensor it could not replace, falls back to
``real.capture_real``, with a note in ``Capture.warnings``."""
from __future__ import annotations

import contextlib

import torch
import torch.nn as nn

from layerscope.analysis.capture.dispatch import CountingMode
from layerscope.analysis.capture.inputs import InputSpec, input_tensors, map_inputs, zeros_for
from layerscope.analysis.capture.liveness import Liveness
from layerscope.analysis.capture.real import capture_real
from layerscope.analysis.capture.records import Capture, module_table
from layerscope.analysis.capture.reuse import BlockReuse
from layerscope.analysis.capture.running import ModelRunError, model_error, run_model
from layerscope.analysis.capture.slots import swapped
from layerscope.analysis.capture.tensors import model_device, tensor_nbytes
from layerscope.analysis.capture.tracker import ModuleTracker


def fake_like(t: torch.Tensor, dtype: torch.dtype | None, requires_grad: bool,
              fake_mode=None) -> torch.Tensor:
    """A fake tensor shaped like ``t`` (meta becomes CPU).

    With ``fake_mode`` the FakeTensor is built directly around a meta tensor, about 4x cheaper
    than allocating through the mode (it matters: resnet50 has 320 parameters and buffers);
    without it, call inside FakeTensorMode."""
    device = torch.device("cpu") if t.device.type == "meta" else t.device
    target = dtype if (dtype is not None and t.is_floating_point()) else t.dtype
    shape, stride = tuple(t.shape), tuple(t.stride())
    if fake_mode is not None:
        from torch._subclasses.fake_tensor import FakeTensor

        meta = torch.empty_strided(shape, stride, dtype=target, device="meta")
        fake = FakeTensor(fake_mode, meta, device)
    else:
        fake = torch.empty_strided(shape, stride, dtype=target, device=device)
    if requires_grad and fake.is_floating_point():
        fake.requires_grad_(True)
    return fake


def _needs_real_values():
    from torch._subclasses import fake_tensor as ft

    return (ft.UnsupportedOperatorException, ft.DynamicOutputShapeException,
            ft.DataDependentOutputException)


_REAL_TENSOR_SEEN = "convert all Tensors to FakeTensors"


def real_run_reason(exc: BaseException) -> str | None:
    """Why a failed fake run needs the real one, or None when the model itself failed: an op
    needs real values (``.item()``, a tensor used as a Python number or bool, data-dependent
    shapes), or the forward reached a tensor the fake run could not replace (one held inside
    an object or a tuple, a global): FakeTensor refuses to mix it with fakes. The cause chain is
    searched, as a model may wrap the error in its own."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, _needs_real_values()):
            return (f"the forward needs real values ({type(exc).__name__}: data-dependent "
                    "shapes, .item() or a tensor used as a Python number)")
        if _REAL_TENSOR_SEEN in str(exc):
            return ("the forward uses a tensor the fake run could not replace (one held "
                    "inside an object or a tuple, or a global)")
        exc = exc.__cause__ or exc.__context__
    return None


def capture_fake(model, inputs, kwargs, stats, order, training, dtype,
                 functions: bool = False, reuse_blocks: bool = True) -> Capture:
    """Run ``model`` once on fake tensors, charging ops to ``stats`` (from ``module_table``).

    ``reuse_blocks``: a repeated block call is replayed from the first one's record instead of
    traced again (``reuse``; inference without ``functions`` only); the figures are the same."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    fake_mode = FakeTensorMode()
    liveness = Liveness()
    device = model_device(model)

    def fake_param(t):
        # Wrapped outside the mode: their meta storage must be a plain meta tensor.
        return fake_like(t, dtype, training and isinstance(t, nn.Parameter) and t.requires_grad,
                         fake_mode)

    def fake_input(x):
        return zeros_for(x, dtype, device) if isinstance(x, InputSpec) else \
            fake_like(x, dtype, False)

    with fake_mode:
        fake_args, fake_kwargs = map_inputs((tuple(inputs), kwargs), fake_input)
    tracker = ModuleTracker(model, stats, tag_autograd=training)
    mode = CountingMode(tracker, stats, liveness)
    in_tensors = input_tensors(fake_args, fake_kwargs)
    reuse = BlockReuse(model, tracker, mode, liveness) \
        if reuse_blocks and not training and not functions else None
    try:
        with swapped(model, fake_param) as memo:
            for t in memo.values():
                liveness.add_resident(t)
            for x in in_tensors:
                liveness.add(x)
            with fake_mode, (reuse.installed() if reuse else contextlib.nullcontext()):
                output_bytes = run_model(lambda: model(*fake_args, **fake_kwargs), tracker, mode,
                                         training, functions)
    except Exception as exc:
        reason = real_run_reason(exc)
        if reason is None:  # the model's own error: shape mismatch and the like
            raise model_error(exc) from exc
        if device.type == "meta" or any(t.device.type == "meta" for t in model.parameters()):
            raise ModelRunError(f"{reason} but its weights are on the meta device") from exc
        fresh, _ = module_table(model, dtype)
        stats.clear()
        stats.update(fresh)
        cap = capture_real(model, inputs, kwargs, stats, order, training, dtype,
                           functions=functions)
        cap.warnings.append(f"the model ran for real (inputs given as shapes are zeros, the "
                            f"weights private copies), not on fake tensors: {reason}")
        return cap
    return Capture(stats, order, mode.op_calls, mode.uncounted, liveness.peak,
                   sum(map(tensor_nbytes, in_tensors)), output_bytes, training,
                   replayed_calls=reuse.replayed if reuse else 0)
