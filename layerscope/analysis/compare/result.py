"""What ``compare`` returns (:class:`Comparison` and its rows), and the constants and layer
categories the rest of the package and the renderers share."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from layerscope.core.document import Record, ResultDocument, omit_none
from layerscope.core.report import SCHEMA_VERSION

ROW_METRICS = ("params", "weight_bytes", "buffer_bytes", "macs", "flops", "bytes_read",
               "bytes_written", "activation_bytes")
TOTAL_METRICS = ROW_METRICS + ("peak_activation_bytes",)
LABELS = {"params": "parameters", "weight_bytes": "weight bytes", "buffer_bytes": "buffer bytes",
          "macs": "MACs", "flops": "FLOPs", "bytes_read": "bytes read",
          "bytes_written": "bytes written", "activation_bytes": "activation bytes",
          "peak_activation_bytes": "peak activation bytes"}
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


# ------------------------------------------------------------------------------- result
@dataclass
class CompareRow:
    """One module path: each side's rows summed (``a``/``b`` None where that side has none)."""

    module: str  # "(root)" for the model's own ops
    a_type: str
    b_type: str
    a: dict[str, int] | None
    b: dict[str, int] | None
    diff: dict[str, int]  # B - A, the numbers that differ only
    rules: list[str] = field(default_factory=list)  # the rules that explain ``diff``
    summary: str | None = None  # a few words per rule, for the table
    explanation: str | None = None  # one sentence


@dataclass
class TotalRow:
    metric: str
    a: int
    b: int
    diff: int  # B - A
    rules: list[str] = field(default_factory=list)
    explanation: str | None = None


@dataclass
class Unrelated(Record):
    """The two models share few layers (``matched`` of the smaller side's ``smaller`` layers
    have a counterpart at the same module path, under ``RELATED_FRACTION``): a row by row
    explanation of two different networks says little."""

    matched: int
    a_layers: int
    b_layers: int

    @property
    def text(self) -> str:
        smaller = min(self.a_layers, self.b_layers)
        return (f"the models look unrelated: {self.matched} of the smaller model's {smaller} "
                f"layers match a layer of the other by module path (A has {self.a_layers} "
                f"layers, B {self.b_layers}); the explanations compare different networks, so "
                "compare a model with a variant or an export of itself")


@dataclass
class Comparison(ResultDocument):
    """Two reports joined. ``a``/``b``: source, model, frontend, inputs, exporter, rows."""

    a: dict[str, Any]
    b: dict[str, Any]
    totals: list[TotalRow]
    rows: list[CompareRow]
    explanations: list[str]  # every sentence, rows first, then totals
    identical: bool
    unexplained: int  # rows and totals with an unexplained part
    notes: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)  # A's (else B's) analysis machine
    unrelated: Unrelated | None = field(default=None, metadata=omit_none())
    kind: str = "compare"
    schema_version: str = SCHEMA_VERSION

    @property
    def model(self) -> str:
        return f"{self.a.get('model')} vs {self.b.get('model')}"

    def differing_rows(self) -> list[CompareRow]:
        return [r for r in self.rows if r.diff]

