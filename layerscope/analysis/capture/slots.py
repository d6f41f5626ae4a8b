"""The model left exactly as it was: every module's attributes recorded before a run and put
back afterwards (``preserved``), and its tensors swapped for the length of a run (``swapped``).

``preserved`` records each module's ``__dict__`` (parameters, buffers, submodules, hooks, plain
attributes: tensors, ``None``, caches a forward writes into ``self``) and the contents of every
plain list and dict held there; afterwards, on success or failure, each attribute is the very
same object again, with the same contents, attributes the run added are gone and the ones it
deleted are back. ``swapped`` replaces every parameter, buffer and plain tensor attribute, each
distinct tensor once, so shared modules and tied weights are restored exactly and the user's
tensors are never touched (a forward writing into a cached tensor writes into the replacement)."""
from __future__ import annotations

import collections
import contextlib

import torch
import torch.nn as nn


def slots(model: nn.Module) -> list[tuple[dict, str, torch.Tensor]]:
    """Every (module, attribute) that holds a parameter or buffer, each exactly once.

    ``model.modules()`` yields a module once however many names reach it (the same layer twice
    in a Sequential, ``self.a = self.b = lin``), so swapping these slots and putting the same
    objects back restores the model exactly; a tensor held by two slots (tied weights) is
    swapped in both, for the same replacement. Uninitialized (lazy) parameters are left alone."""
    from torch.nn.parameter import UninitializedTensorMixin

    out = []
    for m in model.modules():
        for table in (m._parameters, m._buffers):
            for key, t in table.items():
                if t is not None and not isinstance(t, UninitializedTensorMixin):
                    out.append((table, key, t))
    return out


def plain_slots(model: nn.Module) -> list[tuple[dict, str, torch.Tensor]]:
    """Every (module, attribute) holding a plain tensor (set with ``self.x = tensor``: not a
    parameter or buffer), each exactly once."""
    return [(m.__dict__, key, v) for m in model.modules()
            for key, v in m.__dict__.items() if isinstance(v, torch.Tensor)]


def _record(obj) -> list[tuple[dict, dict, dict]]:
    """Each module's ``__dict__``, a copy of it, and copies of its plain lists' and dicts'
    contents (``_parameters``, ``_buffers``, ``_modules``, the hook tables, a user's cache)."""
    out = []
    for m in obj.modules():
        attrs = m.__dict__
        contents = {}
        for key, v in attrs.items():
            if type(v) is list:
                contents[key] = list(v)
            elif type(v) in (dict, collections.OrderedDict):
                contents[key] = dict(v)
        out.append((attrs, dict(attrs), contents))
    return out


def _restore(recorded: list[tuple[dict, dict, dict]]) -> None:
    for attrs, before, contents in recorded:
        if attrs.keys() != before.keys() or any(attrs[k] is not v for k, v in before.items()):
            attrs.clear()
            attrs.update(before)
        for key, items in contents.items():
            held = before[key]
            if isinstance(held, list):
                held[:] = items
            else:
                held.clear()
                held.update(items)


@contextlib.contextmanager
def preserved(model: nn.Module):
    """Within the block the run may change any module attribute; afterwards (also on error)
    every one is the very same object as before, lists and dicts with their old contents."""
    recorded = _record(model)
    try:
        yield
    finally:
        _restore(recorded)


@contextlib.contextmanager
def swapped(model: nn.Module, replace, plain=None, *, keep_changes: bool = False):
    """Within the block every parameter/buffer ``t`` of ``model`` is ``replace(t)`` and every
    plain tensor attribute ``plain(t)`` (default ``replace``; each called once per distinct
    tensor, a plain attribute that is also a parameter or buffer gets that one's replacement;
    the block gets ``{id(t): replacement}``); afterwards the model is as it was (``preserved``).
    ``keep_changes`` (a private copy the run is meant to change, such as a lazy module's
    materialisation): only the swapped slots get their tensors back."""
    plain = plain or replace
    found = slots(model)
    extra = plain_slots(model)
    memo: dict[int, torch.Tensor] = {}
    for _, _, t in found:
        if id(t) not in memo:
            memo[id(t)] = replace(t)
    for _, _, t in extra:
        if id(t) not in memo:
            memo[id(t)] = plain(t)
    with contextlib.nullcontext() if keep_changes else preserved(model):
        try:
            for table, key, t in found + extra:
                table[key] = memo[id(t)]
            yield memo
        finally:
            for table, key, t in found + extra:
                table[key] = t


def _plain_copy(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_(t.requires_grad)


def untouched(model: nn.Module):
    """For runs of the model itself (profiling): its own parameters and buffers, private copies
    of its plain tensor attributes (a forward writing into a cached tensor writes into the
    copy), and every attribute as it was afterwards (``preserved``)."""
    return swapped(model, lambda t: t, plain=_plain_copy)
