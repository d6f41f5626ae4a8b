"""Loading and saving ONNX files: bad files become one-line UserErrors, writes are atomic."""
from __future__ import annotations

from layerscope.core.errors import UserError, first_line
from layerscope.core.io import write_file

# onnxruntime 1.31 accepts models of IR version 13 at most (onnx 1.23 writes 14 by default).
MAX_IR_VERSION = 13


def require_onnx():
    try:
        import onnx
    except ImportError:
        raise UserError("this needs the onnx package: pip install 'layerscope[onnx]'") from None
    return onnx


def require_onnxruntime():
    try:
        import onnxruntime
    except ImportError:
        raise UserError("this needs onnxruntime: pip install 'layerscope[onnx]'") from None
    return onnxruntime


def load_onnx(path: str):
    """Load an ONNX file (with its external data) or raise a one-line UserError."""
    from layerscope.frontends.onnx_model import check_onnx_file, unreadable_hint

    onnx = require_onnx()
    check_onnx_file(path)
    try:
        model = onnx.load(path)
    except Exception as exc:

        raise UserError(f"{path} is not an ONNX model ({first_line(exc)}); "
                        f"{unreadable_hint(path)}") from exc
    if model.ir_version <= 0 or not model.HasField("graph") or not model.opset_import:
        raise UserError(f"{path} is not an ONNX model (no IR version, graph or opset)")
    return model


def check_initializer_values(model) -> None:
    """Every initializer must hold its values, as many as its dims say: a pass reads them, and
    a model without them would be written out as broken as it came in."""
    from onnx import numpy_helper
    from onnx.external_data_helper import uses_external_data

    for t in model.graph.initializer:
        dims = "x".join(str(d) for d in t.dims) or "scalar"
        if uses_external_data(t):
            raise UserError(f"initializer {t.name!r} ({dims}) keeps its values in an external "
                            "data file that was not loaded: load the model with onnx.load(path)")
        try:
            numpy_helper.to_array(t)  # a view of raw_data; a copy only of typed fields
        except Exception as exc:
            raise UserError(f"initializer {t.name!r} ({dims}) does not hold the values its "
                            f"dims call for ({first_line(exc)}); the model file is incomplete "
                            "or corrupt") from exc



def save_onnx(model, path: str) -> None:
    try:
        data = model.SerializeToString()
    except ValueError as exc:  # protobuf refuses messages over 2 GB
        raise UserError(f"cannot write {path}: the model is over protobuf's 2 GB limit "
                        "(external data is not supported by this command)") from exc
    write_file(path, data)
