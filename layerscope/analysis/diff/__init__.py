"""``layerscope diff BASE.json NEW.json [MORE.json...]``: did it get slower, and why.

Saved results of one kind are joined figure by figure: the end-to-end time first, then phases
(train, run, loop), layer types and layers (profile, loop), sweep cells or scaling points.
Every result but the last together form the baseline; the last is the new one. Each figure gets
a verdict from the runs' own samples (:mod:`.verdict`: a rank test, else the p10-p90 overlap),
each layer the static change behind it (:mod:`.static`, through ``layerscope compare``), and the
environment differences that make the comparison unfair are listed (:mod:`.unfair`).

Layout: :mod:`.measures` (what each kind timed), :mod:`.verdict`, :mod:`.static`,
:mod:`.unfair`, :mod:`.join` (``diff_results``), :mod:`.shifts` (the whole run's shift),
:mod:`.rows` (one row's verdict and explanation), :mod:`.summary` (the summary sentence),
:mod:`.notes`, :mod:`.gate` (``--fail-if``).
"""
from __future__ import annotations

from layerscope.analysis.diff.gate import Check, failed_checks, parse_check
from layerscope.analysis.diff.join import diff, diff_files, diff_results
from layerscope.analysis.diff.verdict import ALPHA, MIN_EFFECT, MIN_SAMPLES
from layerscope.core.diff_records import DiffReport, DiffRow

__all__ = ["ALPHA", "MIN_EFFECT", "MIN_SAMPLES", "Check", "DiffReport", "DiffRow",
           "diff", "diff_files", "diff_results", "failed_checks", "parse_check"]
