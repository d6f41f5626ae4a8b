"""Cost handlers: one pure function per op, one registration line each.

Calling this subpackage calls the API function ``layerscope.ops`` (see core/callable_module.py)."""
from layerscope.core.callable_module import make_callable

make_callable(__name__, "layerscope.analysis.op_profile:ops")
