"""The aten handler table and what every aten handler module shares.

The family modules (``aten_data.py``, ``aten_elementwise.py``, ``aten_reduce.py``,
``aten_spatial.py``, ``aten_contract.py``, ``aten_attention.py``, ``aten_rnn.py``) register into
``ATEN`` when imported; ``layerscope.ops.aten`` imports them all, so take the table from there.
"""
from __future__ import annotations

from layerscope.ops.registry import HandlerTable, OpCost, TensorDesc

ATEN = HandlerTable("aten")
register = ATEN.register

ZERO = OpCost()


def first_out(out) -> TensorDesc:
    while isinstance(out, (tuple, list)):
        out = out[0]
    return out


def _outs(out) -> list[TensorDesc]:
    if isinstance(out, TensorDesc):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _outs(o)]
    return []
