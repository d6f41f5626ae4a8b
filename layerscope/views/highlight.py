"""Which layers of a profile are "hot" (drawn in red / outlined and named): one rule for the
terminal table, the HTML table, the SVG charts and the PNG.

``--highlight`` chooses the rule; it is kept in ``report.settings["highlight"]`` (a small dict)
so ``render`` of a saved JSON draws the same layers. Without it: share ≥ 10% or rank ≤ 3.

    0.00036, 3.6e-4s, 0.36ms  a layer's median time at or above it
    top-5                     the N slowest (rank ≤ N)
    10%                       the layer's share of the end-to-end median at or above it
"""
from __future__ import annotations

import math
import re

from layerscope.core import values
from layerscope.core.errors import UserError

HOT_SHARE = 0.10  # default: rows at or above this share of the end-to-end median
HOT_TOP = 3  # default: and the 3 slowest
DEFAULT = {"rule": "default"}

_HELP = ("write seconds (0.00036, 3.6e-4s or 0.36ms: a layer's median at or above it), top-N "
         "(top-5: the N slowest) or a share (10%: of the run, at or above it)")
_NUMBER = r"[0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?"


MAX_SECONDS = 3600.0  # no layer takes an hour per call: a larger value is a typo


def parse_highlight(text: str) -> dict:
    """'3.6e-4s' -> {'rule': 'seconds', 'value': 0.00036}; 'top-5' -> {'rule': 'top',
    'value': 5}; '10%' -> {'rule': 'share', 'value': 0.1}; 'default' -> the default rule."""
    t = str(text).strip().lower().replace(" ", "")
    if t == "default":
        return dict(DEFAULT)
    m = re.fullmatch(r"top-?([0-9]+)", t)
    if m:
        n = values.positive_int(m.group(1), f"--highlight {text!r}: N of top-N")
        return {"rule": "top", "value": n}
    m = re.fullmatch(rf"({_NUMBER})%", t)
    if m:
        v = float(m.group(1))
        if not 0 < v <= 100:
            raise UserError(f"--highlight {text!r}: a share is more than 0% and at most 100%")
        return {"rule": "share", "value": v / 100}
    m = re.fullmatch(rf"({_NUMBER})(ms|s)?", t)
    if m:
        v = float(m.group(1)) * (1e-3 if m.group(2) == "ms" else 1.0)
        if not (math.isfinite(v) and 0 < v <= MAX_SECONDS):
            raise UserError(f"--highlight {text!r}: a time must be more than 0 seconds and at "
                            f"most {MAX_SECONDS:g} (a layer's median time)")
        return {"rule": "seconds", "value": v}
    raise UserError(f"--highlight {text!r}: {_HELP}")


def rule_of(report) -> dict:
    """The rule a result asks for (its settings), or the default."""
    rule = (getattr(report, "settings", None) or {}).get("highlight")
    return rule if isinstance(rule, dict) and rule.get("rule") else dict(DEFAULT)


def hot_predicate(rule: dict | None = None):
    """row -> bool for a rule from ``parse_highlight`` (None: the default)."""
    rule = rule or DEFAULT
    kind, v = rule.get("rule"), rule.get("value")
    if kind in ("seconds", "share"):
        # "at or above": a value printed as 0.090 ms is 8.9999e-05 s in binary; 1e-9 relative
        # slack keeps it at the threshold the user typed
        v = v * (1 - 1e-9)
    if kind == "seconds":
        return lambda row: ((row.time or {}).get("median_s") or 0.0) >= v
    if kind == "top":
        return lambda row: row.rank is not None and row.rank <= v
    if kind == "share":
        return lambda row: (row.share or 0.0) >= v
    return lambda row: (row.share or 0.0) >= HOT_SHARE or (row.rank or 99) <= HOT_TOP


def describe(rule: dict | None = None) -> str:
    """'layers with median ≥ 0.36 ms' — the words the notes and captions use."""
    rule = rule or DEFAULT
    kind, v = rule.get("rule"), rule.get("value")
    if kind == "seconds":
        return f"layers with median ≥ {v * 1e3:.3g} ms"
    if kind == "top":
        return f"the {v} slowest layer{'s' if v != 1 else ''}"
    if kind == "share":
        return f"layers with share ≥ {v * 100:.3g}%"
    return f"hot layers (share ≥ {HOT_SHARE:.0%} or top {HOT_TOP})"


def apply_highlight(report, text: str | dict | None) -> None:
    """Keep ``--highlight`` in the result's settings (so a saved JSON renders the same)."""
    if text is None:
        return
    if getattr(report, "kind", None) != "profile" or not hasattr(report, "settings"):
        raise UserError(f"--highlight applies to profile results, not to a "
                        f"{getattr(report, 'kind', '?')} result")
    report.settings["highlight"] = text if isinstance(text, dict) else parse_highlight(text)
