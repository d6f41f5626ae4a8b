"""ONNX graph rewrites (passes) and their numerical verification with onnxruntime.

A pass takes an ``onnx.ModelProto`` and returns a ``PassResult`` (the new model, whether anything
changed, what was replaced); it never modifies the model it is given (``rewrite/base.py``).
``PASSES`` names every pass, one registration line each; ``layerscope rewrite NAME`` is built
from it. ``verify`` runs two models on the same seeded random inputs and reports how far their
outputs are apart.
"""
from __future__ import annotations

from layerscope.core.values import arg, positive_int
from layerscope.rewrite.base import Option, PassInfo

__all__ = ["tile_linear", "PassResult", "verify", "VerifyResult", "linear_model", "PASSES",
           "register_pass", "get_pass"]

# verify's defaults, here so that the CLI can show them without importing numpy.
DEFAULT_RTOL = 1e-5
DEFAULT_ATOL = 1e-8

PASSES: dict[str, PassInfo] = {}


def register_pass(info: PassInfo) -> PassInfo:
    """Add a pass to ``PASSES``; a second pass under a taken name is a programming error."""
    if info.name in PASSES:
        raise ValueError(f"rewrite pass {info.name!r} is already registered "
                         f"({PASSES[info.name].target})")
    PASSES[info.name] = info
    return info


def get_pass(name: str) -> PassInfo:
    from layerscope.core.errors import UserError

    if name not in PASSES:
        raise UserError(f"unknown rewrite pass {name!r}: use one of {', '.join(PASSES)}")
    return PASSES[name]


# --- the passes, one line each ------------------------------------------------------------
register_pass(PassInfo("tile-linear", "layerscope.rewrite.tile_linear:tile_linear",
                       "split every Gemm and constant-weight MatMul into tile x tile MatMuls",
                       (Option("--tile", arg(positive_int), 64,
                               "tile size along K and N (default 64)", 1),)))
register_pass(PassInfo("fold-identity", "layerscope.rewrite.fold_identity:fold_identity",
                       "remove Identity nodes, rewiring their readers and graph outputs"))


def __getattr__(name):  # lazy: onnx and onnxruntime are optional dependencies
    import importlib

    home = {"tile_linear": "tile_linear", "PassResult": "base", "verify": "verify",
            "VerifyResult": "verify", "linear_model": "linear"}.get(name)
    if home is None:
        raise AttributeError(f"module 'layerscope.rewrite' has no attribute {name!r}")
    # import_module, not "from layerscope.rewrite import x": that would call this again.
    # Importing the submodule tile_linear makes it this package's attribute ``tile_linear``;
    # that module is callable (see its end), so ``layerscope.rewrite.tile_linear(model, tile)``
    # works whichever was imported first.
    return getattr(importlib.import_module(f"layerscope.rewrite.{home}"), name)
