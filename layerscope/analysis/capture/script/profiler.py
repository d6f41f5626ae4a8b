"""The profiler run that records the interpreter's module hierarchy (``with_modules=True``) and
its call events, read back from the exported Chrome trace. Nothing here raises: a failure is a
sentence in ``warnings`` and no events."""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import warnings
from collections.abc import Callable

import torch

from layerscope.analysis.capture.script.trace import Event, read_trace


@contextlib.contextmanager
def _quiet_stderr():
    """Kineto writes status lines (``profiler_start``, device probing) straight to fd 2."""
    saved = None
    try:
        sys.stderr.flush()
        saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 2)
        finally:
            os.close(devnull)
    except Exception:
        pass  # then fd 2 is left as it is
    try:
        yield
    finally:
        if saved is not None:
            os.dup2(saved, 2)
            os.close(saved)


def _fast_marker(name: str) -> None:
    """A zero-length RecordFunction in the ops' scope (recorded together with every op)."""
    fast = getattr(getattr(torch._C, "_profiler", None), "_RecordFunctionFast", None)
    with (fast or torch.autograd.profiler.record_function)(name):
        pass


class TraceRecorder:
    """Start the CPU profiler with module hierarchies; ``stop()`` returns the trace's events
    (None when it could not be started or read, with a sentence in ``warnings``).

    Only two kinds of event are needed: the interpreter's method and function calls and the
    per-op markers (``mark(name)``). Where this torch lets the profiler record only some
    RecordFunction scopes, it records just those two (TorchScript functions, and markers in the
    user scope), not the several aten events of every op: the trace of a model with 100,000 ops
    is then a few MB instead of GBs, and reading it seconds instead of minutes. Elsewhere the
    public profiler records everything and markers are in the ops' scope."""

    def __init__(self, warnings_: list[str]):
        self.warnings = warnings_
        self._save: Callable[[str], None] | None = None
        self.mark: Callable[[str], None] = _fast_marker

    def start(self) -> bool:
        """Whether the profiler is now recording."""
        try:
            if torch.autograd._profiler_enabled():
                self.warnings.append("TorchScript: another profiler is running, so ops could not "
                                     "be attributed to submodules; all costs are on the root row")
                return False
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with _quiet_stderr():
                    if not self._start_scoped():
                        self._start_public()
            return True
        except Exception as exc:
            self._save = None
            self.warnings.append("TorchScript: the profiler could not be started "
                                 f"({type(exc).__name__}: {exc}); all costs are on the root row")
            return False

    def _start_scoped(self) -> bool:
        """Record TorchScript calls and user-scope markers only (see the class doc)."""
        try:
            from torch._C._autograd import (
                _disable_profiler,
                _enable_profiler,
                _prepare_profiler,
            )
            from torch._C._profiler import (
                ProfilerActivity,
                ProfilerConfig,
                ProfilerState,
                RecordScope,
                _ExperimentalConfig,
            )
            from torch.autograd.profiler import _run_on_profiler_start, _run_on_profiler_stop

            enter = torch.ops.profiler._record_function_enter_new
            leave = torch.ops.profiler._record_function_exit._RecordFunction
            # state, shapes, memory, stack, flops, modules, experimental
            config = ProfilerConfig(ProfilerState.KINETO, True, False, False, False, True,
                                    _ExperimentalConfig())
            activities = {ProfilerActivity.CPU}
            _prepare_profiler(config, activities)
            _run_on_profiler_start()
            try:
                _enable_profiler(config, activities,
                                 {RecordScope.TORCHSCRIPT_FUNCTION, RecordScope.USER_SCOPE})
            except BaseException:
                _run_on_profiler_stop()
                raise
        except Exception:  # this torch cannot: the public profiler records every scope
            return False

        def save(path: str) -> None:
            try:
                result = _disable_profiler()
            finally:
                _run_on_profiler_stop()
            result.save(path)

        self._save = save
        self.mark = lambda name: leave(enter(name, None))
        return True

    def _start_public(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_modules=True)
        prof.start()

        def save(path: str) -> None:
            prof.stop()
            prof.export_chrome_trace(path)

        self._save = save
        self.mark = _fast_marker

    def stop(self) -> list[Event] | None:
        save, self._save = self._save, None
        if save is None:
            return None
        path = None
        try:
            fd, path = tempfile.mkstemp(prefix="layerscope-ts-", suffix=".json")
            os.close(fd)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with _quiet_stderr():
                    save(path)
            return read_trace(path)
        except Exception as exc:
            self.warnings.append("TorchScript: reading the profiler trace failed "
                                 f"({type(exc).__name__}: {exc}); all costs are on the root row")
            return None
        finally:
            if path is not None:
                try:
                    os.unlink(path)
                except OSError:
                    pass
