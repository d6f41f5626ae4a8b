"""The whole run's shift: per level (layers, layer types, phases) and per group of layers, the
median change of the rows whose work did not change, and how far such a row typically moves;
each row is judged beyond them."""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Collection

from layerscope.analysis.diff.measures import Measure

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
