"""Why a layer's work changed: the static side of a diff of two reports (profile or analyze).

The rows are joined and their differences explained by ``layerscope compare``
(analysis/compare: the same module paths, the same rules); on top of its sentence this adds the
change of each layer's input shape in words ("its input grew from 16x32x32 to 16x64x64"),
which is what a timing difference is usually read against.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from layerscope.analysis.compare import LABELS, ROW_METRICS, UNEXPLAINED, compare
from layerscope.core.units import shape_str, si

# the figures named in an explanation, in this order (compare's row metrics)
NAMED = ("macs", "params", "activation_bytes")
# the figures that say whether a row does more or less work, the first that differs decides
WORK = ("flops", "macs", "activation_bytes", "bytes_read", "bytes_written")


@dataclass
class Static:
    """Per module path (the report's row name): what changed and a sentence saying it."""

    rows: dict[str, str] = field(default_factory=dict)  # name -> explanation
    diffs: dict[str, dict[str, int]] = field(default_factory=dict)  # name -> new - base
    grew: dict[str, str] = field(default_factory=dict)  # name -> "its input grew from A to B"
    types: dict[str, str] = field(default_factory=dict)  # type -> explanation
    type_diffs: dict[str, dict[str, int]] = field(default_factory=dict)  # type -> new - base
    total: str = ""  # the whole model
    only_base: list[tuple[str, str]] = field(default_factory=list)  # (name, type)
    only_new: list[tuple[str, str]] = field(default_factory=list)


def numel(shapes: Any) -> int:
    return sum(math.prod(int(d) for d in s) for s in shapes or [] if isinstance(s, list))


def shape_change(base_shapes: Any, new_shapes: Any, what: str = "its input") -> str | None:
    """"its input grew from 16x32x32 to 16x64x64" (or shrank, or changed), None when equal."""
    if base_shapes == new_shapes:
        return None
    a, b = numel(base_shapes), numel(new_shapes)
    verb = "grew" if b > a else "shrank" if b < a else "changed"
    factor = f" ({b / a:.3g}x)" if a and b and a != b else ""
    return f"{what} {verb} from {shape_str(base_shapes)} to {shape_str(new_shapes)}{factor}"


def _pct(a: int, b: int) -> str:
    """+14%, or "from 0 to 6.29G" for a figure that was 0 (no percentage of nothing)."""
    return f"{(b - a) / a:+.0%}" if a else f"from 0 to {si(b)}"


def figures(base: dict[str, int], diff: dict[str, int]) -> str:
    """"MACs +300%, parameters +1,024": the named figures that differ, relative to base."""
    return ", ".join(f"{LABELS[m]} {_pct(base.get(m, 0), base.get(m, 0) + diff[m])}"
                     for m in NAMED if diff.get(m))


def explain(base: Any, new: Any) -> Static:
    """The static differences of two reports (Report objects), per row, per type and in
    total."""
    out = Static()
    comparison = compare(base, new)
    by_module = {r.module: r for r in comparison.rows}
    base_rows = {r.name: r for r in base.layers}
    new_rows = {r.name: r for r in new.layers}
    for name, row in new_rows.items():
        old = base_rows.get(name)
        if old is None:
            continue
        parts = []
        grew = shape_change(old.input_shapes, row.input_shapes)
        if grew:
            out.grew[name] = grew
            parts.append(grew)
        else:  # the same input: a wider or narrower layer shows in what it makes
            wider = shape_change(old.output_shapes, row.output_shapes, "its output")
            if wider:
                parts.append(wider)
        diff = {m: getattr(row, m) - getattr(old, m) for m in ROW_METRICS
                if getattr(row, m) != getattr(old, m)}
        if diff:
            out.diffs[name] = diff
            said = figures({m: getattr(old, m) for m in ROW_METRICS}, diff)
            if said:
                parts.append(said)
            cr = by_module.get(name) or by_module.get(name.removesuffix(" (own ops)"))
            if cr is not None and cr.summary and cr.rules != [UNEXPLAINED] and not grew:
                parts.append(cr.summary)
        if parts:
            out.rows[name] = "; ".join(parts)
    out.only_base = [(n, r.type) for n, r in base_rows.items() if n not in new_rows]
    out.only_new = [(n, r.type) for n, r in new_rows.items() if n not in base_rows]
    _types(base, new, out)
    inputs = shape_change([i.get("shape") for i in base.inputs or []],
                          [i.get("shape") for i in new.inputs or []], "the input")
    total_diff = {m: int(getattr(new.totals, m) or 0) - int(getattr(base.totals, m) or 0)
                  for m in NAMED}
    said = figures({m: int(getattr(base.totals, m) or 0) for m in NAMED}, total_diff)
    out.total = "; ".join(p for p in (inputs, said) if p)
    return out


def work_sign(diff: dict[str, int] | None) -> int:
    """1 when a row's static figures (``Static.diffs``) say it does more work, -1 less, 0 when
    none of ``WORK`` differs."""
    found = diff or {}
    x = next((found[m] for m in WORK if found.get(m)), 0)
    return (x > 0) - (x < 0)


def _types(base: Any, new: Any, out: Static) -> None:
    sums: dict[str, list[dict[str, int]]] = defaultdict(lambda: [defaultdict(int),
                                                                 defaultdict(int)])
    for side, report in enumerate((base, new)):
        for r in report.layers:
            for m in NAMED:
                sums[r.type][side][m] += getattr(r, m)
    for type_, (a, b) in sums.items():
        diff = {m: b[m] - a[m] for m in NAMED if b[m] != a[m]}
        if diff:
            out.types[type_] = figures(dict(a), diff)
            out.type_diffs[type_] = diff
    own = " (own ops)"
    for type_ in list(out.types):  # by_type names a container's own rows "TYPE (own ops)"
        out.types[type_ + own] = out.types[type_]
        out.type_diffs[type_ + own] = out.type_diffs[type_]


