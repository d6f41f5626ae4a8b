"""Timing statistics from samples: median, p10, p90, mean, std, IQR, CV, n."""
from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache

from layerscope.core.document import DictRecord, omit_none, timing_bounds

# the most per-run samples a result keeps (``TimingStats.samples_s``): evenly spaced over the
# runs when there were more, so that a saved result stays small and ``layerscope diff`` can still
# rank the runs of two results against each other
SAMPLES_KEPT = 100


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, 'linear')."""
    if not sorted_values:
        raise ValueError("percentile of no samples")
    pos = (len(sorted_values) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _optional(description: str) -> dict[str, object]:
    return timing_bounds(optional=True, description=description)


@dataclass(frozen=True, eq=False)
class TimingStats(DictRecord):
    """Seconds over n samples (the ``timing`` JSON object)."""

    median_s: float = field(metadata=timing_bounds())
    p10_s: float = field(metadata=timing_bounds())
    p90_s: float = field(metadata=timing_bounds())
    mean_s: float = field(metadata=_optional("mean; absent in the oldest results"))
    std_s: float = field(metadata=_optional("sample standard deviation (0 for one sample)"))
    iqr_s: float = field(metadata=_optional("p75 - p25"))
    n: int = field(metadata={"minimum": 0})
    samples_s: list[float] | None = field(default=None, metadata=omit_none(
        **timing_bounds(),
        description="the per-run seconds, in run order (at most SAMPLES_KEPT, evenly spaced "
                    "over the runs when there were more): what layerscope diff ranks; absent in "
                    "results saved before it and in the timings that do not keep them"))

    @classmethod
    def of(cls, samples: Sequence[float], keep: bool = False) -> TimingStats:
        """The statistics of ``samples``; ``keep``: also the samples themselves
        (``kept_samples``)."""
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
            samples_s=kept_samples(samples) if keep else None,
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


def kept_samples(samples: Sequence[float], most: int = SAMPLES_KEPT) -> list[float]:
    """``samples`` in run order, at most ``most`` of them (evenly spaced over the runs), each
    rounded to the nanosecond."""
    xs = list(samples)
    if len(xs) > most:
        xs = [xs[i * len(xs) // most] for i in range(most)]
    return [round(float(x), 9) for x in xs]


def mann_whitney_u(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """The Mann-Whitney U test of two independent samples: (U of ``b``, two-sided p-value).

    U_b = R_b - n_b (n_b + 1) / 2, where R_b is the sum of ``b``'s ranks in the pooled samples
    (ties share their mean rank): how many of the (a, b) pairs have b > a, a tie counting one
    half. Under "neither tends to be larger" U has mean mu = n_a n_b / 2 and variance
    sigma^2 = n_a n_b / 12 * ((n + 1) - sum(t^3 - t) / (n (n - 1))), n = n_a + n_b, t the size
    of each group of tied values. Without ties and with n_a, n_b <= 20 the p-value is exact
    (the distribution of U counted by the recurrence
    c(u; i, j) = c(u - j; i - 1, j) + c(u; i, j - 1), over C(n, n_a) equally likely orders);
    otherwise the normal approximation z = (|U - mu| - 1/2) / sigma with the continuity
    correction (scipy.stats.mannwhitneyu's ``method="asymptotic"``). p = 1 when every value is
    the same."""
    na, nb = len(a), len(b)
    if not na or not nb:
        raise ValueError("the U test needs samples on both sides")
    pooled = sorted([(float(x), 0) for x in a] + [(float(x), 1) for x in b])
    ranks_b, ties, i = 0.0, [], 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        mid = (i + j) / 2 + 1  # ranks i+1 .. j+1 share their mean
        ranks_b += mid * sum(1 for k in range(i, j + 1) if pooled[k][1] == 1)
        if j > i:
            ties.append(j - i + 1)
        i = j + 1
    u = ranks_b - nb * (nb + 1) / 2
    mu = na * nb / 2
    if not ties and na <= 20 and nb <= 20:
        return u, _exact_u_p(u, na, nb)
    n = na + nb
    var = na * nb / 12 * ((n + 1) - sum(t ** 3 - t for t in ties) / (n * (n - 1)))
    if var <= 0:
        return u, 1.0
    z = max(abs(u - mu) - 0.5, 0.0) / math.sqrt(var)
    return u, min(1.0, math.erfc(z / math.sqrt(2)))


def _exact_u_p(u: float, na: int, nb: int) -> float:
    """Two-sided exact p-value of U without ties: 2 x P(U' <= min(U, na nb - U)), capped at 1."""
    low = min(u, na * nb - u)
    cumulative, total = _u_cumulative(na, nb)
    k = math.floor(low)
    return min(1.0, 2 * (cumulative[k] if k >= 0 else 0) / total)


@cache
def _u_cumulative(na: int, nb: int) -> tuple[tuple[int, ...], int]:
    """The exact distribution of U for ``na`` and ``nb`` samples without ties, once per
    (na, nb) (a diff asks for it once per row, with the same sample counts): the number of
    orders with U <= k for each k, and the number of orders C(na + nb, na)."""
    # counts[i][j][k]: orders of i a's and j b's with U = k, built up one value at a time
    # (the largest value is an a: U unchanged; a b: U + i)
    prev = [[1] for _ in range(nb + 1)]  # i = 0: one order, U = 0
    for i in range(1, na + 1):
        cur = [[1]]
        for j in range(1, nb + 1):
            size = i * j + 1
            row = [0] * size
            for k, c in enumerate(prev[j]):  # largest is an a
                row[k] += c
            for k, c in enumerate(cur[j - 1]):  # largest is a b: it beats all i a's
                row[k + i] += c
            cur.append(row)
        prev = cur
    return tuple(itertools.accumulate(prev[nb])), sum(prev[nb])


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


def holm_adjusted(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the order given: with the m p-values sorted
    ascending p_(1) <= ... <= p_(m), p~_(i) = max over j <= i of min(1, (m - j + 1) p_(j)).
    Rejecting every hypothesis whose p~ is under alpha rejects exactly what Holm's step-down
    procedure does (p_(i) against alpha / (m - i + 1) until the first that fails), and keeps
    the chance of any false rejection among the m under alpha whatever their dependence."""
    m = len(p_values)
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda k: p_values[k])):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        out[i] = running
    return out


DRIFT_BLOCKS = 4  # the blocks one run's samples are split into, in run order


def block_drift(samples: Sequence[float], blocks: int = DRIFT_BLOCKS) -> float | None:
    """How much one run's level wanders: the samples, in run order, split into ``blocks``
    consecutive blocks of (nearly) equal size, and the sample standard deviation of the natural
    logarithms of the block medians (a relative spread: 0.05 is about 5%). None with fewer than
    two samples a block, or a block median that is not positive."""
    xs = list(samples)
    if len(xs) < 2 * blocks:
        return None
    medians = [statistics.median(xs[j * len(xs) // blocks:(j + 1) * len(xs) // blocks])
               for j in range(blocks)]
    if min(medians) <= 0:
        return None
    logs = [math.log(m) for m in medians]
    mean = math.fsum(logs) / len(logs)  # the sample standard deviation, in floats
    return math.sqrt(math.fsum((x - mean) ** 2 for x in logs) / (len(logs) - 1))


@cache
def t_quantile(q: float, dof: int) -> float:
    """The q-quantile (0.5 < q < 1) of Student's t distribution with an even number ``dof`` of
    degrees of freedom, by bisection on its closed-form CDF: with x = t / sqrt(dof + t^2),
    F(t) = 1/2 + x/2 * sum over j < dof/2 of c_j (1 - x^2)^j, c_0 = 1, c_j = c_{j-1} (2j - 1)
    / (2j) (dof = 2: 1/2 + t / (2 sqrt(2 + t^2)))."""
    if dof < 2 or dof % 2 or not 0.5 < q < 1:
        raise ValueError("t_quantile takes an even dof >= 2 and 0.5 < q < 1")

    def cdf(t: float) -> float:
        x = t / math.sqrt(dof + t * t)
        c, total = 1.0, 0.0
        for j in range(dof // 2):
            if j:
                c *= (2 * j - 1) / (2 * j)
            total += c * (1 - x * x) ** j
        return 0.5 + x / 2 * total

    lo, hi = 0.0, 1.0
    while cdf(hi) < q:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < q else (lo, mid)
    return (lo + hi) / 2
