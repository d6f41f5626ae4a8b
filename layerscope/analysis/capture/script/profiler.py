"""The profiler run that records the interpreter's module hierarchy (``with_modules=True``) and
its call events, read back from the exported Chrome trace. Nothing here raises: a failure is a
sentence in ``warnings`` and no events."""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import warnings

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


def marker_context():
    """The cheapest RecordFunction context this torch has (for the per-op markers)."""
    fast = getattr(getattr(torch._C, "_profiler", None), "_RecordFunctionFast", None)
    if fast is not None:
        return fast
    return torch.autograd.profiler.record_function


class TraceRecorder:
    """Start the CPU profiler with module hierarchies; ``stop()`` returns the trace's events
    (None when it could not be started or read, with a sentence in ``warnings``)."""

    def __init__(self, warnings_: list[str]):
        self.warnings = warnings_
        self._prof = None

    def start(self) -> bool:
        """Whether the profiler is now recording."""
        try:
            if torch.autograd._profiler_enabled():
                self.warnings.append("TorchScript: another profiler is running, so ops could not "
                                     "be attributed to submodules; all costs are on the root row")
                return False
            from torch.profiler import ProfilerActivity, profile

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                               with_modules=True)
                with _quiet_stderr():
                    prof.start()
            self._prof = prof
            return True
        except Exception as exc:
            self._prof = None
            self.warnings.append("TorchScript: the profiler could not be started "
                                 f"({type(exc).__name__}: {exc}); all costs are on the root row")
            return False

    def stop(self) -> list[Event] | None:
        prof, self._prof = self._prof, None
        if prof is None:
            return None
        path = None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with _quiet_stderr():
                    prof.stop()
                fd, path = tempfile.mkstemp(prefix="layerscope-ts-", suffix=".json")
                os.close(fd)
                with _quiet_stderr():
                    prof.export_chrome_trace(path)
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
