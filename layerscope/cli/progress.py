"""Progress of long measurements on stderr: a rich bar with ETA on a terminal; otherwise (a log
file, CI, a pipe) one plain line every few seconds with what is done and the ETA, so a long run
is never silent. ``--quiet`` silences both."""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import TextIO

LINE_INTERVAL_S = 5.0  # seconds between two plain progress lines


def add_quiet(p) -> None:
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress on stderr (bar on a terminal, a line every few seconds "
                        "otherwise)")


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


_FIRST = object()


class LineProgress:
    """A ``(done, total)`` callback writing one line at most every ``interval`` seconds.

    The first line comes after ``interval`` seconds (short runs print nothing); the ETA is the
    mean time per unit since the first report times the units left. ``label`` names the current
    stage (the
    epoch of a training run); a new label restarts the rate's measurement from that report."""

    def __init__(self, description: str, unit: str = "runs", stream: TextIO | None = None,
                 interval: float = LINE_INTERVAL_S, clock: Callable[[], float] = time.monotonic):
        self.description, self.unit = description, unit
        self.stream = stream if stream is not None else sys.stderr
        self.interval, self.clock = interval, clock
        self.started = self.last = clock()
        # the rate is measured from the first report on: loading and warm-up come before it
        self.label: object = _FIRST
        self.stage_started, self.stage_done = self.started, 0

    def __call__(self, done: int, total: int | None, label: str | None = None) -> None:
        now = self.clock()
        if label != self.label:  # the rate is measured from the stage's first report
            self.label, self.stage_started, self.stage_done = label, now, done
        if now - self.last < self.interval:
            return
        self.last = now
        head = f"{self.description}" + (f" {label}" if label else "")
        line = f"{head}: {done}/{total if total else '?'} {self.unit}, " \
               f"{_duration(now - self.started)} elapsed"
        stage, units = now - self.stage_started, done - self.stage_done
        if total and done < total and stage > 0 and units > 0:
            line += f", ETA {_duration(stage / units * (total - done))}"
        self.stream.write(line + "\n")
        self.stream.flush()


@contextmanager
def progress_bar(description: str, *, quiet: bool = False, unit: str = "runs",
                 stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic):
    """Yields a callback ``(done, total)`` (None when ``quiet``): a rich bar when stderr is a
    terminal, plain lines every few seconds otherwise."""
    stream = stream if stream is not None else sys.stderr
    if quiet:
        yield None
        return
    if not stream.isatty():
        yield LineProgress(description, unit, stream, clock=clock)
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                  console=Console(file=stream), transient=True) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int, label: str | None = None) -> None:
            bar.update(task, completed=done, total=total,
                       description=f"{description} {label}" if label else description)

        yield update
