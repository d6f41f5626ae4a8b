"""``without_dynamo()``: run torch code that compiles nothing without importing ``torch._dynamo``.

Much of torch reaches for ``torch._dynamo`` on a first call although nothing is compiled: every
``TorchDispatchMode`` subclass's ``__torch_dispatch__`` (``FakeTensorMode``'s and ours), the
Python reference ops fake tensors run and the optimizers' steps are wrapped in
``torch._disable_dynamo``, whose first call imports ``torch._dynamo`` to build
``torch._dynamo.disable(fn)``; ``FakeTensorMode`` reads ``torch._dynamo.config`` when it is built
and on every op. That import loads sympy, inductor and much of torch.distributed: on a CPU it
takes about as long as ``import torch`` itself, which an analysis would pay for nothing.

Inside ``without_dynamo()``, while ``torch._dynamo`` is not loaded, ``torch._dynamo`` is a
stand-in that holds:

- ``config``: dynamo's own config module, loaded alone from its file and registered under its
  name, so the real package's import later finds and keeps it (its values are the same);
- ``disable(fn)``: a function that calls ``fn`` as it is while ``torch._dynamo`` is not loaded
  (nothing can be compiling then, so there is nothing to keep out of a compilation) and
  ``torch._dynamo.disable(fn)`` once it is;

and any other attribute imports the real package (which then replaces the stand-in), so code
that does compile (a model calling ``torch.compile``) gets the real dynamo. On exit the stand-in
is removed from ``sys.modules`` and ``torch``, and the wrappers it gave to
``torch._disable_dynamo``'s per-function cache are taken out of that cache again: nothing of it
outlives the block. Every op runs the same code either way, so no figure changes.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import os
import sys
import types
from collections.abc import Iterator

import torch

_DYNAMO = "torch._dynamo"
_CONFIG = "torch._dynamo.config"
_CACHE = "__dynamo_disable"  # torch._compile._disable_dynamo's per-function cache attribute


def _loaded():
    """The real ``torch._dynamo`` when it is imported, else None."""
    module = sys.modules.get(_DYNAMO)
    return None if module is None or isinstance(module, _StandIn) else module


class _StandIn(types.ModuleType):
    """``torch._dynamo`` while it is not loaded (see the module's doc)."""

    def __init__(self, config: types.ModuleType) -> None:
        super().__init__(_DYNAMO)
        self.config = config
        self.given: list[tuple[object, object]] = []  # (fn, the wrapper ``disable`` gave)

    def remove(self) -> None:
        if sys.modules.get(_DYNAMO) is self:
            del sys.modules[_DYNAMO]
        if vars(torch).get("_dynamo") is self:
            del torch._dynamo  # type: ignore[attr-defined]

    def disable(self, fn=None, recursive=True, **kwargs):
        if fn is None:
            return functools.partial(self.disable, recursive=recursive, **kwargs)
        real: list = []

        @functools.wraps(fn)
        def call(*args, **kw):
            dynamo = _loaded()
            if dynamo is None:
                return fn(*args, **kw)
            if not real:
                real.append(dynamo.disable(fn, recursive, **kwargs))
            return real[0](*args, **kw)

        self.given.append((fn, call))
        return call

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__") and name != "__path__":
            raise AttributeError(name)  # copy, pickle and the like probe dunders
        self.remove()
        return getattr(importlib.import_module(_DYNAMO), name)


def _config() -> types.ModuleType:
    """dynamo's config module, loaded from its own file without the package around it."""
    module = sys.modules.get(_CONFIG)
    if module is not None:
        return module
    path = os.path.join(os.path.dirname(torch.__file__), "_dynamo", "config.py")
    spec = importlib.util.spec_from_file_location(_CONFIG, path)
    if spec is None or spec.loader is None:  # pragma: no cover - torch without the file
        return importlib.import_module(_CONFIG)
    module = importlib.util.module_from_spec(spec)
    sys.modules[_CONFIG] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(_CONFIG, None)
        raise
    return sys.modules[_CONFIG]


@contextlib.contextmanager
def without_dynamo() -> Iterator[None]:
    """Run the block with ``torch._dynamo`` unimported where it is not needed (module doc).
    A no-op where dynamo is loaded already or an enclosing block holds the stand-in."""
    if _DYNAMO in sys.modules or "_dynamo" in vars(torch):
        yield
        return
    stand_in = _StandIn(_config())
    sys.modules[_DYNAMO] = stand_in
    torch._dynamo = stand_in  # type: ignore[attr-defined]
    try:
        yield
    finally:
        stand_in.remove()
        for fn, call in stand_in.given:
            if getattr(fn, _CACHE, None) is call:
                delattr(fn, _CACHE)
