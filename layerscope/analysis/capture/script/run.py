"""A TorchScript model's capture run: a fresh copy (compiled methods of its own), ops charged to
per-op buckets, then attributed to modules from the profiler's module hierarchy."""
from __future__ import annotations

import copy

import torch

from layerscope.analysis.capture.inputs import input_tensors
from layerscope.analysis.capture.records import Capture
from layerscope.analysis.capture.running import model_error, run_model
from layerscope.analysis.capture.script.scopes import (
    OpBuckets,
    ScriptCountingMode,
    ScriptModuleScopes,
)
from layerscope.analysis.capture.tensors import tensor_nbytes


def script_copy(model: torch.jit.ScriptModule) -> torch.jit.ScriptModule:
    """A copy with compiled methods of its own: a deep copy shares them with ``model``, and their
    executors keep the optimized (inlined) plan once ``model`` has run, hiding submodule calls."""
    import io
    import warnings

    buffer = io.BytesIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch.jit.save/load are deprecated
            torch.jit.save(model, buffer)
            buffer.seek(0)
            return torch.jit.load(buffer)
    except Exception:
        return copy.deepcopy(model)


def capture_script(work, real_args, real_kwargs, stats, order, training, liveness) -> Capture:
    """TorchScript: submodules run inside the interpreter, where module hooks never fire. Each op
    is charged to a bucket of its own and moved to its module after the run, from the module
    hierarchy the profiler records (``ScriptModuleScopes``). What could not be attributed stays
    on the root and is explained in ``capture.warnings`` (a list of sentences)."""
    scopes = ScriptModuleScopes(work, stats, tag_autograd=training)
    buckets = OpBuckets()
    mode = ScriptCountingMode(scopes, buckets, liveness)
    try:
        output_bytes = run_model(lambda: work(*real_args, **real_kwargs), scopes, mode, training)
    except Exception as exc:
        raise model_error(exc) from exc
    scopes.attribute(buckets)
    cap = Capture(stats, order, mode.op_calls, mode.uncounted, liveness.peak,
                  sum(map(tensor_nbytes, input_tensors(real_args, real_kwargs))), output_bytes,
                  training)
    for s in stats.values():  # module hooks never fire inside the interpreter
        s.output_bytes = s.first_output_bytes = None
    cap.warnings = list(scopes.warnings)
    return cap
