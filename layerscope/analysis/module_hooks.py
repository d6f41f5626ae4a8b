"""Global nn.Module forward hooks for the duration of a ``with`` block only.

Global hooks see every module call without touching any module (nothing to clean up on the
model), and ``always_call`` keeps pre/post calls paired when a forward raises."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def global_forward_hooks(pre: Callable, post: Callable) -> Iterator[None]:
    from torch.nn.modules import module as M

    handles = [M.register_module_forward_pre_hook(pre),
               M.register_module_forward_hook(post, always_call=True)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


class ForwardHookContext:
    """Base of the module trackers: within ``with``, the subclass' ``_pre(module, args)`` and
    ``_post(module, args, output)`` are global forward hooks; on exit they are removed and then
    ``_on_exit()`` runs (to drop what a raising forward left on a stack)."""

    _hooks = None

    def _pre(self, module, args) -> None:
        raise NotImplementedError

    def _post(self, module, args, output) -> None:
        raise NotImplementedError

    def _on_exit(self) -> None:
        pass

    def __enter__(self):
        self._hooks = global_forward_hooks(self._pre, self._post)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)
        self._on_exit()
        return False
