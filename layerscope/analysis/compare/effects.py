"""What a comparison rule finds (``Effect``), how a rule is declared (``Rule``), and the
helpers the rules share: the words for a difference and the sizes they read."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from layerscope.analysis.compare.context import Context, Row, fmt, signed
from layerscope.analysis.compare.result import LABELS, ROW_METRICS
from layerscope.analysis.compare.sides import Group
from layerscope.core.report import LayerRow


@dataclass
class Effect:
    """What one rule accounts for in one row: B - A per number, and the words for it."""

    rule: str
    summary: str
    text: str
    delta: dict[str, int]


@dataclass(frozen=True)
class Rule:
    name: str
    label: str
    # (context, row, what is left of B - A) -> the part it accounts for, or None
    explain: Callable[[Context, Row, dict[str, int]], Effect | None] | None


def finding(summary: str, text: str, delta: dict[str, int]) -> Effect:
    """A rule function's finding; ``explain_row`` fills in the rule's name from RULES."""
    return Effect("", summary, text, delta)


def deltas(delta: dict[str, int], metrics: Sequence[str] = ROW_METRICS) -> str:
    return ", ".join(f"{LABELS[m]} {signed(delta[m])}" for m in metrics if delta.get(m))


def amounts_text(values: dict[str, int]) -> str:
    """'16 FLOPs, 128 bytes read' (magnitudes)."""
    return ", ".join(f"{fmt(abs(v))} {LABELS[m]}" for m, v in values.items() if v)


def sign_of(has: str) -> int:
    """B - A of something only side ``has`` has: +1 when B has it, -1 when A does."""
    return 1 if has == "B" else -1


def scaled_by(delta: dict[str, int], s: int) -> dict[str, int]:
    return {k: s * v for k, v in delta.items()}


def numel_of(shape: Sequence[Any]) -> int:
    return math.prod(int(d) for d in shape) if all(isinstance(d, int) for d in shape) else 0


def out_numel(row: LayerRow) -> int:
    return numel_of(row.output_shapes[0]) if row.output_shapes else 0


def itemsize_of(*groups: Group | None) -> int:
    for g in groups:
        if g is not None and g.metric("params"):
            return max(g.metric("weight_bytes") // g.metric("params"), 1)
    return 4
