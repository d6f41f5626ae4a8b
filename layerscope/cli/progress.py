"""Progress of long measurements on stderr: a rich bar with ETA on a terminal; otherwise (a log
file, CI, a pipe) one plain line every few seconds with what is done and the ETA, so a long run
is never silent. ``--quiet`` silences both."""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
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
    stage (the epoch of a training run, its validation); a new label restarts the rate's
    measurement from that report. ``unit`` overrides the units of one stage (a validation counts
    batches, not steps); a stage with no count (``done`` 0 of ``total`` None: counting a
    model's FLOPs) shows its elapsed time only. ``beat()`` repeats the last report's line when
    no line came for ``interval`` seconds: a stage that reports once and then works for minutes
    (one long step, a count) is not silent (``progress_bar(heartbeat=True)`` calls it)."""

    def __init__(self, description: str, unit: str = "runs", stream: TextIO | None = None,
                 interval: float = LINE_INTERVAL_S, clock: Callable[[], float] = time.monotonic):
        self.description, self.unit = description, unit
        self.stream = stream if stream is not None else sys.stderr
        self.interval, self.clock = interval, clock
        self.started = self.last = clock()
        # the rate is measured from the first report on: loading and warm-up come before it
        self.label: object = _FIRST
        self.stage_started, self.stage_done = self.started, 0
        self.state: tuple[int, int | None, str | None, str | None] | None = None
        self.lock = threading.Lock()

    def __call__(self, done: int, total: int | None, label: str | None = None,
                 unit: str | None = None) -> None:
        with self.lock:
            now = self.clock()
            if label != self.label:  # the rate is measured from the stage's first report
                self.label, self.stage_started, self.stage_done = label, now, done
            self.state = (done, total, label, unit)
            if now - self.last >= self.interval:
                self._write(now)

    def beat(self) -> None:
        """The last report's line again (elapsed time updated), when none came for
        ``interval`` seconds; nothing before the first report."""
        with self.lock:
            now = self.clock()
            if self.state is not None and now - self.last >= self.interval:
                self._write(now)

    def _write(self, now: float) -> None:
        assert self.state is not None
        done, total, label, unit = self.state
        self.last = now
        head = f"{self.description}" + (f" {label}" if label else "")
        elapsed = f"{_duration(now - self.started)} elapsed"
        if total is None and not done:
            line = f"{head}: {elapsed}"
        else:
            line = f"{head}: {done}/{total if total else '?'} {unit or self.unit}, {elapsed}"
        stage, units = now - self.stage_started, done - self.stage_done
        if total and done < total and stage > 0 and units > 0:
            line += f", ETA {_duration(stage / units * (total - done))}"
        self.stream.write(line + "\n")
        self.stream.flush()


@contextmanager
def _beating(progress: LineProgress, interval: float) -> Iterator[None]:
    """``progress.beat()`` every ``interval`` seconds from a thread, until the block ends."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(interval):
            progress.beat()

    thread = threading.Thread(target=beat, name="layerscope-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextmanager
def progress_bar(description: str, *, quiet: bool = False, unit: str = "runs",
                 stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic,
                 heartbeat: bool = False):
    """Yields a callback ``(done, total, label=None, unit=None)`` (None when ``quiet``): a rich
    bar when stderr is a terminal (its elapsed time runs on its own), plain lines every few
    seconds otherwise; ``heartbeat``: also between reports, once a first one came
    (``LineProgress.beat``)."""
    stream = stream if stream is not None else sys.stderr
    if quiet:
        yield None
        return
    if not stream.isatty():
        lines = LineProgress(description, unit, stream, clock=clock)
        with _beating(lines, LINE_INTERVAL_S / 5) if heartbeat else nullcontext():
            yield lines
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

        def update(done: int, total: int | None, label: str | None = None,
                   unit: str | None = None) -> None:
            bar.update(task, completed=done, total=total,
                       description=f"{description} {label}" if label else description)

        yield update
