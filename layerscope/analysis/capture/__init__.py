"""The capture engine: run a PyTorch module once and record, per module, what its aten ops cost.

The static analysis (``analysis.static``), the per-layer timers (``analysis.timing``) and the
TorchScript scope recovery (``capture.script``) are built on these public names:

- ``capture(model, inputs, ...)`` -> ``Capture``: the one entry point; ``parameters_only``
  for models without forward. ``Capture.modules`` maps each module's qualified name to its
  ``ModuleStats`` (``module_table`` builds the empty table).
- ``ModuleTracker`` (``tracker``): which module is running, from global forward hooks removed on
  exit; in training it tags autograd nodes with the module's name under ``AUTOGRAD_TAG``.
- ``CountingMode`` (``dispatch``): the TorchDispatchMode that costs every op with the handlers of
  ``layerscope.ops.aten`` and charges it to the running module or autograd node's module.
- ``FunctionTracker`` (``functions``): with ``capture(..., functions=True)``, the
  TorchFunctionMode that names the outermost torch function (``add``, ``relu``) each module's own
  forward ops run in; ``ModuleStats.functions`` holds them split per function.
- ``Liveness`` (``liveness``): storage lifetimes from weak references; the peak activation bytes.
- ``slots`` / ``swapped`` / ``preserved`` / ``untouched`` (``slots``): every module attribute
  recorded before a run and the very same object put back afterwards (tensors, ``None``,
  caches a forward writes into ``self``, list and dict contents); parameters, buffers and plain
  tensor attributes swapped by unique (module, attribute) slot for a run.
- ``fake_like`` (``fake``): the default run on fake tensors (no arithmetic, no weight memory).
- ``reuse``: in that run, a block call identical to an earlier one (same structure, flags and
  argument shapes) is replayed from the earlier call's record, not traced again; the figures are
  exactly the traced ones (``capture(..., reuse_blocks=False)`` traces every call).
- ``capture_real`` / ``TooLargeForRealRun`` (``real``): the bounded real-tensor fallback for
  what the fake run cannot do (data-dependent values, a tensor it could not replace; a note in
  ``Capture.warnings`` says why) and TorchScript.
- ``map_inputs`` (``inputs``): forward's arguments with every tensor and ``InputSpec`` mapped;
  ``InputSpec`` itself is defined in ``frontends.inputs`` and re-exported here.
- ``ModelRunError`` (``running``): the model itself rejected its inputs.

Capture changes nothing: no hooks, modes or swapped tensors are left behind, and every module
attribute (parameters, buffers, train/eval flags, plain attributes) is the same object as before.
"""
from layerscope.analysis.capture.dispatch import CountingMode
from layerscope.analysis.capture.engine import capture, parameters_only
from layerscope.analysis.capture.fake import fake_like
from layerscope.analysis.capture.functions import FunctionTracker
from layerscope.analysis.capture.inputs import InputSpec, input_tensors, map_inputs
from layerscope.analysis.capture.liveness import Liveness
from layerscope.analysis.capture.real import (
                                              REAL_INPUT_LIMIT,
                                              REAL_WEIGHT_LIMIT,
                                              TooLargeForRealRun,
                                              capture_real,
)
from layerscope.analysis.capture.records import Capture, ModuleStats, module_table
from layerscope.analysis.capture.running import ModelRunError
from layerscope.analysis.capture.slots import preserved, slots, swapped, untouched
from layerscope.analysis.capture.tensors import shapes, tensor_nbytes
from layerscope.analysis.capture.tracker import AUTOGRAD_TAG, ModuleTracker, tag_graph

__all__ = [
    "AUTOGRAD_TAG", "Capture", "CountingMode", "FunctionTracker", "InputSpec", "Liveness",
    "ModelRunError",
    "ModuleStats", "ModuleTracker", "REAL_INPUT_LIMIT", "REAL_WEIGHT_LIMIT", "TooLargeForRealRun",
    "capture", "capture_real", "fake_like", "input_tensors", "map_inputs", "module_table",
    "parameters_only", "preserved", "shapes", "slots", "swapped", "tag_graph", "tensor_nbytes",
    "untouched",
]
