"""``--fail-if``: thresholds on a diff, for CI. Only changes beyond the noise count.

An expression is ``WHAT OP CHANGE``:
- WHAT: ``step``, ``end_to_end``, ``forward`` or ``batch`` (the end-to-end row, whatever the
  kind calls it), or ``LEVEL:GLOB`` with LEVEL one of phase, rank, type, layer, cell, point
  and GLOB a shell pattern matched against the row's name (``layer:*.attn``, ``phase:backward``);
- OP: ``>`` (slower by more than) or ``<`` (faster by more than: a negative CHANGE);
- CHANGE: a signed percentage, ``+5%``, ``-10%``, ``5%``.

A row fails ``> +5%`` when its verdict is slower and its change is above +5%; ``< -5%`` when
its verdict is faster and its change is below -5%. A row within the noise never fails. An
expression whose level the diffed kind has no rows of (``step`` on a sweep, anything on a
static analyze diff) can never fail: a ``LayerscopeWarning`` says so, since a CI gate that
cannot fail looks like one that passed.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from fnmatch import fnmatchcase

from layerscope.analysis.diff.measures import LEVELS
from layerscope.core.diff_records import DiffReport, DiffRow
from layerscope.core.errors import LayerscopeWarning, UserError

END_TO_END = ("step", "end_to_end", "forward", "batch")
ROW_LEVELS = ("phase", "rank", "type", "layer", "cell", "point")
_EXPR = re.compile(r"^\s*(?P<what>[^<>]+?)\s*(?P<op>[<>])\s*(?P<num>[+-]?\d+(?:\.\d+)?)\s*%\s*$")
FORM = ("WHAT>+N% or WHAT<-N% (WHAT: step, end_to_end, or "
        "phase|rank|type|layer|cell|point:PATTERN)")


@dataclass(frozen=True)
class Check:
    """One parsed expression."""

    text: str
    level: str  # end_to_end or one of ROW_LEVELS
    glob: str  # the row name pattern ("" for end_to_end)
    op: str  # > or <
    threshold: float  # a fraction: +5% is 0.05

    def matches(self, row: DiffRow) -> bool:
        if self.level == "end_to_end":
            return row.level == "end_to_end"
        return row.level == self.level and fnmatchcase(row.name, self.glob)

    def fails(self, row: DiffRow) -> bool:
        if not self.matches(row) or row.change is None:
            return False
        if self.op == ">":
            return row.verdict == "slower" and row.change > self.threshold
        return row.verdict == "faster" and row.change < self.threshold


def parse_check(text: str) -> Check:
    """An expression as a Check; UserError (one line) naming the form for a malformed one."""
    m = _EXPR.match(text)
    if m is None:
        raise UserError(f"--fail-if {text!r}: expected {FORM}")
    what = m["what"]
    level, _, glob = what.partition(":")
    if not glob and level in END_TO_END:
        level = "end_to_end"
    elif level not in ROW_LEVELS or not glob:
        raise UserError(f"--fail-if {text!r}: unknown {what!r}; expected {FORM}")
    return Check(text.strip(), level, glob, m["op"], float(m["num"]) / 100)


def never_fails(check: Check, kind: str) -> str | None:
    """Why ``check`` can never fail on a diff of ``kind`` (its level has no rows there), or
    None."""
    levels = LEVELS.get(kind)
    if levels is None or check.level in levels:
        return None
    what = "end-to-end row" if check.level == "end_to_end" else f"{check.level} rows"
    if not levels:
        return (f"{check.text!r} can never fail: an {kind} diff is static (nothing in it is "
                f"slower or faster)")
    return (f"{check.text!r} can never fail: a {kind} diff has no {what} (its rows: "
            f"{', '.join(levels)})")


def failed_checks(report: DiffReport, checks: list[str] | list[Check]) -> list[str]:
    """One line per (expression, row) that fails, in the order given; empty when all pass.
    Expressions are parsed first, so a malformed one raises before anything is judged."""
    parsed = [c if isinstance(c, Check) else parse_check(c) for c in checks]
    for check in parsed:
        why = never_fails(check, report.compared)
        if why:
            warnings.warn(why, LayerscopeWarning, stacklevel=2)
    out = []
    for check in parsed:
        for row in report.all_rows():
            if check.fails(row):
                label = ("end to end" if row.level == "end_to_end" else row.name
                         if row.level == "rank" else f"{row.level} {row.name}")
                out.append(f"{check.text}: {label} {row.change:+.1%} ({row.verdict} beyond "
                           f"noise, {row.basis})")
    return out
