"""Timing statistics from samples: median, p10, p90, mean, std, IQR, CV, n."""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from layerscope.core.document import DictRecord


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, 'linear')."""
    if not sorted_values:
        raise ValueError("percentile of no samples")
    pos = (len(sorted_values) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _optional(description: str) -> dict[str, str | bool]:
    return {"optional": True, "description": description}


@dataclass(frozen=True, eq=False)
class TimingStats(DictRecord):
    """Seconds over n samples (the ``timing`` JSON object)."""

    median_s: float
    p10_s: float
    p90_s: float
    mean_s: float = field(metadata=_optional("mean; absent in the oldest results"))
    std_s: float = field(metadata=_optional("sample standard deviation (0 for one sample)"))
    iqr_s: float = field(metadata=_optional("p75 - p25"))
    n: int = field(metadata={"minimum": 0})

    @classmethod
    def of(cls, samples: Sequence[float]) -> TimingStats:
        xs = sorted(samples)
        if not xs:
            raise ValueError("no timing samples")
        return cls(
            median_s=percentile(xs, 0.5),
            p10_s=percentile(xs, 0.1),
            p90_s=percentile(xs, 0.9),
            mean_s=statistics.fmean(xs),
            std_s=statistics.stdev(xs) if len(xs) > 1 else 0.0,
            iqr_s=percentile(xs, 0.75) - percentile(xs, 0.25),
            n=len(xs),
        )

    @property
    def cv(self) -> float:
        return self.std_s / self.mean_s if self.mean_s else 0.0

    @property
    def noisy(self) -> bool:
        """torch.utils.benchmark's warning threshold: IQR above 10% of the median."""
        return self.median_s > 0 and self.iqr_s > 0.1 * self.median_s

    def overlaps(self, other: TimingStats) -> bool:
        """Whether the p10-p90 ranges overlap: a difference within the noise."""
        return self.p10_s <= other.p90_s and other.p10_s <= self.p90_s


def median_of_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> float | None:
    """Median over pairs of numerator / denominator (pairs with a zero denominator skipped).

    Used for quantities measured within one run or one interleaved pair (coverage, overhead):
    drift between runs cancels inside each ratio, and the median ignores the odd spiked pair."""
    ratios = sorted(n / d for n, d in zip(numerators, denominators) if d)
    return percentile(ratios, 0.5) if ratios else None


def middle_runs(walls: Sequence[float], trim: float = 0.1) -> list[int]:
    """Indices of the runs left after dropping the ``floor(trim * n)`` fastest and slowest by
    wall time (all runs when n < 10): the same runs for every row, so that means over them add
    up across rows (a 10% trimmed mean)."""
    order = sorted(range(len(walls)), key=lambda i: walls[i])
    k = math.floor(trim * len(walls))
    return sorted(order[k:len(order) - k]) if k else order
