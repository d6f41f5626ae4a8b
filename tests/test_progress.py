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


def test_a_stage_reports_its_own_unit_and_one_without_a_count_its_time():
    out = io.StringIO()
    p = LineProgress("training r", "steps", out, interval=5.0, clock=Ticks(0, 6, 12, 20))
    p(0, None, "epoch 1 validation", unit="batches")  # t=6: no count yet
    p(1, 4, "epoch 1 validation", unit="batches")     # t=12: 1 of 4 in 6 s -> 18 s left
    p(0, None, "counting the step's FLOPs (MFU)")     # t=20
    assert out.getvalue().splitlines() == [
        "training r epoch 1 validation: 6s elapsed",
        "training r epoch 1 validation: 1/4 batches, 12s elapsed, ETA 18s",
        "training r counting the step's FLOPs (MFU): 20s elapsed",
    ]


def test_the_heartbeat_repeats_the_last_report_while_a_stage_works():
    """A stage that reports once and then works for long (one slow step, a validation batch)
    still prints a line every interval; nothing before the first report, nothing twice within
    an interval."""
    out = io.StringIO()
    # created at t=0; beat at t=7 (no report yet); report at t=8; beats at t=9, 13, 14, 19
    p = LineProgress("training r", "steps", out, interval=5.0,
                     clock=Ticks(0, 7, 8, 9, 13, 14, 19))
    p.beat()
    p(0, 3, "epoch 1")  # t=8: 8 s since the start: a line
    p.beat()            # t=9: 1 s since the last line
    p.beat()            # t=13: 5 s: the line again
    p.beat()            # t=14
    p.beat()            # t=19
    assert out.getvalue().splitlines() == [
        "training r epoch 1: 0/3 steps, 8s elapsed",
        "training r epoch 1: 0/3 steps, 13s elapsed",
        "training r epoch 1: 0/3 steps, 19s elapsed",
    ]


def test_train_reports_its_validation_and_later_stages(tmp_path):
    """``train``'s stages after the steps: each epoch's validation batch by batch, the MFU's
    FLOP count, the final save (what `layerscope train` shows as progress)."""
    import layerscope

    seen = []
    layerscope.train(recipe="digits-cnn", dry_run=True, out=str(tmp_path / "run"),
                     stages=lambda *a: seen.append(a))
    assert seen == [("epoch 1 validation", 0, None), ("epoch 1 validation", 1, 1),
                    ("counting the step's FLOPs (MFU)", 0, None), ("saving the model", 0, None)]
