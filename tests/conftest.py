"""The suite's two tiers, and the check that keeps them apart.

A test that starts a process (a Python, a shell or a browser through ``subprocess``, a
``multiprocessing`` process, ``os.fork``: a CLI run in a child, a DataLoader worker, a
torch.distributed rank) belongs to the integration tier and says so with
``@pytest.mark.integration`` (or a module's ``pytestmark``). The check below fails any other
test that starts one from its own thread, in its setup or its call, naming what it started:
the unit tier (``make test-quick``) stays in-process, so its time is its own arithmetic. A
system probe a library runs once and caches, and anything started while a module is being
imported, are not counted: which test pays for them depends on the order tests run in. Tests
that train end to end, run the docs' examples, build the wheel or lint, and in-process tests
over about half a CPU-second, are marked integration by hand.

``LAYERSCOPE_TEST_RECORD=FILE`` appends one JSON line per test phase instead of failing (wall
seconds, the test process's CPU seconds, its waited-for children's CPU seconds (with the CPU
of the commands a warm-start server of tests/warm_start.py ran for it, also apart as
``warm_cpu``), what it started, its markers): the figures ``docs/development.md`` gives per
tier come from it.
"""
from __future__ import annotations

import json
import multiprocessing.process
import os
import re
import resource
import subprocess
import sys
import threading
import time

import pytest


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true",
                     help="rewrite tests/golden/* from the current output")


@pytest.fixture
def update_golden(request):
    return request.config.getoption("--update-golden")


class _Starts:
    """What the running test started: the first few commands or process names."""

    def __init__(self) -> None:
        self.what: list[str] = []

    def add(self, what: str) -> None:
        if len(self.what) < 3:
            self.what.append(what)


_STARTS = _Starts()


def _importing() -> bool:
    """Whether a module is being imported: a library that runs ``ldconfig`` while it loads
    (ctypes.util.find_library, under torch's CUDA modules) does it in whichever test imports it
    first, so it is nobody's test."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _wrap(owner, name: str, describe):
    original = getattr(owner, name)

    def wrapped(*args, **kwargs):
        # only the test's own thread: a thread an earlier test left running would otherwise
        # charge its processes to whichever test runs when it starts them
        mine = threading.current_thread() is threading.main_thread()
        what = describe(*args, **kwargs) if mine and not _importing() else None
        if what is not None:
            _STARTS.add(what)
        return original(*args, **kwargs)

    wrapped.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(owner, name, wrapped)


# What a started program costs is a Python, a shell (which may run anything) or a browser; a
# system probe a library runs once and caches (``uname -p`` under platform.processor(),
# ``ldconfig -p`` under ctypes.util.find_library, ``git ls-files``) is milliseconds, and which
# test pays for it depends on the order tests run in.
_COSTLY = re.compile(r"^(python[\d.]*|layerscope|torchrun|bash|sh|dash|zsh|chrom\w*)$")


def _command(self, args, executable=None, *rest, **kwargs) -> str | None:
    words = os.fsdecode(args).split() if isinstance(args, (str, bytes)) else list(args)
    program = os.path.basename(os.fsdecode(executable or words[0]))
    if not _COSTLY.match(program):
        return None
    return " ".join(os.fsdecode(w) if isinstance(w, bytes) else str(w) for w in words[:4])


def pytest_configure(config):
    config.addinivalue_line("markers", "integration: starts processes, trains end to end, runs "
                            "the docs' examples, builds the wheel or lints (make test runs it; "
                            "make test-quick leaves it out)")
    record = os.environ.get("LAYERSCOPE_TEST_RECORD")
    if record:  # the warm-start servers this process starts note their commands' CPU here
        os.environ["LAYERSCOPE_WARM_CPU_LOG"] = f"{record}.warm-{os.getpid()}"
    if getattr(subprocess.Popen._execute_child, "__wrapped__", None) is None:
        _wrap(subprocess.Popen, "_execute_child", _command)
        _wrap(multiprocessing.process.BaseProcess, "start",
              lambda self: f"multiprocessing {type(self).__name__} {self.name}")
        _wrap(os, "fork", lambda: "os.fork()")
        if hasattr(os, "posix_spawn"):
            # subprocess itself spawns this way in some cases: the same rule as its other way
            _wrap(os, "posix_spawn", lambda path, argv, *a, **k: _command(None, argv, path))


def _in_unit_tier(item) -> bool:
    """The unit tier is what ``make test-quick`` runs: neither integration, nor slow, nor
    cuda (``make test-slow`` and ``make test-gpu`` run those, processes and all)."""
    return not any(item.get_closest_marker(m) for m in ("integration", "slow", "cuda"))


def _warm_cpu() -> float:
    """CPU seconds of the commands the warm-start servers of this process ran so far
    (tests/warm_start.py notes each in ``LAYERSCOPE_WARM_CPU_LOG``)."""
    log = os.environ.get("LAYERSCOPE_WARM_CPU_LOG")
    try:
        with open(log or "", encoding="utf-8") as f:
            return sum(float(x) for x in f.read().split())
    except (OSError, ValueError):
        return 0.0


def _watched(item, phase: str):
    """Run one phase of a test, noting what it started; record it when asked."""
    _STARTS.what = []
    record = os.environ.get("LAYERSCOPE_TEST_RECORD")
    t0, c0 = time.perf_counter(), time.process_time()
    k0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    w0 = _warm_cpu()
    passed = False
    try:
        result = yield
        passed = True
        return result
    finally:
        started = list(_STARTS.what)
        if record:
            k1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            warm = _warm_cpu() - w0
            line = {"test": item.nodeid, "phase": phase,
                    "wall": round(time.perf_counter() - t0, 3),
                    "cpu": round(time.process_time() - c0, 3),
                    "children_cpu": round(k1.ru_utime + k1.ru_stime - k0.ru_utime
                                          - k0.ru_stime + warm, 3),
                    "warm_cpu": round(warm, 3),
                    "starts": started, "markers": sorted({m.name for m in item.iter_markers()})}
            with open(record, "a", encoding="utf-8") as f:
                f.write(json.dumps(line) + "\n")
        if passed and started and not record and _in_unit_tier(item):
            pytest.fail(f"this test starts a process in its {phase} ({started[0]}) but is not "
                        f"marked integration: mark it @pytest.mark.integration, or keep it "
                        f"in-process (the unit tier never starts one)", pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def _warm_start_server():
    """The warm-start server the tests of ``layerscope run`` share (tests/warm_start.py), if
    one of them started it, stops with the session."""
    yield
    if "tests.warm_start" in sys.modules:
        sys.modules["tests.warm_start"].close_shared()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _watched(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _watched(item, "call"))
