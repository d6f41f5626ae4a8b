"""TimingStats: hand-computed statistics."""
import pytest

from layerscope.core.stats import TimingStats, percentile

CASES = [
    # samples, median, p10, p90, mean
    ("one", [2.0], 2.0, 2.0, 2.0, 2.0),
    ("two", [1.0, 3.0], 2.0, 1.2, 2.8, 2.0),  # p10 = 1 + 0.1*(3-1)
    ("eleven", [float(i) for i in range(11)], 5.0, 1.0, 9.0, 5.0),  # ranks 0..10: p10 at 1.0
    ("unsorted", [5.0, 1.0, 3.0, 2.0, 4.0], 3.0, 1.4, 4.6, 3.0),  # pos 0.4 -> 1 + 0.4
]


@pytest.mark.parametrize("xs,median,p10,p90,mean", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_timing_stats(xs, median, p10, p90, mean):
    s = TimingStats.of(xs)
    assert (s.median_s, s.n) == (pytest.approx(median), len(xs))
    assert s.p10_s == pytest.approx(p10) and s.p90_s == pytest.approx(p90)
    assert s.mean_s == pytest.approx(mean)


def test_std_iqr_and_noise_flags():
    s = TimingStats.of([1.0, 2.0, 3.0, 4.0, 5.0])
    assert s.std_s == pytest.approx(2.5 ** 0.5)  # sample variance 10/4
    assert s.iqr_s == pytest.approx(4.0 - 2.0)
    assert s.noisy  # IQR 2 > 10% of median 3
    assert not TimingStats.of([1.0, 1.0, 1.01]).noisy
    a, b, c = TimingStats.of([1.0, 1.1, 1.2]), TimingStats.of([1.15, 1.3]), TimingStats.of([2, 3])
    assert a.overlaps(b) and not a.overlaps(c)


def test_empty_samples_are_an_error():
    with pytest.raises(ValueError):
        TimingStats.of([])
    with pytest.raises(ValueError):
        percentile([], 0.5)
