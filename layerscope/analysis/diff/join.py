"""``diff_results``: results of one kind joined figure by figure, each with its verdict, the
static explanation beside it, the unfair differences and the summary sentence."""
from __future__ import annotations

import math
import os
import re
import statistics
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from typing import Any

from layerscope.analysis.diff.facts import (
    clause,
    flops_ratio,
    settings_differ,
    short,
    static_changes,
    times,
    work_direction,
)
from layerscope.analysis.diff.measures import (
    KINDS,
    UNIT,
    Measure,
    Timed,
    pooled,
    spread,
    timed,
)
from layerscope.analysis.diff.static import Static, explain, work_sign
from layerscope.analysis.diff.unfair import unfair
from layerscope.analysis.diff.verdict import (
    ALPHA,
    MIN_EFFECT,
    Verdict,
    change,
    drift_tolerance,
    judge,
    rank_p,
)
from layerscope.core.diff_records import DiffFile, DiffReport, DiffRow, StaticChange
from layerscope.core.errors import UserError
from layerscope.core.results import read_result
from layerscope.core.stats import holm_adjusted

LEVEL_ORDER = ("end_to_end", "phase", "rank", "type", "layer", "cell", "point")
# the rows the end-to-end change is attributed to, per kind
# levels whose rows share their process's level: judged beyond their common shift
SHARED_LEVELS = ("layer", "type", "phase")
# unchanged rows a level needs for their median change to be the common shift, and for their
# typical move to be measured (fewer: a few rows that changed would move the median)
MIN_LEVEL_ROWS = 5
# the same where the diff cannot tell which rows' work changed (train, run and loop results
# have no static side): with 5 phases of which 3 grew, their median would be taken for the
# whole run's shift and hide the growth
MIN_BLIND_ROWS = 8
MAD_SIGMA = 1.4826  # median absolute deviation x this = standard deviation, for normal noise
# a row whose static side says its work grew (shrank) and whose time grew (shrank) more than
# this factor is not judged against the drift of its own runs' levels: a busy machine's runs
# wander by up to 2x in themselves, and past that the changed work is the explanation; a
# smaller move of such a row is still judged against its own drift, since its share of the
# model's new work is unknown (a data phase, a positional embedding)
WORK_MOVED = 2.0
ATTRIBUTE_TO = {"profile": "layer", "loop": "layer", "train": "phase"}
SAME_WORK = "same shapes and work on both sides"


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
    cause = _cause(changes, st is None) if every_row else ""
    # the end to end of a result without static figures per row: what changed in the whole
    # (profile, analyze: their totals' change, st.total)
    e2e_cause = _what_changed(changes, True) if changes and st is None else ""
    for key in keys:
        rows.append(_row(key, *sides[key], e2e_spread, st, min_effect,
                         [t.measures[key].median for t in tbs if key in t.measures],
                         ps.get(key), adjusted.get(key),
                         None if key[0] == "end_to_end" else floor, row_shift.get(key),
                         moves.get(key[0]), (raw_ps.get(key), raw_adjusted.get(key)),
                         f"{group_of(key[1])}.*" if row_shift.get(key) is not None
                         and key[0] == "layer" and group_of(key[1]) in groups else None,
                         work[key], e2e_cause if key[0] == "end_to_end" else cause))
    if kind == "analyze" and st is not None:
        rows += _static_rows(st)
    if kind in ("profile", "analyze"):
        mark_renamed(rows, [r.name for r in bases[-1].layers], [r.name for r in new.layers])
    end_to_end = rows.pop(0) if rows and rows[0].level == "end_to_end" else None
    if end_to_end is not None and st is not None:
        end_to_end.explanation = st.total
    unfair_lines = unfair(bases[-1], new, tbs[-1], tn)
    for base in bases[:-1]:
        unfair_lines += [u for u in unfair(base, new, timed(base), tn) if u not in unfair_lines]
    files = [DiffFile(n, kind, _model(r), "base") for n, r in zip(names[:-1], bases)]
    files.append(DiffFile(names[-1], kind, _model(new), "new"))
    notes = list(dict.fromkeys([*(n for t in tbs + [tn] for n in t.notes), *one_sided,
                                *noise_notes(results, names),
                                *different_models(bases[-1], new),
                                *group_notes(groups, shifts.get("layer"), min_effect)]))
    report = DiffReport(summary="", files=files, compared=kind, end_to_end=end_to_end,
                        rows=rows, unfair=unfair_lines, min_effect=min_effect, alpha=ALPHA,
                        notes=notes, environment=dict(getattr(new, "environment", {}) or {}),
                        static_changes=changes)
    report.summary = summary(report, st, expected_from_flops(
        changes, sides.get(("end_to_end", "end_to_end")), min_effect))
    return report


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


def _cause(changes: list[StaticChange], blind: bool) -> str:
    """What every row of a diff whose whole model or settings differ says: the difference, and
    that no shift taken across rows (none is known to do unchanged, comparable work) moved
    its verdict."""
    return f"{_what_changed(changes, blind)}: no shift across rows"


def _what_changed(changes: list[StaticChange], blind: bool) -> str:
    what = "the model changed" if blind and any(c.work for c in changes) else "the run changed"
    return f"{what} ({short(changes)})"


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


def noise_notes(results: Sequence[Any], names: Sequence[str]) -> list[str]:
    """Each result's own first noise warning (its ``noise`` section: a noisy or oversubscribed
    machine, runs far apart), named by its file: a verdict of "within the noise" on a change of
    +500% says why only with it."""
    out = []
    for name, r in zip(names, results):
        warnings = (getattr(r, "noise", None) or {}).get("warnings")  # a dict or a Noise
        if warnings:
            out.append(f"{name}: {warnings[0]}")
    return out


def different_models(base: Any, new: Any) -> list[str]:
    """A note when the two results are of different models that share few layer paths (under
    a quarter): their rows compare nothing alike. Two versions of one model (a wider layer, a
    script renamed) share most paths and get none."""
    def names(r: Any) -> set[str]:  # a report's LayerRows, a run's layer dicts
        return {x["name"] if isinstance(x, dict) else x.name
                for x in getattr(r, "layers", None) or []}

    a, b = _model(base), _model(new)
    names_a, names_b = names(base), names(new)
    union = names_a | names_b
    if a == b or not union or 4 * len(names_a & names_b) >= len(union):
        return []
    return [f"different models: {a} against {b} share {len(names_a & names_b)} of "
            f"{len(union)} layer paths, so the rows compare little alike (diff runs of one "
            f"model)"]


def _model(r: Any) -> str | None:
    return getattr(r, "model", None) or getattr(r, "recipe", None)


def _pool(tbs: list[Timed], key: tuple[str, str]) -> Measure | None:
    found = [t.measures[key] for t in tbs if key in t.measures]
    return pooled(found) if found else None


def common_shifts(sides: dict[tuple[str, str], tuple[Measure | None, Measure | None]],
                  changed: Collection[tuple[str, str]] = (),
                  min_rows: int = MIN_LEVEL_ROWS) -> dict[str, float]:
    """Per level whose rows share their process's level (layers, layer types, phases), with at
    least ``min_rows`` rows timed on both sides whose work did not change: the median over
    those rows of ln(new median / base median), the shift of the whole run. A second process is
    often a few percent (on a busy machine, up to 20%) faster or slower in every layer at once
    (the CPU's clock, the load), while each run is steady in itself, so neither the rank test
    nor the blocks of one run see it. ``changed``: the (level, name) keys whose shapes or work
    differ (the static side of the diff); they are left out, because when one input doubles,
    the layers after it may all have more work, and their median would be taken for a shift
    of the whole run and cancel the change it should show. Each row is then judged on its
    change beyond that shift, and the end-to-end row (never shifted) carries the whole run's
    change."""
    return _types_take_the_layers(*_medians_of_unchanged(sides, changed, min_rows, _level,
                                                         _log_ratio))


def group_of(name: str) -> str:
    """A layer's group: the top-level module it is under (``layer1`` for ``layer1.2.conv1``,
    a ResNet stage); "" for a top-level layer."""
    return name.split(".")[0] if "." in name else ""


def group_shifts(sides: dict[tuple[str, str], tuple[Measure | None, Measure | None]],
                 changed: Collection[tuple[str, str]] = (),
                 min_rows: int = MIN_LEVEL_ROWS) -> dict[str, float]:
    """Per group of layers (``group_of``) with at least ``min_rows`` rows timed on both sides
    whose work did not change: the median of their ln(new / base). Under another program's
    load one stage of a network can run 15-25% slower in one process than in the next while
    the others stay (a ResNet's first stage, the largest activations, sharing a cache), each
    steady within its run: its layers are judged beyond their group's shift, and a note says
    the group moved (``group_notes``), so a change of that stage is still reported, as one."""
    return _medians_of_unchanged(sides, changed, min_rows,
                                 lambda level, name: group_of(name) if level == "layer" else "",
                                 _log_ratio)[0]


def group_notes(groups: dict[str, float], level_shift: float | None,
                min_effect: float) -> list[str]:
    """A note for each group that moved together by at least ``min_effect`` more than every
    layer did."""
    base = level_shift or 0.0
    return [f"{g}.* moved together by {math.exp(x) - 1:+.1%} (the median of its layers whose "
            f"work did not change), every layer by {math.exp(base) - 1:+.1%}: its layers are "
            f"judged beyond the group's move (a change of that stage, or one process's cache "
            f"under another program's load)"
            for g, x in groups.items() if abs(math.exp(x - base) - 1) >= min_effect]


def _types_take_the_layers(out: dict[str, float], rows: dict[str, list[float]]
                           ) -> dict[str, float]:
    """A layer type sums layers, so it shares their shift and moves at least as far as one of
    them: types too few to give a figure of their own (a small model's) take the layers'."""
    if "layer" in out and "type" not in out and rows.get("type"):
        out["type"] = out["layer"]
    return out


def typical_moves(judged: dict[tuple[str, str], tuple[Measure | None, Measure | None]],
                  changed: Collection[tuple[str, str]] = (),
                  min_rows: int = MIN_LEVEL_ROWS) -> dict[str, float]:
    """Per level whose rows share their process's state (layers, layer types, phases): how far,
    in seconds, a row whose work did not change typically moves between the two results beyond
    the level's common shift (``judged``: the new sides already rescaled by it), as a standard
    deviation: ``MAD_SIGMA`` x the median over those rows of |new median - base median|, with
    at least ``min_rows`` of them. A shared machine is slower or faster for seconds at a
    time, and not by the same factor in every layer: a layer of a few microseconds that is
    mostly Python calls moves by 20-40% from one process to the next while a convolution
    moves by a few percent, each steady within its own run, so neither the rank test nor the
    blocks of one run see it."""
    medians, deltas = _medians_of_unchanged(judged, changed, min_rows, _level,
                                            lambda b, n: abs(n.median - b.median))
    return _types_take_the_layers({k: MAD_SIGMA * x for k, x in medians.items()}, deltas)


def _level(level: str, name: str) -> str:
    """The key of a row whose level shares its process's state (``SHARED_LEVELS``), else ""."""
    return level if level in SHARED_LEVELS else ""


def _log_ratio(b: Measure, n: Measure) -> float | None:
    return math.log(n.median / b.median) if b.median > 0 and n.median > 0 else None


def _medians_of_unchanged(sides: dict[tuple[str, str], tuple[Measure | None, Measure | None]],
                          changed: Collection[tuple[str, str]], min_rows: int,
                          key: Callable[[str, str], str],
                          figure: Callable[[Measure, Measure], float | None]
                          ) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Per ``key(level, name)`` ("" leaves a row out): the median of ``figure(base, new)``
    (None leaves it out) over the rows timed on both sides whose work did not change, where
    at least ``min_rows`` of them have one; and every key's figures."""
    found: dict[str, list[float]] = defaultdict(list)
    for (level, name), (b, n) in sides.items():
        k = key(level, name)
        if k and b is not None and n is not None and (level, name) not in changed:
            x = figure(b, n)
            if x is not None:
                found[k].append(x)
    return {k: statistics.median(xs) for k, xs in found.items() if len(xs) >= min_rows}, found


def rescaled(m: Measure, shift: float | None) -> Measure:
    """``m`` with its median, range and samples divided by exp(shift) (unchanged for none)."""
    if not shift:
        return m
    f = math.exp(-shift)
    return Measure(m.name, m.level, m.median * f, None if m.p10 is None else m.p10 * f,
                   None if m.p90 is None else m.p90 * f,
                   None if m.samples is None else [x * f for x in m.samples], m.type, m.n)


def _row(key: tuple[str, str], base: Measure | None, new: Measure | None,
         e2e_spread: float | None, st: Static | None, min_effect: float,
         base_medians: list[float], p: float | None = None,
         p_adjusted: float | None = None, drift_floor: float | None = None,
         shift: float | None = None, move: float | None = None,
         raw_p: tuple[float | None, float | None] = (None, None),
         group: str | None = None, work: int = 0, cause: str = "") -> DiffRow:
    level, name = key
    if base is None or new is None:
        one = new or base
        assert one is not None
        added = base is None
        return DiffRow(name=name, level=level, base_s=None if added else one.median,
                       new_s=one.median if added else None, change=None,
                       verdict="added" if added else "removed",
                       explanation="only in the new result" if added
                       else "only in the base result", basis=None, type=one.type)
    c = change(base.median, new.median) or 0.0
    # a row whose work changed the way its time moved, by more than WORK_MOVED: the work
    # explains that, not the wander of its own runs' levels (the floor, from the rows whose
    # work did not change, still applies)
    own_drift = not (work and c and (c > 0) == (work > 0)
                     and abs(math.log1p(c)) > math.log(WORK_MOVED))
    v = judge(base, rescaled(new, shift), e2e_spread, min_effect,
              base_medians=base_medians, p=p, p_adjusted=p_adjusted, drift_floor=drift_floor,
              typical_move=move, own_drift=own_drift)
    if shift and v.verdict in ("slower", "faster") and judge(
            base, new, e2e_spread, min_effect, base_medians=base_medians, p=raw_p[0],
            p_adjusted=raw_p[1], drift_floor=drift_floor, own_drift=own_drift
    ).verdict != v.verdict:
        # beyond the whole run's shift but not by its own change (a row that stayed while the
        # run got 10% faster, or got 20% slower while the run got 50% slower): it did not
        # move the way the verdict would say
        v = Verdict("within-noise", v.basis, v.p_value)
    wander = None  # the row's own drift, not read for it: how far its runs' levels wandered
    if not own_drift and v.verdict in ("slower", "faster"):
        wander = judge(base, rescaled(new, shift), e2e_spread, min_effect,
                       base_medians=base_medians, p=p, p_adjusted=p_adjusted,
                       drift_floor=drift_floor, typical_move=move).within_drift
    explanation = ""
    static = None
    if st is not None and level == "layer":
        explanation = st.rows.get(name, "")
        static = st.diffs.get(name) or None
        if not explanation and v.verdict in ("slower", "faster"):
            explanation = SAME_WORK
    elif st is not None and level == "type":
        explanation = st.types.get(name, "")
    moved = math.exp(shift or 0.0) - 1
    who = f"{group} moved by" if group else f"every {level} moved by"
    if abs(moved) >= min_effect and v.verdict != "within-noise":
        explanation = "; ".join(x for x in (explanation, f"beyond the {moved:+.1%} {who} "
                                            f"(the rows' median)") if x)
    elif abs(moved) >= min_effect and abs(change(base.median, new.median) or 0) >= min_effect:
        as_ = "as its group" if group else "as the whole run"
        explanation = "; ".join(x for x in (explanation, f"{as_}: {who} {moved:+.1%} (the "
                                            f"rows' median)") if x)
    if v.within_move:
        explanation = "; ".join(x for x in (explanation, f"moved no further than the {level}s "
                                            f"whose work did not change (typically "
                                            f"±{(move or 0.0) * 1e3:.3f} ms)") if x)
    if v.within_drift is not None and abs(c) >= min_effect:
        explanation = "; ".join(x for x in (explanation, f"within the drift of the runs' "
                                            f"levels ({_wander(v.within_drift)})") if x)
    if wander is not None:
        explanation = "; ".join(x for x in (explanation, f"its own runs' levels wandered "
                                            f"{_wander(wander)}: its work changed, so that is "
                                            f"not taken for noise, but the size of the change "
                                            f"is uncertain") if x)
    if cause:
        explanation = "; ".join(x for x in (cause, explanation) if x)
    return DiffRow(name=name, level=level, base_s=base.median, new_s=new.median,
                   change=change(base.median, new.median), verdict=v.verdict,
                   explanation=explanation, basis=v.basis, p_value=v.p_value,
                   type=new.type or base.type, base_n=len(base.samples or []) or base.n,
                   new_n=len(new.samples or []) or new.n, static=static)


def _wander(tolerance: float) -> str:
    """A drift tolerance (a |log ratio|) as the factor it allows: "×1.35"."""
    return f"up to ×{math.exp(tolerance):.3g}"


def _static_rows(st: Static) -> list[DiffRow]:
    """analyze: one row per layer whose static figures changed, added or removed."""
    rows = [DiffRow(name=n, level="layer", base_s=None, new_s=None, change=None,
                    verdict="changed", explanation=text, basis="static",
                    static=st.diffs.get(n) or None) for n, text in st.rows.items()]
    rows += [DiffRow(name=n, level="layer", base_s=None, new_s=None, change=None,
                     verdict="added", explanation="only in the new result", basis="static",
                     type=t) for n, t in st.only_new]
    rows += [DiffRow(name=n, level="layer", base_s=None, new_s=None, change=None,
                     verdict="removed", explanation="only in the base result", basis="static",
                     type=t) for n, t in st.only_base]
    return rows


def mark_renamed(rows: list[DiffRow], base_names: list[str], new_names: list[str]) -> None:
    """A layer added at the position (in execution order) of a removed layer of the same type
    was probably renamed: both rows say so (their verdicts stay added and removed)."""
    added = {r.name: r for r in rows if r.level == "layer" and r.verdict == "added"}
    removed = {r.name: r for r in rows if r.level == "layer" and r.verdict == "removed"}
    for j, name in enumerate(new_names):
        old = base_names[j] if j < len(base_names) else None
        if name in added and old in removed and added[name].type == removed[old].type:
            same = f"(same position and type: {added[name].type})"
            added[name].explanation = f"only in the new result; renamed from {old}? {same}"
            removed[old].explanation = f"only in the base result; renamed to {name}? {same}"


# ---------------------------------------------------------------------------------- summary
def pattern(name: str) -> str:
    """A module path with its indices as ``*``: layer3.0.conv2 -> layer3.*.conv2. The last part
    stays: it names the layer (an nn.Sequential's children are 0, 1, 2: "3" is one layer, not
    every layer, and features.3 is not features.*)."""
    parts = name.split(".")
    return ".".join(["*" if re.fullmatch(r"\d+", p) else p for p in parts[:-1]] + parts[-1:])


def pct(x: float) -> str:
    """|x| as a percentage: 12%, 4.5%."""
    v = abs(x) * 100
    return f"{v:.0f}%" if v >= 10 else f"{v:.1f}%"


def points_text(points: float) -> str:
    """Percentage points as ``pct`` writes the percentage: 12, 4.5."""
    return f"{points:.0f}" if points >= 10 else f"{points:.1f}"


def _attribution(report: DiffReport, st: Static | None) -> str:
    """"9 of the 12 points from layer3.*.conv2, whose input grew ...": the group of rows (one
    module path pattern) whose own change explains most of the end-to-end change."""
    e2e = report.end_to_end
    level = ATTRIBUTE_TO.get(report.compared)
    if e2e is None or e2e.base_s is None or e2e.new_s is None or level is None \
            or not e2e.beyond_noise or not e2e.base_s:
        return ""
    groups: dict[str, list[DiffRow]] = defaultdict(list)
    for r in report.rows:
        if r.level == level and r.verdict == e2e.verdict and r.base_s is not None \
                and r.new_s is not None:
            groups[pattern(r.name) if level == "layer" else r.name].append(r)
    if not groups:
        return "; no single row beyond the noise explains it"

    def points(rows: list[DiffRow]) -> float:
        return sum((r.new_s or 0) - (r.base_s or 0) for r in rows) / (e2e.base_s or 1) * 100

    best = max(groups, key=lambda g: abs(points(groups[g])))
    got = abs(points(groups[best]))
    total = abs((e2e.change or 0) * 100)
    rows = sum(len(g) for g in groups.values())
    if got < total / 2 and rows > len(groups[best]):
        return (f"; spread over {rows} {level}s {e2e.verdict} beyond noise, the most "
                f"{points_text(got)} of the {points_text(total)} points from {best}")
    text = f"; {points_text(got)} of the {points_text(total)} points from {best}"
    first = groups[best][0]
    said = {c.text for c in report.static_changes}  # the summary's first clause says them
    if st is not None and first.name in st.grew:
        if st.grew[first.name].replace("its input", "the input", 1) not in said:
            text += ", " + st.grew[first.name].replace("its input", "whose input", 1)
    else:  # its own explanation, less what every row says (the summary begins with it)
        own = first.explanation
        if report.static_changes and own.startswith(_cause(report.static_changes, st is None)):
            own = own[len(_cause(report.static_changes, st is None)):].removeprefix("; ")
        if own and own != SAME_WORK:
            text += f" ({own})"
    return text


def summary(report: DiffReport, st: Static | None, against_flops: str = "") -> str:
    """The answer first, in one sentence: what differs in the static side (the whole model's
    FLOPs, parameters, inputs, batch, dtype, compilation, threads), then the timing read
    against it. ``against_flops``: what the end-to-end change is beside the FLOPs ratio
    (``expected_from_flops``)."""
    e2e = report.end_to_end
    changes = report.static_changes
    if report.compared == "analyze":
        changed = [r for r in report.rows if r.verdict != "same"]
        what = st.total if st is not None and st.total else "no change in the totals"
        text = (f"static only (no timing): {what}; {len(changed)} layer(s) changed, added or "
                f"removed")
    elif e2e is not None:
        unit = UNIT.get(report.compared, "run")
        work = work_direction(changes)
        if e2e.verdict in ("slower", "faster"):
            text = f"{unit} {pct(e2e.change or 0)} {e2e.verdict} beyond noise"
            if against_flops:
                text += f", {against_flops}"
            text += _attribution(report, st)
            if work and (e2e.verdict == "slower") != (work > 0):
                text = "yet " + text  # less work and slower, or more and faster
        elif e2e.change is not None:
            text = f"{unit} within noise ({e2e.change:+.1%})"
        else:
            text = f"{unit} {e2e.verdict}"
        if e2e.verdict == "within-noise":
            beyond = [r for r in report.rows if r.beyond_noise]
            if beyond:
                text += f"; {len(beyond)} row(s) beyond noise, e.g. {_row_text(beyond)}"
    else:
        text = _counts(report)
    if changes and report.compared != "analyze":  # analyze: its static change is the answer
        text = f"{clause(changes)}{',' if text.startswith('yet ') else ':'} {text}"
    if report.unfair:
        text += " (unfair: " + ", ".join(u.split(":")[0] for u in report.unfair) + ")"
    return text


def expected_from_flops(changes: Sequence[StaticChange],
                        sides: tuple[Measure | None, Measure | None] | None,
                        min_effect: float = MIN_EFFECT) -> str:
    """The end-to-end change beside the model's FLOPs ratio, when both moved the same way:
    "expected from that alone" when the time moved no further than the FLOPs (a step whose
    FLOPs grew 3.5x, 94% slower; the minimum effect's 3% further), "more than that alone
    explains (...)" when it moved further by more than the runs' drift too, "within the runs'
    drift of what that alone explains (...)" in between; "" without a FLOPs ratio or an
    end-to-end figure on both sides, or when they moved apart."""
    ratio = flops_ratio(changes)
    base, new = sides if sides is not None else (None, None)
    if not ratio or base is None or new is None or base.median <= 0 or new.median <= 0:
        return ""
    t = new.median / base.median
    if (t > 1) != (ratio > 1) or t == 1:
        return ""
    excess = abs(math.log(t)) - abs(math.log(ratio))
    figures = f"{times(t)} the time for {times(ratio)} the FLOPs"
    if excess <= math.log1p(min_effect):
        return "expected from that alone"
    if excess <= (drift_tolerance(base, new) or 0.0):
        return f"within the runs' drift of what that alone explains ({figures})"
    return f"more than that alone explains ({figures})"


def _row_text(rows: list[DiffRow]) -> str:
    top = max(rows, key=lambda r: abs(r.change or 0))
    return f"{top.name} {top.change or 0:+.0%}"


def _counts(report: DiffReport) -> str:
    """Kinds without an end-to-end figure (sweep, scaling): how many rows moved."""
    level = report.rows[0].level if report.rows else "row"
    slower = [r for r in report.rows if r.verdict == "slower"]
    faster = [r for r in report.rows if r.verdict == "faster"]
    text = (f"{len(slower)} of {len(report.rows)} {level}s slower beyond noise, "
            f"{len(faster)} faster")
    moved = slower + faster
    return text + (f"; the most: {_row_text(moved)}" if moved else "")
