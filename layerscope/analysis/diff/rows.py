"""One row of a diff: its verdict beyond the common shift, and the explanation beside it (the
static change, the shift, the typical move, the drift); analyze's static rows; renamed layers."""
from __future__ import annotations

import math

from layerscope.analysis.diff.measures import Measure
from layerscope.analysis.diff.shifts import rescaled
from layerscope.analysis.diff.static import Static
from layerscope.analysis.diff.verdict import Verdict, change, judge
from layerscope.core.diff_records import DiffRow

# a row whose static side says its work grew (shrank) and whose time grew (shrank) more than
# this factor is not judged against the drift of its own runs' levels: a busy machine's runs
# wander by up to 2x in themselves, and past that the changed work is the explanation; a
# smaller move of such a row is still judged against its own drift, since its share of the
# model's new work is unknown (a data phase, a positional embedding)
WORK_MOVED = 2.0
SAME_WORK = "same shapes and work on both sides"


def diff_row(key: tuple[str, str], base: Measure | None, new: Measure | None,
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


def static_rows(st: Static) -> list[DiffRow]:
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
