"""The constants and layer categories the rest of the package shares. What ``compare`` returns
(:class:`Comparison` and its rows) and the metric names are records in core
(core/compare_records.py), imported here under their old names."""
from __future__ import annotations

from layerscope.core.compare_records import (  # noqa: F401 - their old import path
    LABELS,
    ROW_METRICS,
    TOTAL_METRICS,
    CompareRow,
    Comparison,
    TotalRow,
    Unrelated,
)

ROOT = ""
ROOT_LABEL = "(root)"
# Two models look unrelated when fewer than this fraction of the smaller one's layers (rows
# with numbers) have a layer at the same module path in the other.
RELATED_FRACTION = 0.5
UNEXPLAINED = "unexplained"

# Layer types by what they do, for PyTorch modules and ONNX ops alike.
CATEGORIES = {
    "batchnorm": {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm",
                  "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d", "BatchNormalization"},
    "conv": {"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
             "ConvTranspose3d", "LazyConv1d", "LazyConv2d", "LazyConv3d", "Conv",
             "ConvTranspose", "FusedConv"},
    "linear": {"Linear", "LazyLinear", "NonDynamicallyQuantizableLinear", "Bilinear", "Gemm",
               "FusedGemm", "MatMul", "FusedMatMul"},
    "dropout": {"Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout",
                "FeatureAlphaDropout"},
    "activation": {"ReLU", "Relu", "ReLU6", "LeakyReLU", "LeakyRelu", "PReLU", "ELU", "Elu",
                   "SELU", "Selu", "CELU", "Celu", "GELU", "Gelu", "SiLU", "Mish", "Hardswish",
                   "HardSwish", "Hardsigmoid", "HardSigmoid", "Sigmoid", "Tanh", "Softplus",
                   "Clip"},
    "identity": {"Identity"},
    "layernorm": {"LayerNorm", "LayerNormalization"},
}
FUSED_TYPES = {"FusedConv", "FusedGemm", "FusedMatMul", "QLinearConv"}
# ONNX ops that are views (no new tensor) and ops that copy data without arithmetic
VIEW_TYPES = {"Flatten", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Unflatten"}
COPY_TYPES = {"Transpose", "Expand", "Concat", "Slice", "Split", "Cast", "Tile", "Pad", "Gather"}
# ONNX ops that compute shapes (PyTorch does that with Python integers)
SHAPE_TYPES = {"Shape", "Size", "ConstantOfShape", "Range"}
SMALL_INT_TYPES = {"Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast", "Constant",
                   "Equal", "Where", "Mul", "Div", "Add", "Sub", "Reshape"}
INDEX_BYTES = 8  # PyTorch's max-pool indices are int64
FRONTEND_NAMES = {"torch": "PyTorch", "torchscript": "TorchScript", "onnx": "ONNX"}


def category(type_name: str) -> str | None:
    for cat, names in CATEGORIES.items():
        if type_name in names:
            return cat
    return None
