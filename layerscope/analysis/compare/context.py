"""What every comparison rule reads: one joined row (its A and B groups), the comparison's
context (both sides, the pre-pass findings), and the number formats the explanations use."""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from layerscope.analysis.compare.result import FRONTEND_NAMES, ROW_METRICS
from layerscope.analysis.compare.sides import Group, Side


@dataclass
class Row:
    key: str
    a: Group | None
    b: Group | None

    def value(self, side: str, metric: str) -> int:
        g = self.a if side == "A" else self.b
        return g.metric(metric) if g else 0

    def diff(self) -> dict[str, int]:
        return {m: self.value("B", m) - self.value("A", m) for m in ROW_METRICS}


@dataclass
class Context:
    a: Side
    b: Side
    rows: dict[str, Row]
    batch: Fraction | None = None  # B's batch / A's batch when only the batch differs
    batches: tuple[int, int] | None = None
    # bn key -> (the conv key it folded into, the side that still has the BN)
    folded_bn: dict[str, tuple[str, str]] = field(default_factory=dict)
    bn_into: dict[str, str] = field(default_factory=dict)  # conv key -> bn key
    # conv key -> bn key, where the folded node carries the BatchNorm's scope (onnxscript)
    conv_under_bn: dict[str, str] = field(default_factory=dict)
    fused_act: dict[str, str] = field(default_factory=dict)  # act key -> the key it fused into
    fused_into: dict[str, str] = field(default_factory=dict)  # key -> act key fused into it

    def side(self, label: str) -> Side:
        return self.a if label == "A" else self.b

    def group(self, label: str, key: str) -> Group | None:
        return self.side(label).groups.get(key)

    def name(self, label: str) -> str:
        """'PyTorch', 'ONNX', ...; 'A'/'B' when both sides are the same kind."""
        fa, fb = self.a.report.frontend, self.b.report.frontend
        if FRONTEND_NAMES.get(fa, fa) == FRONTEND_NAMES.get(fb, fb):
            return label
        f = self.side(label).report.frontend
        return FRONTEND_NAMES.get(f, f)


def fmt(n: int | float) -> str:
    return f"{n:,}"


def signed(n: int) -> str:
    return f"{n:+,}"


def present_only(row: Row) -> str | None:
    """'A' or 'B' when only that side has non-zero numbers for the row (the other has no rows or
    only zero-cost ones such as Identity)."""
    a_zero = row.a is None or row.a.is_zero()
    b_zero = row.b is None or row.b.is_zero()
    if row.a is not None and not a_zero and b_zero:
        return "A"
    if row.b is not None and not b_zero and a_zero:
        return "B"
    return None
