"""Progress without a terminal: one line every few seconds on stderr, ETA, --quiet."""
import io

import pytest

from layerscope.cli.progress import LineProgress, progress_bar


class Ticks:
    """A clock that returns the given times in order."""

    def __init__(self, *times):
        self.times = list(times)

    def __call__(self):
        return self.times.pop(0)


def test_one_line_per_interval_with_eta():
    out = io.StringIO()
    # created at t=0; calls at t=1, 4, 6, 7, 12: lines only once 5 s have passed since the last
    p = LineProgress("profiling m", "runs", out, interval=5.0, clock=Ticks(0, 1, 4, 6, 7, 12))
    for done in (1, 2, 3, 4, 5):
        p(done, 10)
    # the rate counts from the first report (t=1, 1 done), not from the setup before it:
    # t=6: 2 more in 5 s -> 2.5 s each, 7 left -> 17.5 s (rounds to 18);
    # t=12: 4 more in 11 s -> 2.75 s each, 5 left -> 13.75 s -> 14 s
    assert out.getvalue().splitlines() == [
        "profiling m: 3/10 runs, 6s elapsed, ETA 18s",
        "profiling m: 5/10 runs, 12s elapsed, ETA 14s",
    ]


def test_label_restarts_the_eta_clock():
    out = io.StringIO()
    # epoch 1 runs t=0..10; epoch 2 starts at t=100 (its first step); at t=110 2 of 4 done
    p = LineProgress("training r", "steps", out, interval=5.0, clock=Ticks(0, 10, 100, 110))
    p(1, 1, "epoch 1")
    p(1, 4, "epoch 2")
    p(2, 4, "epoch 2")
    assert out.getvalue().splitlines() == [
        "training r epoch 1: 1/1 steps, 10s elapsed",
        "training r epoch 2: 1/4 steps, 1m40s elapsed",
        "training r epoch 2: 2/4 steps, 1m50s elapsed, ETA 20s",
    ]


@pytest.mark.parametrize("quiet,kind", [(True, type(None)), (False, LineProgress)],
                         ids=["quiet", "not-a-terminal"])
def test_progress_bar_without_terminal(quiet, kind):
    with progress_bar("x", quiet=quiet, stream=io.StringIO()) as progress:
        assert isinstance(progress, kind)
