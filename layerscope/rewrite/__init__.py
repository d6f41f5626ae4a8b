"""ONNX graph rewrites (passes) and their numerical verification with onnxruntime.

A pass takes an ``onnx.ModelProto`` and returns a ``PassResult`` (the new model, whether anything
changed, what was replaced); it never modifies the model it is given. ``verify`` runs two models
on the same seeded random inputs and reports how far their outputs are apart.
"""
from __future__ import annotations

__all__ = ["tile_linear", "PassResult", "verify", "VerifyResult", "linear_model"]

# verify's defaults, here so that the CLI can show them without importing numpy.
DEFAULT_RTOL = 1e-5
DEFAULT_ATOL = 1e-8
OPTIMIZATIONS = ("disable", "basic", "extended", "all")  # onnxruntime graph optimisation levels


def __getattr__(name):  # lazy: onnx and onnxruntime are optional dependencies
    # import_module, not `from layerscope.rewrite import verify`: that looks the name up on
    # this package first, which calls this function again, without end.
    if name in ("tile_linear", "PassResult", "verify", "VerifyResult"):
        import importlib

        module = "tile_linear" if name in ("tile_linear", "PassResult") else "verify"
        return getattr(importlib.import_module(f"layerscope.rewrite.{module}"), name)
    if name == "linear_model":
        from layerscope.rewrite.linear import linear_model

        return linear_model
    raise AttributeError(f"module 'layerscope.rewrite' has no attribute {name!r}")
