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
# CHANGE's number; matched alone, on a string without spaces: no backtracking over whitespace
_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")
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


def _split(text: str) -> tuple[str, str, str] | None:
    """``WHAT OP N%`` as (what, op, number), whitespace around each part dropped; None when
    ``text`` does not have that form. Plain string operations, linear in the length of
    ``text`` (a regular expression with ``\\s*`` beside a lazy ``[^<>]+?`` backtracked
    cubically: 3,000 spaces took minutes)."""
    ops = [i for i, c in enumerate(text) if c in "<>"]
    if len(ops) != 1:
        return None
    what, op, rest = text[:ops[0]].strip(), text[ops[0]], text[ops[0] + 1:].strip()
    if not what or not rest.endswith("%"):
        return None
    number = rest[:-1].rstrip()
    if _NUMBER.fullmatch(number) is None:
        return None
    return what, op, number


def parse_check(text: str) -> Check:
    """An expression as a Check; UserError (one line) naming the form for a malformed one."""
    if not isinstance(text, str):
        raise UserError(f"--fail-if {text!r}: expected a string, {FORM}")
    parts = _split(text)
    if parts is None:
        raise UserError(f"--fail-if {_shown(text)}: expected {FORM}")
    what, op, number = parts
    level, _, glob = what.partition(":")
    if not glob and level in END_TO_END:
        level = "end_to_end"
    elif level not in ROW_LEVELS or not glob:
        raise UserError(f"--fail-if {_shown(text)}: unknown {_shown(what)}; expected {FORM}")
    return Check(text.strip(), level, glob, op, float(number) / 100)


def _shown(text: str, most: int = 60) -> str:
    """``text`` quoted for a message, cut to ``most`` characters of its quoted form (a
    3,000-space expression is one readable line)."""
    quoted = repr(text)
    return quoted if len(quoted) <= most else f"{quoted[:most]}... ({len(text)} characters)"


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
