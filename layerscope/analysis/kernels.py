"""``profile --kernels`` and ``train --kernels``: a short torch.profiler window whose events
are joined to modules.

- a forward op belongs to the innermost module whose forward was running (the ``module::``
  ranges ``profiler_ranges.ModuleRanges`` opens around each forward);
- a backward op (anything under the autograd engine's ``evaluate_function`` event of a node)
  belongs to the module of the forward op that made the node: the profiler gives the node the
  forward op's ``sequence_nr``; a module range open around the backward op (activation
  checkpointing's recomputation) wins;
- device activities (kernels, copies, sets) belong to the op that launched them: torch's own
  join by correlation id (``FunctionEvent.kernels``); the CUDA runtime calls that enqueued them
  (cudaLaunchKernel, cudaMemcpyAsync, ...) are the launch time of the op's row;
- what ran in no module is "(outside modules)" (phase "other" outside the backward: a training
  step's data, loss and optimizer, layerscope's gradient seeds); device time no op claims is
  "(unattributed)".
So every CPU event of a step is counted in exactly one row: the rows' CPU op counts and self
times sum to the steps' (the launch calls are counted apart, as launch time).
"""
from __future__ import annotations

import bisect
import re
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from layerscope.analysis.profiler_ranges import RANGE_PREFIX, ModuleRanges, quiet_native_stderr
from layerscope.core.records.kernels import (
    OUTSIDE,
    SHORT_KERNEL_US,
    UNATTRIBUTED,
    KernelBreakdown,
    KernelRow,
    KernelStep,
)

STEP_PREFIX = "layerscope::step "
BACKWARD_PREFIX = "autograd::engine::evaluate_function"
DEFAULT_STEPS = 3
# CUDA runtime/driver calls that enqueue device work (their time is the launch overhead)
_LAUNCH = re.compile(r"^cu(da)?(\w*Launch\w*|Memcpy\w*Async|Memset\w*Async)")
CPU_NOTE = "no device kernels (CPU run)"


def is_launch(name: str) -> bool:
    return bool(_LAUNCH.match(name))


def _split_range(name: str) -> tuple[str, str]:
    """``module::a.b (Linear)`` -> ("a.b", "Linear")."""
    body = name[len(RANGE_PREFIX):]
    module, _, rest = body.rpartition(" (")
    return module, rest[:-1]


@dataclass
class _Acc:
    cpu_ops: int = 0
    cpu_self_us: float = 0.0
    launch_us: float = 0.0
    kernels: list[float] = field(default_factory=list)  # durations, µs


def _is_cpu(e) -> bool:
    """A host event: of the CPU device type, and no device-side span (Kineto's
    ``gpu_user_annotation``) whatever type it carries."""
    return (getattr(e.device_type, "name", str(e.device_type)).upper().endswith("CPU")
            and "gpu" not in str(getattr(e, "activity_type", None) or "").lower())


def _ours(name: str) -> bool:
    return name.startswith(RANGE_PREFIX) or name.startswith(STEP_PREFIX)


def _annotation(e) -> bool:
    """A range, not work: ours, or a user's ``record_function`` (Kineto mirrors them onto the
    device's timeline as ``gpu_user_annotation`` spans over the kernels they hold)."""
    return (_ours(e.name) or bool(getattr(e, "is_user_annotation", False))
            or "annotation" in str(getattr(e, "activity_type", None) or "").lower())


def _launched(e) -> list[float]:
    """The durations (µs) of the device work ``e`` launched; a device-side mirror of the event
    itself (a range's span, named as the range) is no work of its own."""
    return [k.duration for k in (getattr(e, "kernels", None) or [])
            if k.name != e.name and not _ours(k.name)]


def _steps(cpu: list[Any]) -> tuple[list[Any], Any]:
    """The step ranges in order, and a function: a time -> the index of its step (or None)."""
    first: dict[str, Any] = {}  # one range per step: the earliest of that name
    for e in sorted(cpu, key=lambda e: e.time_range.start):
        if e.name.startswith(STEP_PREFIX):
            first.setdefault(e.name, e)
    steps = sorted(first.values(), key=lambda e: e.time_range.start)
    starts = [s.time_range.start for s in steps]

    def step_of(t: float) -> int | None:
        i = bisect.bisect_right(starts, t) - 1
        return i if i >= 0 and t <= steps[i].time_range.end else None

    return steps, step_of


def attribute(events: list[Any]) -> list[tuple[Any, tuple[str | None, str], int]]:
    """(event, (module range name or None for outside modules, phase), step) for every CPU
    event that starts within a step, layerscope's own ranges included (they carry the kernels
    launched outside any op)."""
    cpu = [e for e in events if _is_cpu(e) and not e.is_async]
    _, step_of = _steps(cpu)
    # innermost module range and enclosing backward node of every CPU event
    where: dict[int, tuple[str | None, Any]] = {}
    for e in cpu:
        module, node, p = None, None, e
        while p is not None:
            if module is None and p.name.startswith(RANGE_PREFIX):
                module = p.name
            if node is None and p.name.startswith(BACKWARD_PREFIX):
                node = p
            p = p.cpu_parent
        where[id(e)] = (module, node)
    # sequence number of a forward op -> the module it ran in (the innermost: the latest op)
    by_seq: dict[tuple[int, int], str | None] = {}
    by_seq_any: dict[int, str | None] = {}
    for e in sorted(cpu, key=lambda e: e.time_range.start):
        module, node = where[id(e)]
        if node is None and e.sequence_nr is not None and e.sequence_nr >= 0:
            by_seq[(e.thread, e.sequence_nr)] = module
            by_seq_any[e.sequence_nr] = module

    def key_of(e) -> tuple[str | None, str]:
        module, node = where[id(e)]
        if node is None:
            return module, "forward" if module is not None else "other"
        if module is None and node.sequence_nr is not None and node.sequence_nr >= 0:
            k = (node.fwd_thread, node.sequence_nr)
            module = by_seq[k] if k in by_seq else by_seq_any.get(node.sequence_nr)
        return module, "backward"

    out = []
    for e in cpu:
        i = step_of(e.time_range.start)
        if i is not None:
            out.append((e, key_of(e), i))
    return out


def join(events: list[Any], cuda: bool,
         short_us: float = SHORT_KERNEL_US) -> tuple[list[KernelRow], list[KernelStep]]:
    """Rows per (module, phase) and figures per step from a finished profiler's events
    (``prof.events()``)."""
    cpu = [e for e in events if _is_cpu(e) and not e.is_async]
    device = sorted((e for e in events if not _is_cpu(e) and not _annotation(e)),
                    key=lambda e: e.time_range.start)
    steps, step_of = _steps(cpu)
    acc: dict[tuple[str | None, str], _Acc] = defaultdict(_Acc)
    per_step = [KernelStep(step=i, wall_s=(s.time_range.end - s.time_range.start) / 1e6,
                           cpu_ops=0, cpu_self_s=0.0) for i, s in enumerate(steps)]
    for e, key, i in attribute(events):
        a = acc[key]
        a.kernels += _launched(e)
        if _ours(e.name):
            continue
        self_us = e.self_cpu_time_total
        if is_launch(e.name):
            a.launch_us += self_us
        else:
            a.cpu_ops += 1
            a.cpu_self_us += self_us
            per_step[i].cpu_ops += 1
            per_step[i].cpu_self_s += self_us / 1e6
    window_device_us = 0.0
    if cuda:
        window_device_us = _device_steps(per_step, steps, device, cpu, step_of)
    rows = [_row(module, phase, a, cuda, short_us) for (module, phase), a in acc.items()
            if a.cpu_ops or a.kernels or a.launch_us]
    if cuda:
        claimed = sum(sum(a.kernels) for a in acc.values())
        left = window_device_us - claimed
        if left > 1e-6 * max(window_device_us, 1.0):
            rows.append(KernelRow(module=UNATTRIBUTED, type="", phase="other", cpu_ops=0,
                                  cpu_self_s=0.0, kernels=None, kernel_s=left / 1e6,
                                  launch_s=0.0, short_kernels=None))
    order = {"forward": 0, "backward": 1, "other": 2}
    rows.sort(key=lambda r: (order[r.phase], r.module in (OUTSIDE, UNATTRIBUTED)))
    return rows, per_step


def _row(module: str | None, phase: str, a: _Acc, cuda: bool, short_us: float) -> KernelRow:
    name, type_ = _split_range(module) if module else (OUTSIDE, "")
    return KernelRow(module=name, type=type_, phase=phase, cpu_ops=a.cpu_ops,
                     cpu_self_s=a.cpu_self_us / 1e6,
                     kernels=len(a.kernels) if cuda else None,
                     kernel_s=sum(a.kernels) / 1e6 if cuda else None,
                     launch_s=a.launch_us / 1e6 if cuda else None,
                     short_kernels=sum(d < short_us for d in a.kernels) if cuda else None)


def _device_steps(per_step: list[KernelStep], steps, device, cpu, step_of) -> float:
    """Fill each step's device figures; return the window's device time (µs).

    Busy: the union of the device intervals clipped to the step. A gap before a kernel is
    waiting on the host up to the moment the kernel's launch call returned (the runtime call
    with the kernel's correlation id), the rest of it (and the tail after the step's last
    kernel) is idle for other reasons."""
    launches = {e.id: e for e in cpu if is_launch(e.name)}
    total = 0.0
    for i, st in enumerate(per_step):
        lo, hi = steps[i].time_range.start, steps[i].time_range.end
        mine = [d for d in device if step_of(d.time_range.start) == i]
        st.kernels = len(mine)
        st.kernel_s = sum(d.time_range.end - d.time_range.start for d in mine) / 1e6
        total += st.kernel_s * 1e6
        busy = host = 0.0
        cursor = lo  # the device is idle from here until the next interval starts
        for d in mine:
            a, b = max(d.time_range.start, lo), min(d.time_range.end, hi)
            if a > cursor:
                launch = launches.get(d.id)
                if launch is not None:
                    host += max(0.0, min(a, launch.time_range.end) - cursor)
                cursor = a
            if b > cursor:
                busy += b - cursor
                cursor = b
        st.busy_s, st.idle_host_s = busy / 1e6, host / 1e6
        st.idle_other_s = max(0.0, st.wall_s - st.busy_s - st.idle_host_s)
    return total


class KernelWindow:
    """Profiles ``steps`` consecutive steps after ``skip`` unprofiled ones: each step of the
    caller runs inside ``with window.step():``; ``result()`` joins the events to modules (None
    until the window has run). Module ranges are global forward hooks on ``model``'s modules,
    installed for the window's steps only."""

    def __init__(self, model: torch.nn.Module, device: str, *, steps: int = DEFAULT_STEPS,
                 skip: int = 1, backward: bool = False):
        self.model, self.cuda, self.device = model, device == "cuda", device
        self.steps, self.skip, self.backward = steps, skip, backward
        self.seen = 0
        self.events: list[Any] | None = None
        self._stack: ExitStack | None = None

    @contextmanager
    def step(self) -> Iterator[None]:
        i = self.seen - self.skip
        self.seen += 1
        if i < 0 or i >= self.steps:
            yield
            return
        if i == 0:
            if self.cuda:  # the unprofiled steps' kernels end before the window starts
                torch.cuda.synchronize()
            self._start()
        ok = False
        try:
            with torch.profiler.record_function(f"{STEP_PREFIX}{i}"):
                yield
                if self.cuda:
                    torch.cuda.synchronize()
            ok = True
        finally:
            if i == self.steps - 1 or not ok:
                self._stop(ok)

    def _start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        stack = ExitStack()
        self._prof = prof = profile(activities=activities)
        # Kineto's banners are hidden at start and stop only: the steps' own output stays
        with quiet_native_stderr():
            prof.__enter__()

        def stop() -> None:
            with quiet_native_stderr():
                prof.__exit__(None, None, None)

        stack.callback(stop)
        stack.enter_context(ModuleRanges(self.model))
        self._stack = stack

    def _stop(self, ok: bool) -> None:
        stack, self._stack = self._stack, None
        if stack is None:
            return
        stack.close()
        if ok:
            self.events = list(self._prof.events())

    def finish(self) -> None:
        """Stop a window that is still open (the run had fewer steps than it), keeping the
        steps it saw."""
        self._stop(True)

    def result(self) -> KernelBreakdown | None:
        if self.events is None:
            return None
        rows, per_step = join(self.events, self.cuda)
        return KernelBreakdown(steps=len(per_step), device=self.device, backward=self.backward,
                               short_kernel_us=SHORT_KERNEL_US, rows=rows, per_step=per_step,
                               note=None if self.cuda else CPU_NOTE)


class BoundaryWindow:
    """The window over a loop layerscope does not run (``run --kernels``): the caller reports
    each step end it sees (``boundary``); the window opens at the end of step ``skip`` and
    profiles the next ``steps`` steps, each a ``layerscope::step`` range from one step end to
    the next. The model (the module whose forwards take the batches) is known by then. A step
    still open when the loop stops (``finish``) is left out: the window covers the steps it saw
    end."""

    def __init__(self, skip: int, steps: int = DEFAULT_STEPS):
        self.skip, self.steps = skip, steps
        self.window: KernelWindow | None = None
        self.done = 0  # profiled steps ended
        self._range: Any = None  # the open step range's handle
        self._result: KernelBreakdown | None = None

    def boundary(self, ended: int, model: torch.nn.Module | None) -> None:
        """``ended`` steps have ended, here."""
        window = self.window
        if window is None:
            if ended < self.skip or model is None:
                return
            cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
            window = self.window = KernelWindow(model, "cuda" if cuda else "cpu",
                                                steps=self.steps, skip=0, backward=True)
            if cuda:  # the unprofiled steps' kernels end before the window starts
                torch.cuda.synchronize()
            window._start()
        elif self._range is not None:
            self._close()
            self.done += 1
            if self.done == self.steps:
                window._stop(True)
                return
        else:  # the window is full
            return
        self._range = torch.ops.profiler._record_function_enter_new(
            f"{STEP_PREFIX}{self.done}", None)

    def _close(self) -> None:
        assert self.window is not None
        if self.window.cuda:
            torch.cuda.synchronize()
        torch.ops.profiler._record_function_exit._RecordFunction(self._range)
        self._range = None

    def finish(self) -> None:
        """The loop stopped: a step still open is dropped, the steps ended are kept."""
        window = self.window
        if window is None or window._stack is None:
            return
        open_step = self._range is not None
        if open_step:
            self._close()
        window._stop(self.done > 0)
        if open_step and window.events is not None:
            name = f"{STEP_PREFIX}{self.done}"
            window.events = [e for e in window.events if e.name != name]

    def result(self) -> KernelBreakdown | None:
        """The joined window once it has stopped (None before, or when no step ended in it)."""
        if self._result is None and self.window is not None and self.window._stack is None:
            self._result = self.window.result()
        return self._result


def kernel_window(name: str, module: torch.nn.Module, xs, kw: dict | None, device: str,
                  steps: int = DEFAULT_STEPS, backward: bool = False) -> KernelBreakdown:
    """Profile ``steps`` steps (a forward, plus with ``backward`` the backward of the summed
    outputs w.r.t. the trainable parameters, as ``profile --backward`` times it) after one
    unprofiled step, and join the events to modules. The caller keeps the model untouched."""
    from torch.utils import _pytree as pytree

    from layerscope.core.errors import UserError, first_line

    params = [p for p in module.parameters() if p.requires_grad] if backward else []

    def step() -> None:
        with torch.set_grad_enabled(backward):
            out = module(*xs, **(kw or {}))
        if backward:
            outs = [t for t in pytree.tree_leaves(out)
                    if isinstance(t, torch.Tensor) and t.requires_grad]
            if outs and params:
                torch.autograd.grad(outs, params, [torch.ones_like(t) for t in outs],
                                    allow_unused=True)

    window = KernelWindow(module, device, steps=steps, skip=1, backward=backward)
    try:
        for _ in range(steps + 1):
            with window.step():
                step()
        result = window.result()
    except Exception as exc:
        raise UserError(f"{name} failed to run under the profiler (kernels): "
                        f"{first_line(exc, with_type=True)}") from exc
    assert result is not None  # the window ran all its steps
    return result
