"""The verdict on one figure: slower, faster or within the noise, from the runs' own samples.

Rules (decisions, stated for users in docs/diff.md):
- both sides kept at least ``MIN_SAMPLES`` samples: the two-sided Mann-Whitney U rank test
  (core.stats.mann_whitney_u) at level ``ALPHA``; basis "rank test";
- otherwise, both sides have a p10-p90 range: beyond the noise when the ranges do not overlap
  (the rule ``ablate`` and ``TimingStats.overlaps`` use); basis "p10-p90 overlap";
- otherwise (a mean per step only, as older train results keep their phases): beyond the noise
  when |change| exceeds the end-to-end figure's relative p10-p90 half-width; basis "end-to-end
  spread";
- and in every case a change under ``MIN_EFFECT`` of the base median is within the noise: on
  thousands of samples the test finds a 0.5% difference "significant", which nobody would call
  slower;
- with several baseline files, the new median must also lie outside the range of the baseline
  files' own medians: the samples of one run hold its run-to-run noise, not the drift between
  runs (another program starting, the CPU's clock), and several baseline runs show that drift.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from layerscope.analysis.diff.measures import Measure
from layerscope.core.stats import mann_whitney_u

MIN_SAMPLES = 5  # per side, for the rank test (5 against 5: the smallest two-sided p is 0.008)
ALPHA = 0.05
MIN_EFFECT = 0.03  # |new / base - 1| below this is never called slower or faster


@dataclass(frozen=True)
class Verdict:
    verdict: str  # slower | faster | within-noise
    basis: str | None
    p_value: float | None = None


def change(base: float, new: float) -> float | None:
    return new / base - 1 if base > 0 else None


def judge(base: Measure, new: Measure, e2e_spread: float | None,
          min_effect: float = MIN_EFFECT, alpha: float = ALPHA,
          base_medians: Sequence[float] = ()) -> Verdict:
    """The verdict on ``new`` against ``base`` (see the module's rules); ``base_medians``: each
    baseline file's own median, when there are several."""
    c = change(base.median, new.median)
    p = None
    if len(base.samples or ()) >= MIN_SAMPLES and len(new.samples or ()) >= MIN_SAMPLES:
        _, p = mann_whitney_u(base.samples or [], new.samples or [])
        basis, beyond = "rank test", p < alpha
    elif None not in (base.p10, base.p90, new.p10, new.p90):
        basis = "p10-p90 overlap"
        beyond = new.p10 > base.p90 or new.p90 < base.p10  # type: ignore[operator]
    elif e2e_spread is not None and c is not None:
        basis, beyond = "end-to-end spread", abs(c) > e2e_spread
    else:
        basis, beyond = None, False
    if len(base_medians) > 1 and min(base_medians) <= new.median <= max(base_medians):
        beyond = False  # within the drift between the baseline runs
    if not beyond or c is None or abs(c) < min_effect:
        return Verdict("within-noise", basis, p)
    return Verdict("slower" if c > 0 else "faster", basis, p)
