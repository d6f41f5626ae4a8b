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
of the same test (``DIR/<test id>.json``) through the same ``diff`` the command line runs: the
test fails only for the ``fail_if`` expressions whose rows are slower *beyond the noise* of the
two results' own samples, with the failed lines and the diff's summary in the failure message.
Without a baseline for the test, the result is stored and the test passes; with
``--layerscope-update`` the baseline is replaced. Without ``--layerscope-baseline`` the fixture
profiles and returns the result, and nothing is compared.

The default expression (no marker argument, no ``--layerscope-fail-if``) is ``end_to_end>+0%``:
any end-to-end slowdown the diff calls slower (beyond the noise and its minimum effect).
This module imports neither torch nor the rest of layerscope until a test profiles, so every
pytest run in an environment with layerscope installed stays as fast as before.
"""
from __future__ import annotations

import os
import re
from typing import Any

import pytest

MARKER = "layerscope_profile"
DEFAULT_FAIL_IF = ("end_to_end>+0%",)


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
    checks = config.getoption("--layerscope-fail-if")
    if checks:  # a malformed expression is the command line's error, before any test runs
        from layerscope.analysis.diff.gate import parse_check
        from layerscope.core.errors import UserError

        for text in checks:
            try:
                parse_check(text)
            except UserError as exc:
                raise pytest.UsageError(str(exc)) from None


def baseline_name(nodeid: str, index: int) -> str:
    """The stored result's file name for the ``index``-th profile (0-based) of a test: its id
    with every character a file name cannot safely hold replaced by '_'."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", nodeid).strip("_") or "test"
    return f"{safe}.json" if index == 0 else f"{safe}-{index + 1}.json"


class Profiler:
    """The ``layerscope_profile`` fixture: call it as ``layerscope.profile``; each call's result
    is compared with its stored baseline (or stored, as the options say) and returned."""

    def __init__(self, request: Any):
        config = request.config
        marker = request.node.get_closest_marker(MARKER)
        given = (marker.kwargs.get("fail_if") if marker is not None else None)
        if isinstance(given, str):
            given = [given]
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
            self._judge(result, os.path.join(self.folder, baseline_name(self.nodeid, index)))
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
