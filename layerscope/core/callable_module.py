"""Modules that are also the function of the same name their package exports.

``layerscope.ops`` is an API function and a subpackage; ``layerscope.rewrite.tile_linear`` and
``layerscope.rewrite.verify`` are functions and modules. Importing a submodule makes Python bind
it as an attribute of its package, replacing the lazily exported function, and nothing can stop
that. So each such module is made callable: whichever object the name ends up bound to, calling
it calls the function, and its attributes are the module's.
"""
from __future__ import annotations

import importlib
import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    __call_target__: str  # 'package.module:function', set by make_callable

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        module, _, name = self.__call_target__.partition(":")
        return getattr(importlib.import_module(module), name)(*args, **kwargs)


def make_callable(module_name: str, target: str) -> None:
    """Calling module ``module_name`` calls ``target`` ('package.module:function')."""
    module = sys.modules[module_name]
    setattr(module, "__call_target__", target)  # noqa: B010 (a plain module has no such attribute)
    module.__class__ = _CallableModule
