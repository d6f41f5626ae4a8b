"""A pytest plugin: performance tests against a stored baseline, judged by ``layerscope diff``.

Installed with layerscope (the ``pytest11`` entry point), so ``pytest`` finds it by itself::

    pytest --layerscope-baseline perf-baseline/

A test uses the ``layerscope_profile`` fixture, optionally under the marker
``@pytest.mark.layerscope_profile(fail_if=[...])``::

    @pytest.mark.layerscope_profile(fail_if=["end_to_end>+10%", "layer:fc*>+20%"])
    def test_classifier_speed(layerscope_profile):
        layerscope_profile(make_model(), "8x3x32x32", runs=30)

The fixture profiles the model (``layerscope.profile``: pass any of its arguments, such as
``backward=True`` for a forward and backward step) and compares the result with the stored one
of the same test (``DIR/<test id>-<hash>.json``: the test id with the characters a file name
cannot safely hold replaced, then the first 12 hex digits of the SHA-256 of the exact id, so two
ids never share a file, ``test[a/b]`` and ``test[a_b]`` included, nor two that differ only in
case) through the same ``diff`` the command line runs: the
test fails only for the ``fail_if`` expressions whose rows are slower *beyond the noise* of the
two results' own samples, with the failed lines and the diff's summary in the failure message.
Without a baseline for the test, the result is stored and the test passes; with
``--layerscope-update`` the baseline is replaced. Without ``--layerscope-baseline`` the fixture
profiles and returns the result, and nothing is compared. Usage errors (a baseline path that is
a file, a ``fail_if`` that is not a list of expressions, a malformed expression) stop the
session at its start, in one line, before any test runs.

The default expression (no marker argument, no ``--layerscope-fail-if``) is ``end_to_end>+0%``:
any end-to-end slowdown the diff calls slower (beyond the noise and its minimum effect).
This module imports neither torch nor the rest of layerscope until a test profiles, so every
pytest run in an environment with layerscope installed stays as fast as before.
"""
from __future__ import annotations

import hashlib
import os
import re
from typing import Any

import pytest

MARKER = "layerscope_profile"
DEFAULT_FAIL_IF = ("end_to_end>+0%",)
READABLE = 100  # characters of the test id kept readable in a baseline's file name


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("layerscope", "performance baselines (layerscope diff)")
    group.addoption("--layerscope-baseline", metavar="DIR", default=None,
                    help="folder of the stored results the layerscope_profile fixture compares "
                         "with (one JSON per test; made when missing)")
    group.addoption("--layerscope-update", action="store_true", default=False,
                    help="replace the stored results with this run's instead of comparing")
    group.addoption("--layerscope-fail-if", metavar="EXPR", action="append", default=None,
                    help="a --fail-if expression of layerscope diff for tests whose marker "
                         "names none (repeatable; default end_to_end>+0%%: any end-to-end "
                         "slowdown beyond the noise)")


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(fail_if=None): a performance test whose layerscope_profile "
        "results are compared with the stored baseline (--layerscope-baseline DIR); fail_if: "
        "layerscope diff --fail-if expressions")
    folder = config.getoption("--layerscope-baseline")
    if config.getoption("--layerscope-update") and not folder:
        raise pytest.UsageError("--layerscope-update replaces the stored results: give "
                                "--layerscope-baseline DIR too")
    if folder and os.path.exists(folder) and not os.path.isdir(folder):
        raise pytest.UsageError(f"--layerscope-baseline {folder} is a file, not a folder: give "
                                "the folder of the stored results (made when missing)")
    checks = config.getoption("--layerscope-fail-if")
    if checks:  # a malformed expression is the command line's error, before any test runs
        fail_if_of(checks, "--layerscope-fail-if")


def fail_if_of(given: Any, where: str) -> list[str]:
    """``fail_if`` as a list of expressions (a string is one), each parsed; pytest.UsageError
    (one line, naming ``where``) for anything else."""
    from layerscope.analysis.diff.gate import parse_check
    from layerscope.core.errors import UserError

    items = [given] if isinstance(given, str) else given
    if not isinstance(items, (list, tuple)) or not all(isinstance(t, str) for t in items):
        raise pytest.UsageError(f"{where}: fail_if must be a list of layerscope diff --fail-if "
                                f"expressions (strings such as 'end_to_end>+5%'), got "
                                f"{_short(given)}")
    for text in items:
        try:
            parse_check(text)
        except UserError as exc:
            raise pytest.UsageError(f"{where}: {exc}") from None
    return list(items)


def _short(value: Any, most: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= most else f"{text[:most]}... ({type(value).__name__})"


def pytest_collection_modifyitems(session: Any, config: Any, items: list[Any]) -> None:
    """Every ``layerscope_profile`` marker's ``fail_if`` checked before any test runs: a
    malformed one is a usage error of the session, not a failure of one test."""
    for item in items:
        marker = item.get_closest_marker(MARKER)
        if marker is not None and marker.kwargs.get("fail_if") is not None:
            fail_if_of(marker.kwargs["fail_if"], f"{item.nodeid}: @pytest.mark.{MARKER}")


def baseline_name(nodeid: str, index: int) -> str:
    """The stored result's file name for the ``index``-th profile (0-based) of a test, one
    per (test id, index): the id's first ``READABLE`` characters with every character a file
    name cannot safely hold replaced by '_' (to read), then the first 12 hex digits of the
    SHA-256 of the whole id (to tell ids apart: ``test[a/b]``, ``test[a_b]`` and
    ``test[a b]`` read alike, as do ids that differ only in case on a case-insensitive file
    system, or only after the readable part)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", nodeid[:READABLE]).strip("_.") or "test"
    digest = hashlib.sha256(nodeid.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{safe}-{digest}.json" if index == 0 else f"{safe}-{digest}-{index + 1}.json"


def earlier_name(nodeid: str, index: int) -> str:
    """The name layerscope 0.5 gave the same baseline (the id's characters replaced, no hash:
    several ids shared one file), looked for so that an upgrade does not silently store new
    baselines beside the old ones and compare nothing."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", nodeid).strip("_") or "test"
    return f"{safe}.json" if index == 0 else f"{safe}-{index + 1}.json"


class Profiler:
    """The ``layerscope_profile`` fixture: call it as ``layerscope.profile``; each call's result
    is compared with its stored baseline (or stored, as the options say) and returned."""

    def __init__(self, request: Any):
        config = request.config
        marker = request.node.get_closest_marker(MARKER)
        given = marker.kwargs.get("fail_if") if marker is not None else None
        if given is not None:  # checked at collection; again for a marker added later
            given = fail_if_of(given, f"{request.node.nodeid}: @pytest.mark.{MARKER}")
        self.fail_if = list(given or config.getoption("--layerscope-fail-if")
                            or DEFAULT_FAIL_IF)
        self.folder = config.getoption("--layerscope-baseline")
        self.update = config.getoption("--layerscope-update")
        self.nodeid = request.node.nodeid
        self.calls = 0
        self.diffs: list[Any] = []  # the DiffReports of this test, in call order

    def __call__(self, model: Any, inputs: Any = None, **profile_args: Any) -> Any:
        from layerscope.analysis.profiling import profile

        result = profile(model, inputs, **profile_args)
        index, self.calls = self.calls, self.calls + 1
        if self.folder:
            path = os.path.join(self.folder, baseline_name(self.nodeid, index))
            earlier = os.path.join(self.folder, earlier_name(self.nodeid, index))
            if not self.update and not os.path.exists(path) and os.path.isfile(earlier):
                pytest.fail(f"the baseline of this test is {path}, not found; {earlier} is one "
                            "stored under the earlier name, which several test ids shared: "
                            "rename it if it is this test's, or record it again with "
                            "--layerscope-update", pytrace=False)
            self._judge(result, path)
        return result

    def _judge(self, result: Any, path: str) -> None:
        from layerscope.analysis.diff import diff
        from layerscope.analysis.diff.gate import failed_checks
        from layerscope.core.io import make_dir, write_file
        from layerscope.renderers.json_out import to_json

        if self.update or not os.path.exists(path):
            make_dir(os.path.dirname(path) or ".", "--layerscope-baseline folder")
            write_file(path, to_json(result))
            return
        report = diff(path, result, names=[path, "this run"])
        self.diffs.append(report)
        failed = failed_checks(report, self.fail_if)
        if failed:
            pytest.fail("slower than the baseline beyond the noise:\n  " + "\n  ".join(failed)
                        + f"\n{report.summary}\n(baseline {path}; --layerscope-update replaces "
                        "it)", pytrace=False)


@pytest.fixture
def layerscope_profile(request: Any) -> Profiler:
    """Profile a model (``layerscope.profile``'s arguments) and compare the result with the
    stored baseline of this test (``--layerscope-baseline DIR``) through ``layerscope diff``;
    fails only beyond the noise (the marker's ``fail_if`` expressions)."""
    return Profiler(request)
