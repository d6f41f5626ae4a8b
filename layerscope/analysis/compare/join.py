"""``compare()``: both sides loaded, grouped and joined row by row, every row and total
explained."""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any

from layerscope.analysis.compare.context import Context, Row
from layerscope.analysis.compare.prepass import batch_ratio, find_folds
from layerscope.analysis.compare.result import (
    RELATED_FRACTION,
    ROOT,
    ROOT_LABEL,
    TOTAL_METRICS,
    UNEXPLAINED,
    CompareRow,
    Comparison,
    TotalRow,
    Unrelated,
)
from layerscope.analysis.compare.rules import Effect, explain_moves, explain_row, unexplained_effect
from layerscope.analysis.compare.sides import (
    Side,
    fold_into_covering_rows,
    group_side,
    joined_order,
    load_sides,
    source_of,
)
from layerscope.analysis.compare.totals import explain_peak, explain_total
from layerscope.core import options
from layerscope.core.compare_records import CompareSide, RowNumbers
from layerscope.core.errors import UserError
from layerscope.core.settings import REQUIRED, Settings, option
from layerscope.core.tree import with_ancestors


@dataclasses.dataclass(kw_only=True, eq=False)
class CompareSettings(Settings):
    """Every setting of ``layerscope compare`` and ``layerscope.compare`` (how the comparison
    is written is the command line's output options)."""

    a: Any = option(REQUIRED, "first model or report (the reference)", positional=True,
                    metavar="A", record=False)
    b: Any = option(REQUIRED, "second model or report", positional=True, metavar="B",
                    record=False)
    inputs: Any = options.inputs(
        "input shape for both sides, e.g. 1x3x224x224 (repeat for several inputs); default: "
        "each side's own, a TorchScript file takes the other side's", metavar="SHAPE[:DTYPE]")


# ------------------------------------------------------------------------------- compare
def _describe_side(side: Side) -> CompareSide:
    r = side.report
    return CompareSide(source=side.source, model=r.model, frontend=r.frontend, inputs=r.inputs,
                       exporter=side.exporter, layers=len(r.layers), kind=r.kind)


def _layers(side: Side) -> set[str]:
    """The side's layers: module paths with numbers (the model's own ops at the root left out:
    every model has a root)."""
    return {k for k, g in side.groups.items() if k != ROOT and not g.is_zero()}


def unrelated(side_a: Side, side_b: Side) -> Unrelated | None:
    """``Unrelated`` when fewer than ``RELATED_FRACTION`` of the smaller side's layers have a
    layer at the same path in the other; None when the models share enough of them."""
    la, lb = _layers(side_a), _layers(side_b)
    matched = len(la & lb)
    if matched >= RELATED_FRACTION * min(len(la), len(lb)):
        return None
    return Unrelated(matched=matched, a_layers=len(la), b_layers=len(lb))


def compare(a: Any = None, b: Any = None, inputs: Any = None, *,
            settings: CompareSettings | None = None, **overrides: Any) -> Comparison:
    """Join two reports of the same model by module path and explain every difference.

    ``a``/``b``: a model spec, TorchScript file, ONNX file, saved report JSON or Report.
    ``inputs``: input shapes for both sides (as ``analyze`` takes them); by default each side's
    own, and a TorchScript file takes the other side's. ``settings``: a ``CompareSettings``;
    keyword arguments override its fields."""
    given = {k: v for k, v in (("a", a), ("b", b), ("inputs", inputs)) if v is not None}
    if settings is None and not {"a", "b"} <= {*given, *overrides}:
        raise UserError("give both sides to compare: a and b", arguments=("a", "b"))
    s = CompareSettings.of(settings, **given, **overrides)
    return _join(s.a, s.b, s.inputs)


def _join(a: Any, b: Any, inputs: Any) -> Comparison:
    """``compare`` of two sides with its settings checked."""
    ra, rb, notes = load_sides(a, b, inputs)
    side_a = Side("A", ra, source_of(a), ra.frontend == "onnx")
    side_b = Side("B", rb, source_of(b), rb.frontend == "onnx")
    # keys: a side that parses legacy node names resolves suffixes against the other's paths
    group_side(side_a, ())
    group_side(side_b, with_ancestors(side_a.groups))
    if side_a.onnx:
        group_side(side_a, with_ancestors(side_b.groups))
    fold_into_covering_rows(side_a, side_b)
    fold_into_covering_rows(side_b, side_a)
    order = joined_order(side_a, side_b)
    rows = {k: Row(k, side_a.groups.get(k), side_b.groups.get(k)) for k in order}
    ctx = Context(side_a, side_b, rows)
    ratio = batch_ratio(ra, rb)
    if ratio:
        ctx.batch, ctx.batches = ratio
    find_folds(ctx)

    out_rows: list[CompareRow] = []
    explanations: list[str] = []
    contributions: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(
        lambda: [0, 0]))
    act_rules: set[str] = set()
    unexplained = 0
    residuals: dict[str, dict[str, int]] = {}
    pending: dict[str, list[Effect]] = {}
    for key in order:
        row = rows[key]
        diff = {m: v for m, v in row.diff().items() if v}
        cr = CompareRow(module=key or ROOT_LABEL,
                        a_type=row.a.type_text(side_a.onnx) if row.a else "",
                        b_type=row.b.type_text(side_b.onnx) if row.b else "",
                        a=RowNumbers(**row.a.metrics()) if row.a else None,
                        b=RowNumbers(**row.b.metrics()) if row.b else None, diff=diff)
        if diff:
            effects, residuals[key] = explain_row(ctx, row)
            pending[key] = effects
        out_rows.append(cr)
    moves = explain_moves(ctx, residuals)
    for cr, key in zip(out_rows, order):
        if key not in pending:
            continue
        effects = pending[key] + moves.get(key, [])
        if any(residuals[key].values()):
            effects.append(unexplained_effect(rows[key], residuals[key]))
        cr.rules = [e.rule for e in effects]
        cr.summary = "; ".join(e.summary for e in effects)
        text = "; ".join(e.text for e in effects)
        cr.explanation = text[0].upper() + text[1:] + "."
        explanations.append(f"{cr.module}: {cr.explanation}")
        unexplained += UNEXPLAINED in cr.rules
        for e in effects:
            for m, v in e.delta.items():
                if v:
                    contributions[m][e.rule][0] += v
                    contributions[m][e.rule][1] += 1
            if e.delta.get("activation_bytes"):
                act_rules.add(e.rule)

    totals = _totals(ctx, ra, rb, contributions, act_rules)
    unexplained += sum(UNEXPLAINED in t.rules for t in totals if t.diff)
    explanations += [t.explanation for t in totals if t.diff and t.explanation]
    identical = not any(r.diff for r in out_rows) and not any(t.diff for t in totals)
    return Comparison(a=_describe_side(side_a), b=_describe_side(side_b), totals=totals,
                      rows=out_rows, explanations=explanations, identical=identical,
                      unexplained=unexplained, notes=notes,
                      environment=dict(ra.environment or rb.environment or {}),
                      unrelated=unrelated(side_a, side_b))


def _totals(ctx: Context, ra: Any, rb: Any, contributions: dict[str, dict[str, list[int]]],
            act_rules: set[str]) -> list[TotalRow]:
    """One row per total, each that differs explained: the peak by the rules that moved
    activations, any other by the rows' contributions to it."""
    totals: list[TotalRow] = []
    for m in TOTAL_METRICS:
        ta, tb = int(getattr(ra.totals, m) or 0), int(getattr(rb.totals, m) or 0)
        tr = TotalRow(m, ta, tb, tb - ta)
        if tr.diff:
            if m == "peak_activation_bytes":
                tr.rules, text = explain_peak(ctx, ta, tb, act_rules)
            else:
                sums = (sum(int(getattr(r, m) or 0) for r in ra.layers),
                        sum(int(getattr(r, m) or 0) for r in rb.layers))
                tr.rules, text = explain_total(m, ta, tb, contributions[m], sums)
            tr.explanation = text + "."
        totals.append(tr)
    return totals
