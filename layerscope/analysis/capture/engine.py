"""``capture()``: one run of a model, every module's cost recorded, the model left as it was."""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn

from layerscope.analysis import modes
from layerscope.analysis.capture.fake import capture_fake
from layerscope.analysis.capture.nodynamo import without_dynamo
from layerscope.analysis.capture.real import capture_real
from layerscope.analysis.capture.records import Capture, module_table


@without_dynamo()
def capture(model: nn.Module, inputs: Sequence[Any], *, kwargs: dict[str, Any] | None = None,
            training: bool = False, dtype: torch.dtype | None = None,
            fake: bool = True, owned: bool = False, functions: bool = False,
            reuse_blocks: bool = True) -> Capture:
    """Run ``model`` once (fake by default) and record what every module costs.

    ``inputs`` are forward's positional arguments and ``kwargs`` its keyword arguments: tensors,
    ``InputSpec`` shapes, or any other Python value (passed as is; tensors nested in lists,
    tuples and dicts are made fake too). ``owned``: the model is the analysis' own, just loaded
    from a file and never run, so a TorchScript model needs no fresh copy (the copy through
    ``torch.jit.save``/``load`` is most of the time a TorchScript analysis takes: AlexNet ~4 s of
    ~6.5 s). Raises ``ModelRunError`` when the model rejects the inputs and
    ``TooLargeForRealRun`` when a needed real run would be too large; train/eval flags are put
    back whatever happens. ``functions``: also split each module's own forward ops by the torch
    function that ran them (``ModuleStats.functions``; not for TorchScript). ``reuse_blocks``:
    replay a repeated block call (same structure, arguments and flags as an earlier one) from the
    earlier call's record instead of tracing it again (``capture.reuse``: fake inference runs
    only; the figures are exactly the traced ones, False traces every call). Runs
    ``without_dynamo()``: nothing here compiles."""
    kwargs = dict(kwargs or {})
    stats, order = module_table(model, dtype)
    flags = modes.set_mode(model, training)
    try:
        if fake:
            cap = capture_fake(model, list(inputs), kwargs, stats, order, training, dtype,
                               functions=functions, reuse_blocks=reuse_blocks)
        else:
            cap = capture_real(model, list(inputs), kwargs, stats, order, training, dtype, owned,
                               functions=functions)
        cap.dtype = dtype
        return cap
    finally:
        modes.restore(flags)


def parameters_only(model: nn.Module, training: bool = False,
                    dtype: torch.dtype | None = None) -> Capture:
    """A capture with no forward run (the model has none): parameters and buffers per module,
    floating ones counted in ``dtype`` where given."""
    stats, order = module_table(model, dtype)
    return Capture(stats, order, 0, Counter(), 0, 0, 0, training, dtype=dtype)
