"""``diff_results``: results of one kind joined figure by figure, each with its verdict, the
static explanation beside it, the unfair differences and the summary sentence."""
from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from layerscope.analysis.diff.facts import settings_differ, static_changes, work_direction
from layerscope.analysis.diff.measures import KINDS, Measure, Timed, pooled, spread, timed
from layerscope.analysis.diff.notes import different_models, model_name, noise_notes
from layerscope.analysis.diff.rows import (
    SAME_WORK,
    WORK_MOVED,
    diff_row,
    mark_renamed,
    static_rows,
)
from layerscope.analysis.diff.shifts import (
    MAD_SIGMA,
    MIN_BLIND_ROWS,
    MIN_LEVEL_ROWS,
    SHARED_LEVELS,
    common_shifts,
    group_notes,
    group_of,
    group_shifts,
    rescaled,
    typical_moves,
)
from layerscope.analysis.diff.static import Static, explain, work_sign
from layerscope.analysis.diff.summary import (
    ATTRIBUTE_TO,
    cause_words,
    expected_from_flops,
    pattern,
    pct,
    points_text,
    summary,
    what_changed,
)
from layerscope.analysis.diff.unfair import unfair
from layerscope.analysis.diff.verdict import ALPHA, MIN_EFFECT, drift_tolerance, rank_p
from layerscope.core.diff_records import DiffFile, DiffReport, DiffRow, StaticChange
from layerscope.core.errors import UserError
from layerscope.core.results import read_result
from layerscope.core.stats import holm_adjusted

# the names the diff's modules declare, importable from here as before
__all__ = ["ATTRIBUTE_TO", "LEVEL_ORDER", "LEVEL_WORDS", "MAD_SIGMA", "MIN_BLIND_ROWS",
           "MIN_LEVEL_ROWS", "SAME_WORK", "SHARED_LEVELS", "WORK_MOVED", "common_shifts",
           "diff", "diff_files", "diff_results", "different_models", "expected_from_flops",
           "group_notes", "group_of", "group_shifts", "mark_renamed", "noise_notes", "pattern",
           "pct", "points_text", "rescaled", "summary", "typical_moves"]

LEVEL_ORDER = ("end_to_end", "phase", "rank", "type", "layer", "cell", "point")


def diff_files(paths: Sequence[str], min_effect: float = MIN_EFFECT) -> DiffReport:
    """``layerscope diff``: read the saved results, then ``diff_results``."""
    return diff_results([read_result(p) for p in paths], names=list(paths), min_effect=min_effect)


def diff(*results: Any, names: Sequence[str] | None = None,
         min_effect: float = MIN_EFFECT) -> DiffReport:
    """``layerscope.diff(base, new)``: each of ``results`` a saved result's path (str or
    os.PathLike) or a result object (what ``layerscope.profile`` and the other commands
    return); the paths name their results unless ``names`` is given."""
    loaded, given = [], []
    for i, r in enumerate(results):
        if isinstance(r, (str, os.PathLike)):
            path = os.fsdecode(os.fspath(r))
            loaded.append(read_result(path))
            given.append(path)
        else:
            loaded.append(r)
            given.append(f"result {i + 1}")
    return diff_results(loaded, names=names if names is not None else given,
                        min_effect=min_effect)


def _check(results: Sequence[Any], names: list[str]) -> str:
    if len(results) < 2:
        raise UserError("diff needs at least two results: the base (one or more) and the new one")
    kinds = [getattr(r, "kind", None) for r in results]
    for name, kind in zip(names, kinds):
        if kind not in KINDS:
            raise UserError(f"{name}: diff reads {', '.join(KINDS)} results, not {kind}")
    if len(set(kinds)) > 1:
        which = ", ".join(f"{n} is {k}" for n, k in zip(names, kinds))
        raise UserError(f"diff compares results of one kind, got {which}: diff two results "
                        f"of the same command")
    return str(kinds[0])


def diff_results(results: Sequence[Any], names: Sequence[str] | None = None,
                 min_effect: float = MIN_EFFECT) -> DiffReport:
    """Join ``results`` (saved results of one kind: profile, loop, train, sweep, scaling or
    analyze) figure by figure: every result but the last together form the baseline, the last
    is the new one. ``names``: what to call each result (its file name); by default
    "result 1", "result 2", ...

    Raises UserError for fewer than two results, results of different kinds, or a kind diff
    does not read."""
    names = list(names) if names is not None else [f"result {i + 1}"
                                                   for i in range(len(results))]
    if len(names) != len(results):
        raise UserError(f"diff_results: {len(names)} names for {len(results)} results")
    kind = _check(results, names)
    bases, new = list(results[:-1]), results[-1]
    tbs, tn = [timed(r) for r in bases], timed(new)
    st = explain(bases[-1], new) if kind in ("profile", "analyze") else None
    e2e_base = _pool(tbs, ("end_to_end", "end_to_end"))
    e2e_spread = spread(e2e_base)
    rows: list[DiffRow] = []
    keys = list(tn.measures) + [k for t in tbs for k in t.measures if k not in tn.measures]
    keys = sorted(dict.fromkeys(keys), key=lambda k: LEVEL_ORDER.index(k[0]))
    keys, one_sided = _both_sides_timed(keys, tbs, tn)
    sides = {k: (_pool(tbs, k), tn.measures.get(k)) for k in keys}
    # the static side first: the whole model's facts, then each row's (profile, analyze)
    changes = _static_changes(bases, new, tbs, tn)
    every_row = bool(changes) and (st is None or settings_differ(changes))
    changed = set() if st is None else ({("layer", n) for n in st.rows}
                                        | {("type", t) for t in st.types})
    if every_row:  # no row can be taken for unchanged, comparable work
        changed = {k for k in keys if k[0] != "end_to_end"}
    work = {k: _work(k, st, work_direction(changes)) for k in keys}
    min_rows = MIN_LEVEL_ROWS if st is not None else MIN_BLIND_ROWS
    j = _judging(sides, changed, min_rows)
    cause = cause_words(changes, st is None) if every_row else ""
    # the end to end of a result without static figures per row: what changed in the whole
    # (profile, analyze: their totals' change, st.total)
    e2e_cause = what_changed(changes, True) if changes and st is None else ""
    for key in keys:
        rows.append(diff_row(key, *sides[key], e2e_spread, st, min_effect,
                         [t.measures[key].median for t in tbs if key in t.measures],
                         j.ps.get(key), j.adjusted.get(key),
                         None if key[0] == "end_to_end" else j.floor, j.row_shift.get(key),
                         j.moves.get(key[0]), (j.raw_ps.get(key), j.raw_adjusted.get(key)),
                         f"{group_of(key[1])}.*" if j.row_shift.get(key) is not None
                         and key[0] == "layer" and group_of(key[1]) in j.groups else None,
                         work[key], e2e_cause if key[0] == "end_to_end" else cause))
    if kind == "analyze" and st is not None:
        rows += static_rows(st)
    if kind in ("profile", "analyze"):
        mark_renamed(rows, [r.name for r in bases[-1].layers], [r.name for r in new.layers])
    end_to_end = rows.pop(0) if rows and rows[0].level == "end_to_end" else None
    if end_to_end is not None and st is not None:
        end_to_end.explanation = st.total
    unfair_lines = unfair(bases[-1], new, tbs[-1], tn)
    for base in bases[:-1]:
        unfair_lines += [u for u in unfair(base, new, timed(base), tn) if u not in unfair_lines]
    files = [DiffFile(n, kind, model_name(r), "base") for n, r in zip(names[:-1], bases)]
    files.append(DiffFile(names[-1], kind, model_name(new), "new"))
    notes = list(dict.fromkeys([*(n for t in tbs + [tn] for n in t.notes), *one_sided,
                                *noise_notes(results, names),
                                *different_models(bases[-1], new),
                                *group_notes(j.groups, j.shifts.get("layer"), min_effect)]))
    report = DiffReport(summary="", files=files, compared=kind, end_to_end=end_to_end,
                        rows=rows, unfair=unfair_lines, min_effect=min_effect, alpha=ALPHA,
                        notes=notes, environment=dict(getattr(new, "environment", {}) or {}),
                        static_changes=changes)
    report.summary = summary(report, st, expected_from_flops(
        changes, sides.get(("end_to_end", "end_to_end")), min_effect))
    return report


@dataclass
class _Judging:
    """What each row's verdict is read against: the levels' and groups' common shifts, each
    row's shift, its rank-test p-values (Holm-adjusted over the rows) beyond that shift and
    by its own change, the drift the unchanged rows share and their typical move."""
    shifts: dict[str, float]
    groups: dict[str, float]
    row_shift: dict[tuple[str, str], float | None]
    ps: dict[tuple[str, str], float | None]
    adjusted: dict[tuple[str, str], float]
    floor: float | None
    moves: dict[str, float]
    raw_ps: dict[tuple[str, str], float | None]
    raw_adjusted: dict[tuple[str, str], float]


def _judging(sides: dict[tuple[str, str], tuple[Measure | None, Measure | None]],
             changed: set[tuple[str, str]], min_rows: int) -> _Judging:
    shifts = common_shifts(sides, changed, min_rows)
    groups = group_shifts(sides, changed, min_rows)
    # each row judged on its change beyond its level's common shift, or its group's (a layer
    # under a top-level module with enough rows of its own): new's samples rescaled
    row_shift = {k: (groups[group_of(k[1])] if k[0] == "layer" and group_of(k[1]) in groups
                     else shifts.get(k[0])) for k in sides}
    judged = {k: (b, rescaled(n, row_shift[k]) if n is not None else None)
              for k, (b, n) in sides.items()}
    ps = {k: rank_p(b, n) for k, (b, n) in judged.items() if b is not None and n is not None}
    family = [k for k, p in ps.items() if p is not None and k[0] != "end_to_end"]
    adjusted = dict(zip(family, holm_adjusted([ps[k] or 1.0 for k in family])))
    # the drift the rows share: of the rows whose work did not change, as every shift
    tolerances = [t for k, (b, n) in judged.items()
                  if k[0] != "end_to_end" and k not in changed and b and n
                  for t in [drift_tolerance(b, n)] if t is not None]
    floor = statistics.median(tolerances) if tolerances else None
    moves = typical_moves(judged, changed, min_rows)
    # the same family on the rows' own changes (before the shift): a shift may clear a row
    # that moved with the whole run, never make one beyond the noise that is not by itself
    raw_ps = {k: rank_p(*sides[k]) if row_shift.get(k) else p for k, p in ps.items()}
    raw_adjusted = dict(zip(family, holm_adjusted([raw_ps[k] or 1.0 for k in family])))
    return _Judging(shifts, groups, row_shift, ps, adjusted, floor, moves, raw_ps, raw_adjusted)


def _static_changes(bases: list[Any], new: Any, tbs: list[Timed], tn: Timed
                    ) -> list[StaticChange]:
    """The whole model's static facts that differ: against the last baseline file, else the
    first other one that differs (any baseline that did other work makes every row's work
    unknown)."""
    found = [static_changes(b, new, t, tn) for b, t in zip(bases, tbs)]
    return next((c for c in reversed(found) if c), [])


def _work(key: tuple[str, str], st: Static | None, whole: int) -> int:
    """Whether a row does more work on the new side (1), less (-1) or the same or unknown (0):
    a layer or layer type by its own static figures (profile, analyze), any other row by the
    whole model's (a phase, the end to end; every row of a result without per-row figures)."""
    if st is not None and key[0] == "layer":
        return work_sign(st.diffs.get(key[1]))
    if st is not None and key[0] == "type":
        return work_sign(st.type_diffs.get(key[1]))
    return whole


LEVEL_WORDS = {"phase": "phases", "rank": "ranks", "type": "layer types", "layer": "layers",
               "cell": "sweep cells", "point": "scaling points"}


def _both_sides_timed(keys: list[tuple[str, str]], tbs: list[Timed], tn: Timed
                      ) -> tuple[list[tuple[str, str]], list[str]]:
    """Leave out a level that only one side timed at all (``run --layers`` against a run
    without it): its rows would all read "added" or "removed" when nothing was added or
    removed. Returns the keys kept and a note per level left out."""
    def levels(t: Timed) -> set[str]:
        return {level for level, _ in t.measures}

    base_levels = set().union(*(levels(t) for t in tbs))
    new_levels = levels(tn)
    gone = (base_levels ^ new_levels) - {"end_to_end"}
    notes = [f"{LEVEL_WORDS.get(level, level)} timed in the "
             f"{'base' if level in base_levels else 'new'} result only: not compared (time "
             f"both alike to compare them)" for level in sorted(gone, key=LEVEL_ORDER.index)]
    return [k for k in keys if k[0] not in gone], notes


def _pool(tbs: list[Timed], key: tuple[str, str]) -> Measure | None:
    found = [t.measures[key] for t in tbs if key in t.measures]
    return pooled(found) if found else None
