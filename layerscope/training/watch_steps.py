"""The phase stack and the step boundaries of ``training.watch.Watch``.

Phases nest (Lightning and closure optimizers run forward and backward *inside*
``optimizer.step``; a model may copy to the device inside its forward): a stack keeps exclusive
time, so ``optimizer`` is the time in ``step()`` minus what ran nested in it. A step ends at an
optimizer step (the optimizers of one iteration grouped into one step: ``_group_step``), at a
backward pass (``step_on="backward"``, or the fallback while no optimizer steps) or at
``mark_step()``; each completed step is recorded in the step ledger
(``training.step_ledger.StepLedger``). On CUDA (once the script has initialised it) the device
phases are bounded by CUDA events recorded at every phase change and read after one
synchronisation per step, as ``training.phases.PhaseTimer`` does; ``data`` stays host time.

``StepClock`` is a part of ``Watch`` (its state is the Watch's, set in ``Watch._reset``).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from layerscope.training.distributed import process_group
from layerscope.training.phases import DEVICE_PHASES, PHASES

EVAL = "eval"  # the stack's name for no-grad forwards and batches: left out of the steps


class StepLimit(BaseException):
    """Raised from the optimizer hook once ``steps`` steps are done (and no ``on_stop`` was
    given): a BaseException, so the script's ``except Exception`` does not swallow it. The
    ``with`` block of the Watch ends there (its exit swallows it), and a thread it ends
    ends quietly."""


def quiet_step_limit(hook: Callable[[Any], None]) -> Callable[[Any], None]:
    """``threading.excepthook`` that lets a thread the step limit ended end quietly (a
    training loop run in a thread): python would print its traceback."""
    def excepthook(args: Any) -> None:
        if not issubclass(args.exc_type, StepLimit):
            hook(args)
    excepthook.__wrapped__ = hook  # type: ignore[attr-defined]
    return excepthook


class StepClock:
    """The phase stack and the step boundaries (a part of ``Watch``)."""

    # ---- the phase stack ----------------------------------------------------------
    def _enter(self, phase: str) -> None:
        now = self.clock()
        stack = self._stack
        if phase != EVAL and self._t0 is None:
            self._begin(now)
        if stack:
            top = stack[-1]
            self._add(top[0], top[1], now)
        stack.append([phase, now])
        self._ranges.push(phase)
        if self._cuda:
            self._mark(phase)

    def _exit(self, phase: str) -> None:
        now = self.clock()
        stack = self._stack
        while stack:  # a phase left open by an exception is closed with its parent
            top = stack.pop()
            self._ranges.pop()
            self._add(top[0], top[1], now)
            if top[0] == phase:
                break
        if stack:
            stack[-1][1] = now
        if self._cuda:
            self._mark(stack[-1][0] if stack else "other")
        if self.memory:
            self._sample_memory(phase)

    def _add(self, phase: str, t0: float, t1: float) -> None:
        if phase == EVAL:
            self.eval_seconds += t1 - t0
            if self._t0 is not None:
                self._eval_in_step += t1 - t0
            return
        self._acc[phase] = self._acc.get(phase, 0.0) + (t1 - t0)
        if self.trace:
            self.intervals.append((phase, t0, t1))

    def _begin(self, now: float) -> None:
        self._t0 = now
        self._ranges.step_start()
        self._gen += 1
        self._opt_step = {}
        self._opt_in = []
        self._compile0 = self.compile_clock()
        self._acc = {}
        self._eval_in_step = 0.0
        self._samples = self._tokens = 0
        # CUDA timing once the script has initialised CUDA itself (never initialise it here)
        self._cuda = self._cuda_here and torch.cuda.is_initialized()
        if self._cuda:
            self.cuda_used = True
            self._marks = []
            self._mark(self._stack[-1][0] if self._stack else "other")
        if self.memory and self._cuda:  # per phase peaks start from here
            torch.cuda.reset_peak_memory_stats()

    def _mark(self, phase: str) -> None:
        i = len(self._marks)
        if i == len(self._events):
            self._events.append(torch.cuda.Event(enable_timing=True))
        self._events[i].record()
        self._marks.append((i, phase))

    def _sample_memory(self, phase: str) -> None:
        self._memory.sample(phase, self._cuda)

    # ---- step ends ------------------------------------------------------------------
    def _step_phases(self, now: float) -> tuple[dict[str, float], float, float]:
        """The open step's seconds per phase (``other`` the rest of its wall time), its end
        (``now``; on CUDA: after its synchronisation) and its wall time."""
        stack = self._stack
        phases = dict.fromkeys(PHASES, 0.0)
        for k, v in self._acc.items():
            phases[k] = phases.get(k, 0.0) + v
        if self._cuda:
            self._mark(stack[-1][0] if stack else "other")
            torch.cuda.synchronize()
            now = self.clock()
            device = dict.fromkeys(DEVICE_PHASES, 0.0)
            for (i, phase), (j, _) in zip(self._marks, self._marks[1:]):
                if phase in device:
                    device[phase] += self._events[i].elapsed_time(self._events[j]) / 1e3
            phases.update(device)
        wall = now - self._t0 - self._eval_in_step
        named = 0.0
        for v in phases.values():
            named += v
        phases["other"] = wall - (named - phases["other"])
        return phases, now, wall

    def _close_step(self) -> None:
        """End the step open now: its phases, wall time and the totals."""
        if self._t0 is None:
            return
        now = self.clock()
        stack = self._stack
        if stack:  # a step ended inside a phase (mark_step in a forward): count it up to now
            self._add(stack[-1][0], stack[-1][1], now)
            stack[-1][1] = now
        phases, now, wall = self._step_phases(now)
        self.step_threads = torch.get_num_threads()
        self._seen.end_step()
        if self._sample_module is None:  # no module forward seen: the batches fetched count
            while self._fetched:
                samples, tokens = self._fetched.popleft()
                self._samples += samples
                self._tokens += tokens
        fwd, bwd = self._layers.take_step()
        self.ledger.record(wall, phases, self._samples, self._tokens,
                           optimizers=self._opt_step, order=tuple(self._opt_in),
                           compile_s=max(self.compile_clock() - self._compile0, 0.0),
                           fwd=fwd, bwd=bwd, span=(self._t0, now))
        if self.process_group is None:
            self.process_group = process_group()
        self._ranges.step_end()
        self._begin(now)

    def _group_step(self, i: int) -> None:
        """Where optimizer ``i``'s step (just returned) falls among the steps. Each optimizer
        step closes a part; the parts are grouped into steps:

        - in the first iteration each optimizer's step ends the step at once (one optimizer:
          every step ends there) and a different one merges into it (a GAN's D, then G); the
          first one again fixes the iteration (``cycle``: the optimizers of the step before);
        - then the iteration's last optimizer ends a step, merging the parts closed since the
          last step ended; any other one (the iteration's others, one outside it stepping
          between iterations) closes a part that waits for it (``pending``);
        - an optimizer that steps again before the others end a step ends its own: the parts
          closed since the last step ended are one step. One outside the iteration that steps
          again alone becomes the iteration (optimizers that train one after another: layer
          0's Adam 30 times, then layer 1's)."""
        ledger = self.ledger
        if i in ledger.pending:  # steps again before the others ended the step
            if ledger.pending == [i] and ledger.cycle is not None and i not in ledger.cycle:
                ledger.cycle = [i]
            self._end_parts()
        ended = ledger.steps
        self._close_step()
        ledger.pending.append(i)
        cycle = ledger.cycle
        if cycle is None:  # the first iteration (no part waits: each ended or merged)
            before = ledger.opts_of[ended - 1] if ended else ()
            if before and i not in before:  # another optimizer of the first iteration
                ledger.pending = []
                ledger.merge_last(2)
                return
            if not before:  # the first optimizer step of all
                self._end_parts()
                return
            cycle = ledger.cycle = list(before)
        if i == cycle[-1]:
            self._end_parts()

    def _end_parts(self) -> None:
        """The parts closed since the last step ended (and the backward passes before the
        first optimizer step) are one step, which ends here."""
        self.ledger.end_parts()
        self._at_step_end()
        self._check_limit()

    def _at_step_end(self) -> None:
        """kernels/nvtx at a step's end (``ProfilerRanges.at_step_end``). The window's own work
        (the profiler's start, its stop and the processing of its events) is no step's: the
        step that just began starts after it, and its start and stop are rows of their own
        (``transient_rows``)."""
        ranges = self._ranges
        model = self._seen.model() or self._sample_model if ranges.wants_model() else None
        spent, row = ranges.at_step_end(self.steps, model, self.clock)
        if ranges.window is not None and self._t0 is not None:
            self._t0 += spent  # the step open now starts after the window's work
            if self._stack:
                self._stack[-1][1] += spent
        if row is not None:
            self.ledger.profiler_rows.append(row)

    def _backward_done(self) -> None:
        """An outermost ``backward()`` returned: the end of a step when steps are on backward
        passes, and, until an optimizer step is seen, the end of a provisional one (merged
        into the first optimizer step if one comes)."""
        self._backwards += 1
        if self.step_on == "backward":
            self.mark_step()
        elif (self.fallback and not (self.ledger.opt_seen or self._marked)
              and self._t0 is not None):
            self._close_step()
            self.ledger.provisional += 1

    def mark_step(self) -> None:
        """End the current step here (loops without a ``torch.optim`` optimizer call this once
        per step; with one, the optimizer's step does it)."""
        if not self._running:  # the Watch has stopped: nothing more is measured
            return
        self._marked = True
        if self._t0 is None:
            self._begin(self.clock())
            return
        self._end_step()

    def _end_step(self) -> None:
        """``mark_step()`` ends the step open now. The parts closed before it that ended no
        step (backward passes before the first optimizer step: gradient accumulation) were
        parts of this one: one step from the first event to here."""
        self._close_step()
        self.ledger.provisional += 1
        self._end_parts()

    def _check_limit(self) -> None:
        done = self.steps
        if self.limit is not None and done >= self.limit:
            if self.on_stop is not None:
                self.on_stop(self)
            else:
                raise StepLimit(f"{done} steps done")
