"""The diff's summary sentence: the static change first, then the end-to-end verdict read
against the FLOPs ratio, and the group of rows that explains most of it."""
from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence

from layerscope.analysis.diff.facts import clause, flops_ratio, short, times, work_direction
from layerscope.analysis.diff.measures import UNIT, Measure
from layerscope.analysis.diff.rows import SAME_WORK
from layerscope.analysis.diff.static import Static
from layerscope.analysis.diff.verdict import MIN_EFFECT, drift_tolerance
from layerscope.core.diff_records import DiffReport, DiffRow, StaticChange

# the rows the end-to-end change is attributed to, per kind
ATTRIBUTE_TO = {"profile": "layer", "loop": "layer", "train": "phase"}


def cause_words(changes: list[StaticChange], blind: bool) -> str:
    """What every row of a diff whose whole model or settings differ says: the difference, and
    that no shift taken across rows (none is known to do unchanged, comparable work) moved
    its verdict."""
    return f"{what_changed(changes, blind)}: no shift across rows"


def what_changed(changes: list[StaticChange], blind: bool) -> str:
    what = "the model changed" if blind and any(c.work for c in changes) else "the run changed"
    return f"{what} ({short(changes)})"


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
        if report.static_changes and own.startswith(cause_words(report.static_changes, st is None)):
            own = own[len(cause_words(report.static_changes, st is None)):].removeprefix("; ")
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
