"""TorchScript scope recovery: which submodule of a TorchScript model ran each aten op.

A ScriptModule runs its submodules inside the TorchScript interpreter, so the nn.Module forward
hooks of ``capture.ModuleTracker`` never fire and every op would be charged to the root.
The interpreter does know where it is, though: for every RecordFunction event it starts while the
profiler runs with ``with_modules=True`` it records a *module hierarchy*, the chain of its frames,
e.g. ``TOP(ResNet)::forward.layer1(Sequential)::forward.0(BasicBlock)::forward.conv1(Conv2d)::
forward.`` (one ``instance(Class)::method`` per frame; instance names are the attribute names the
caller used, so joining them gives the qualified name ``named_modules()`` uses). Attribution is
therefore done after the run:

1. ``ScriptModuleScopes.current()`` is called by the counting mode for every forward op. It emits a
   zero-length RecordFunction ``layerscope::op#<i>`` (it runs inside the interpreter's op call, so
   the profiler stamps it with the hierarchy of the op) and returns a per-op key ``KEY + i``; the
   counting mode charges the op to that key in an ``OpBuckets`` dict instead of a module.
2. The model runs with ``torch.jit.optimized_execution(False)``: the graph executor then does not
   inline method calls, so every method/function call of the interpreter is a frame of its own and
   emits a RecordFunction event too. Nesting those call events (by time, per thread) gives exact
   call boundaries: ``calls`` per module, the call's input shapes (``record_shapes``) and, as its
   output shapes, those of the last op run inside it.
3. ``attribute(buckets)`` reads the exported Chrome trace, turns each op marker's hierarchy into a
   qualified module name and merges every per-op bucket into the stats of that module. The
   interpreter names a submodule by the last attribute the caller read (``0`` for
   ``self.blocks[0]``, ``a`` for ``self.heads["a"]``), so the whole attribute path comes from the
   caller's graph (the ``prim::GetAttr`` chain under each ``prim::CallMethod``); every name is
   checked against ``named_modules()`` and the scripted class names.

The hierarchy of the call events themselves is not trusted for naming (the interpreter computes the
caller's instance name from the instruction *before* the CALL, which in traced graphs is often the
previous call's); a call is named through the first op marker inside it, whose hierarchy is exact.
A call with no op inside (nn.Identity, Dropout in eval) is named from its class and from the
static order of the caller's ``prim::CallMethod`` nodes, between the named calls around it; if that
leaves a choice, it is not counted. Only ``forward`` calls (``forward1``... in traced graphs) count
as calls, as in eager mode; other methods (``self.sub.helper(x)``) are scopes for their ops only.

If the interpreter inlined the calls anyway (no call events), calls are inferred from where an op's
chain of frames differs from the previous op's (back-to-back calls of one module merge) and shapes
are left empty; the optimizing executor may also have changed the ops (CSE, fusion).

Backward ops (training) are charged through autograd: an autograd node is created when its op's
dispatch has returned, so a node creation hook tags it (``node.metadata[AUTOGRAD_TAG]``) with
the key of the op issued last (a leaf's AccumulateGrad node, made before the op that first uses the
leaf, with the next one); ``CountingMode`` then charges each backward op to the bucket of the
forward op that caused it, which follows that op to its module.

The model must be a copy whose compiled methods have never run optimized: a ScriptModule's
executors are shared by deep copies and keep their optimized (inlined) plan. ``run.script_copy``
copies TorchScript models through ``torch.jit.save``/``torch.jit.load`` for that reason.

Nothing here raises: if the profiler cannot be used or a hierarchy cannot be mapped, the ops
concerned stay on the root (or the deepest module that could be named) and a sentence is added to
``ScriptModuleScopes.warnings``.

Parts: ``hierarchy`` (frames of the hierarchy text), ``trace`` (events of the Chrome trace and
their nesting), ``profiler`` (the profiler run), ``graph`` (call sites in the scripted graphs),
``naming`` (frames -> qualified names), ``calls`` (call counting and shapes), ``scopes`` (the
tracker) and ``run`` (the capture run of a TorchScript model).
"""
from layerscope.analysis.capture.script.run import capture_script, script_copy
from layerscope.analysis.capture.script.scopes import (
                                                       KEY,
                                                       OpBuckets,
                                                       ScriptCountingMode,
                                                       ScriptModuleScopes,
)
from layerscope.analysis.capture.script.trace import MARK

__all__ = ["KEY", "MARK", "OpBuckets", "ScriptCountingMode", "ScriptModuleScopes",
           "capture_script", "script_copy"]
