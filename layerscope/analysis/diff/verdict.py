"""The verdict on one figure: slower, faster or within the noise, from the runs' own samples.

Rules (decisions, stated for users in docs/diff.md):
- both sides kept at least ``MIN_SAMPLES`` samples: the two-sided Mann-Whitney U rank test
  (core.stats.mann_whitney_u); basis "rank test". The end-to-end row is judged at level
  ``ALPHA`` on its own p-value. The other rows of one diff (phases, ranks, layer types, layers,
  cells, points) are one family: their p-values are Holm-Bonferroni adjusted together
  (core.stats.holm_adjusted) and a row needs its adjusted p under ``ALPHA``, so the chance
  that any of the ~60 rows of a profile is called beyond the noise when nothing changed stays
  under ``ALPHA`` (tested one by one at 0.05, three of 60 unchanged rows would be flagged by
  chance alone);
- otherwise, both sides have a p10-p90 range: beyond the noise when the ranges do not overlap
  (the rule ``ablate`` and ``TimingStats.overlaps`` use); basis "p10-p90 overlap";
- otherwise (a mean per step only, as older train results keep their phases): beyond the noise
  when |change| exceeds the end-to-end figure's relative p10-p90 half-width; basis "end-to-end
  spread";
- the drift between runs: the rank test treats each side's samples as independent draws
  around one level, but the samples of one run come from one process, one after another: it
  sees the noise within a run, not how far two processes' levels lie apart (the CPU's clock,
  another program starting, the load changing). Each side's samples, in run order, are split
  into ``DRIFT_BLOCKS`` blocks; the standard deviation d of the logarithms of the block
  medians (core.stats.block_drift) measures how much that run's level wanders. A run's level
  is taken to be one more draw of that wander, so the log ratio of two runs' levels has a
  standard deviation estimated by sqrt(d_base^2 + d_new^2), an estimate with
  2 (DRIFT_BLOCKS - 1) degrees of freedom; as in a two-sample t test a change is beyond the
  drift only when

      |ln(new median / base median)| > t(1 - ALPHA / 2; 2 (DRIFT_BLOCKS - 1))
                                       * sqrt(d_base^2 + d_new^2)

  (t: Student's t quantile, 2.447 with 4 blocks at ALPHA 0.05). A layer's, type's or phase's
  time shares its run's level, so a row's tolerance is at least the median of the tolerances
  of the rows but the end-to-end one whose work did not change (a whole process a few percent
  slower is a few percent slower in most layers, and their blocks show it; the caller,
  join.diff_results, passes it as ``drift_floor``). A row whose static side says its work
  changed the way its time moved, by more than join.WORK_MOVED, is judged against that floor
  only, not its own blocks (``own_drift=False``): a busy machine's runs wander by up to 2x in
  themselves, and past that the changed work is the explanation. The median, not the end-to-end
  row's own tolerance: a preempted run (another program taking the core for a time slice) adds
  its milliseconds to one layer and to the end-to-end figure, whose blocks then wander by as
  much as 2x on a busy machine while no layer's level moved. Figures without samples in run
  order (or fewer than two a block) have no drift estimate of their own;
- the whole run's shift (applied by the caller, join.common_shifts): a layer, layer type or
  phase is judged on its change beyond the median change of its level's rows whose work did
  not change, the new side's samples divided by that factor before this verdict; the
  end-to-end row never is. The shift only clears: a row must also be beyond the noise by its
  own change, judged the same way without the shift, and in the same direction. A layer
  under a top-level module with enough unchanged layers of its own (a ResNet stage) is judged
  beyond that group's shift instead (join.group_shifts), with a note that the group moved;
- the rows' typical move (measured by the caller, join.typical_moves): besides the whole run's
  shift, each row moves between two processes by an amount of its own -- a layer of a few
  microseconds that is mostly Python calls by 20-40%, a convolution by a few percent -- and
  each is steady within its own run. The median over the level's rows whose work did not
  change of |new median - base median| (after the shift), times 1.4826 (a standard deviation
  for normal noise), is how far such a row typically moves; a row is beyond the noise only
  when its change exceeds ``MOVE_T`` times that: it must stand out from how the unchanged rows
  moved;
- with several baseline files, the new median must also lie outside the range of the baseline
  files' own medians (the drift between runs, measured directly), and the pooled baseline's
  samples, file after file, give its blocks (the files' levels apart show in them);
- and in every case a change under ``MIN_EFFECT`` of the base median is within the noise: on
  thousands of samples the test finds a 0.5% difference "significant", which nobody would call
  slower.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from layerscope.analysis.diff.measures import Measure
from layerscope.core.stats import DRIFT_BLOCKS, block_drift, mann_whitney_u, t_quantile

MIN_SAMPLES = 5  # per side, for the rank test (5 against 5: the smallest two-sided p is 0.008)
ALPHA = 0.05
MIN_EFFECT = 0.03  # |new / base - 1| below this is never called slower or faster
# a row beyond the rows' typical move (join.typical_moves, a standard deviation) by more than
# this many of them: Student's t for a two-sided ALPHA with 2 (DRIFT_BLOCKS - 1) degrees of
# freedom, the factor the drift rule uses
MOVE_T = t_quantile(1 - ALPHA / 2, 2 * (DRIFT_BLOCKS - 1))


@dataclass(frozen=True)
class Verdict:
    verdict: str  # slower | faster | within-noise
    basis: str | None
    p_value: float | None = None
    within_move: bool = False  # beyond the test and the drift, not beyond the rows' typical move
    # beyond the test, not beyond the drift: the |ln(new / base)| the drift explains
    within_drift: float | None = None


def change(base: float, new: float) -> float | None:
    return new / base - 1 if base > 0 else None


def rank_p(base: Measure, new: Measure) -> float | None:
    """The rank test's two-sided p-value, when both sides kept ``MIN_SAMPLES`` samples."""
    if len(base.samples or ()) >= MIN_SAMPLES and len(new.samples or ()) >= MIN_SAMPLES:
        return mann_whitney_u(base.samples or [], new.samples or [])[1]
    return None


def drift_tolerance(base: Measure, new: Measure, alpha: float = ALPHA) -> float | None:
    """The largest |ln(new / base)| the wander of the two runs' levels explains (the module's
    rule), None when a side has no drift estimate."""
    d_base, d_new = block_drift(base.samples or []), block_drift(new.samples or [])
    if d_base is None or d_new is None:
        return None
    return t_quantile(1 - alpha / 2, 2 * (DRIFT_BLOCKS - 1)) * math.hypot(d_base, d_new)


def judge(base: Measure, new: Measure, e2e_spread: float | None,
          min_effect: float = MIN_EFFECT, alpha: float = ALPHA,
          base_medians: Sequence[float] = (), p: float | None = None,
          p_adjusted: float | None = None, drift_floor: float | None = None,
          typical_move: float | None = None, own_drift: bool = True) -> Verdict:
    """The verdict on ``new`` against ``base`` (see the module's rules); ``base_medians``: each
    baseline file's own median, when there are several; ``p``: the rank test's p-value when
    already computed (``rank_p``); ``p_adjusted``: the row's Holm-Bonferroni adjusted p-value
    in its family (compared with ``alpha`` instead of ``p``); ``drift_floor``: the least this
    row's drift tolerance may be (the median of the rows' tolerances); ``typical_move``: how
    far, in seconds, the rows whose work did not change typically moved (a standard deviation,
    join.typical_moves): a change of no more than t x that is within the noise;
    ``own_drift=False``: the row's own blocks are not read for its drift, only
    ``drift_floor`` (a row whose work changed the way its time moved, see the module's
    rules)."""
    c = change(base.median, new.median)
    if p is None:
        p = rank_p(base, new)
    if p is not None:
        basis, beyond = "rank test", (p if p_adjusted is None else p_adjusted) < alpha
    elif None not in (base.p10, base.p90, new.p10, new.p90):
        basis = "p10-p90 overlap"
        beyond = new.p10 > base.p90 or new.p90 < base.p10  # type: ignore[operator]
    elif e2e_spread is not None and c is not None:
        basis, beyond = "end-to-end spread", abs(c) > e2e_spread
    else:
        basis, beyond = None, False
    if len(base_medians) > 1 and min(base_medians) <= new.median <= max(base_medians):
        beyond = False  # within the drift between the baseline runs
    own = drift_tolerance(base, new, alpha) if own_drift else None
    tolerance = max((t for t in (own, drift_floor) if t is not None), default=None)
    if beyond and tolerance is not None and base.median > 0 and new.median > 0 \
            and abs(math.log(new.median / base.median)) <= tolerance:
        # within the drift of the runs' levels
        return Verdict("within-noise", basis, p, within_drift=tolerance)
    if beyond and c is not None and abs(c) >= min_effect and typical_move is not None \
            and abs(new.median - base.median) <= MOVE_T * typical_move:
        return Verdict("within-noise", basis, p, within_move=True)
    if not beyond or c is None or abs(c) < min_effect:
        return Verdict("within-noise", basis, p)
    return Verdict("slower" if c > 0 else "faster", basis, p)
