"""Shared test helpers."""
from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from layerscope.cli.main import main

GOLDEN = Path(__file__).parent / "golden"


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def check_golden(name: str, text: str, update: bool, golden: Path = GOLDEN) -> None:
    """``text`` equals the golden file ``name``; ``update`` (pytest --update-golden) writes it.
    A missing golden file fails: a test that writes its own expectation checks nothing."""
    path = golden / name
    if update:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden file {path}; create it with --update-golden"
    assert text == path.read_text(encoding="utf-8"), f"{name} differs; rerun with --update-golden"


class FakeClock:
    """Time moves only when a model says so (``advance``): timing tests with hand-derived
    numbers, never wall-clock time."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds
