"""``layerscope compare A B``: two reports of the same model joined layer by layer, totals side by
side, and every difference explained in words.

A and B are anything ``analyze`` reads (a model spec, a TorchScript file, an ONNX file), a saved
report JSON (kind analyze or profile), or a :class:`~layerscope.core.report.Report`.

**Join key: the PyTorch module path.** PyTorch and TorchScript rows are keyed by their ``name``
(a container's ``(own ops)`` row by the container's path, ``(root)`` by ""). ONNX nodes are
grouped by module path and summed: the dynamo exporter's name scopes (row ``scope``), or, for
the legacy exporter, the path parsed from the node name (:func:`legacy_scope`); nodes with
neither belong to the root. A key one side has and the other lacks is folded into its nearest
ancestor on the other side when that ancestor's row covers its whole subtree (a ``--depth``
report), so leaf rows and depth-limited rows join too.

**Explanations.** Every joined row whose numbers differ gets one sentence. The sentence is built
from rules (``RULES``); each rule that applies predicts exactly how much of each number it
accounts for (B - A), and the prediction is subtracted from the observed difference. Whatever is
left after all rules is reported as ``unexplained`` with the exact numbers, so an explanation
is never a guess that hides a discrepancy. Totals are explained by summing the rows' accounted
differences per rule; the peak, which is not a sum over rows, by how each side measures it.

Layout: :mod:`.result` (what compare returns, shared constants), :mod:`.sides` (loading the two
sides, join keys), :mod:`.rules` (the explanation rules), :mod:`.prepass` (folds and the batch
ratio found before the rules run), :mod:`.totals` (explaining the totals), :mod:`.join`
(``compare()`` itself).
"""
from __future__ import annotations

from layerscope.analysis.compare.join import compare
from layerscope.analysis.compare.result import (
    CATEGORIES,
    COPY_TYPES,
    FRONTEND_NAMES,
    FUSED_TYPES,
    INDEX_BYTES,
    LABELS,
    ROOT,
    ROOT_LABEL,
    ROW_METRICS,
    SHAPE_TYPES,
    SMALL_INT_TYPES,
    TOTAL_METRICS,
    UNEXPLAINED,
    VIEW_TYPES,
    CompareRow,
    Comparison,
    TotalRow,
    category,
)
from layerscope.analysis.compare.rules import (
    RULE_LABELS,
    RULES,
    Effect,
    Rule,
    explain_moves,
    explain_row,
)
from layerscope.analysis.compare.sides import legacy_scope

__all__ = [
    "CATEGORIES", "COPY_TYPES", "FRONTEND_NAMES", "FUSED_TYPES", "INDEX_BYTES", "LABELS", "ROOT",
    "ROOT_LABEL", "ROW_METRICS", "SHAPE_TYPES", "SMALL_INT_TYPES", "TOTAL_METRICS",
    "UNEXPLAINED", "VIEW_TYPES", "Comparison", "CompareRow", "TotalRow", "category",
    "legacy_scope", "RULE_LABELS", "RULES", "Rule", "Effect", "explain_moves", "explain_row",
    "compare",
]
