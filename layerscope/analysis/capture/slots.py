"""Parameters and buffers swapped in place for the length of a run, by unique (module,
attribute) slot, and the very same objects put back: shared modules and tied weights are
restored exactly, and the user's tensors are never touched."""
from __future__ import annotations

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


@contextlib.contextmanager
def swapped(model: nn.Module, replace):
    """Within the block every parameter/buffer ``t`` of ``model`` is ``replace(t)`` (called once
    per distinct tensor; the block gets ``{id(t): replacement}``); afterwards the very same
    objects are back in their slots."""
    found = slots(model)
    memo: dict[int, torch.Tensor] = {}
    for _, _, t in found:
        if id(t) not in memo:
            memo[id(t)] = replace(t)
    # Plain tensor attributes too: hooks such as torch.nn.utils.weight_norm / spectral_norm set
    # ``module.weight`` from the swapped parameters during forward.
    plain = [(m, _tensor_attrs(m)) for m in model.modules()]
    try:
        for table, key, t in found:
            table[key] = memo[id(t)]
        yield memo
    finally:
        for table, key, t in found:
            table[key] = t
        for m, before in plain:
            for key in _tensor_attrs(m).keys() - before.keys():
                del m.__dict__[key]
            m.__dict__.update(before)


def _tensor_attrs(m: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v for k, v in vars(m).items() if isinstance(v, torch.Tensor)}
