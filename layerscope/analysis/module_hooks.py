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
