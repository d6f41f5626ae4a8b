"""The profiler ranges of a watched run: the kernel window (``watch(kernels=True)``, ``run
--kernels``) and NVTX ranges (``watch(nvtx=True)``, ``run --nvtx``).

``kernels``: torch.profiler over three steps after the warm-up (at least one), joined to the
model's modules (``analysis.kernels.BoundaryWindow``); the window moves at step ends, and its
own work (the profiler's start, its stop and the processing of its events) is no step's.
``nvtx``: with CUDA, a range per step, per phase and (once the model is known) per module, as
``train --nvtx`` names them.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class ProfilerRanges:
    """The kernel window and the NVTX ranges of one run (``skip``: the steps before the
    window opens)."""

    def __init__(self, kernels: bool, nvtx: bool, skip: int):
        self.kernels, self.nvtx, self.skip = kernels, nvtx, skip
        self.window: Any = None  # kernels: the BoundaryWindow
        self.nvtx_on = False  # nvtx and CUDA here
        self.modules: Any = None  # nvtx: the model's module ranges, once it is known
        self.step: int | None = None  # the open step range

    def start(self) -> None:
        from layerscope.analysis.nvtx import available

        if self.kernels:
            from layerscope.analysis.kernels import BoundaryWindow

            self.window = BoundaryWindow(skip=self.skip)
        self.nvtx_on = self.nvtx and available()

    def stop(self, open_phases: int) -> None:
        """The window finishes; every NVTX range left open (the step and the ``open_phases``
        phases in progress at the stop) is closed."""
        if self.window is not None:
            self.window.finish()
        if not self.nvtx_on:
            return
        for _ in range(open_phases):
            torch.cuda.nvtx.range_pop()
        if self.step is not None:
            torch.cuda.nvtx.range_end(self.step)
            self.step = None
        if self.modules is not None:
            self.modules.__exit__(None, None, None)
            self.modules = None
        self.nvtx_on = False

    # ---- NVTX around steps and phases ---------------------------------------------------
    def push(self, phase: str) -> None:
        if self.nvtx_on:
            torch.cuda.nvtx.range_push(f"layerscope::{phase}")

    def pop(self) -> None:
        if self.nvtx_on:
            torch.cuda.nvtx.range_pop()

    def step_start(self) -> None:
        if self.nvtx_on:  # a start/end range: steps end inside phases (it need not nest)
            self.step = torch.cuda.nvtx.range_start("layerscope::step")

    def step_end(self) -> None:
        if self.step is not None:
            torch.cuda.nvtx.range_end(self.step)
            self.step = None

    # ---- at step ends ---------------------------------------------------------------
    def wants_model(self) -> bool:
        """Whether ``at_step_end`` needs the model (a window, or NVTX module ranges)."""
        return self.window is not None or self.nvtx_on

    def at_step_end(self, steps: int, model: torch.nn.Module | None,
                    clock: Callable[[], float]) -> tuple[float, dict[str, Any] | None]:
        """``steps`` steps are done: the window moves on; the module ranges start once the
        model is known (hooks are added here, never inside a module call's hooks). Returns
        the seconds the window's work took (no step's) and, where it started or stopped the
        profiler, that one-time cost's row."""
        window, spent, row = self.window, 0.0, None
        if window is not None:
            t0 = clock()
            was_open, done = window.window is not None, window.done
            window.boundary(steps, model)
            spent = clock() - t0
            if window.window is not None and not was_open:
                row = {"what": "profiler start", "seconds": spent, "step": steps}
            elif window.done == window.steps and done < window.steps:
                row = {"what": "profiler stop and export", "seconds": spent, "step": steps}
        if self.nvtx_on and self.modules is None and model is not None:
            from layerscope.analysis.nvtx import NvtxRanges

            self.modules = NvtxRanges(model)
            self.modules.__enter__()
        return spent, row

    # ---- the result -----------------------------------------------------------------
    def result(self) -> Any:
        """The kernels section (None without a window, or before it filled)."""
        return self.window.result() if self.window is not None else None

    def notes(self, done: int, opt_seen: bool, step_on: str) -> list[str]:
        """What kernels and nvtx did not cover: a window the script ended before filling (or
        before it opened), NVTX without CUDA."""
        from layerscope.analysis.nvtx import NO_CUDA_NOTE, available

        notes = []
        window = self.window
        if window is not None:
            result = window.result()
            if result is None and done > window.skip and not opt_seen \
                    and step_on == "optimizer":
                # the window moves at the step ends an optimizer step (or mark_step) makes;
                # steps that end at backward passes only while no optimizer is seen are
                # provisional (an accumulation's micro-steps until the first optimizer step)
                notes.append("--kernels: no optimizer.step() was seen, and the kernel window "
                             "opens at the step ends an optimizer step marks: no kernels "
                             "section; use --step-on backward (steps end where a backward() "
                             "returns)")
            elif result is None:
                notes.append(f"--kernels: the script ended after {done} step"
                             f"{'s' if done != 1 else ''}, before the kernel window opened (it "
                             f"opens at the end of step {window.skip}): no kernels section")
            elif result.steps < window.steps:
                notes.append(f"--kernels: the script ended {result.steps} step"
                             f"{'s' if result.steps != 1 else ''} into the kernel window: the "
                             f"kernels section covers {result.steps} of {window.steps} steps")
        if self.nvtx and not available():
            notes.append(NO_CUDA_NOTE)
        return notes
