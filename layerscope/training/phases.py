"""Split every training step into phases, correctly on CPU and CUDA.

CPU: the clock is read at each phase boundary. CUDA: the data wait is host time (the host is
blocked on the loader); the other phases are bounded by CUDA events recorded on the stream, read
after the one synchronisation per step at its end. ``other`` is the step's wall time minus the
phases, so the phases always sum to the measured step time. The phases are declared once, in
``core.phases.STEP_PHASES``.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from layerscope.core.phases import STEP_PHASES, shown

# a single process's phases (a data-parallel run adds its own: training.ranks), in step order
PHASES = tuple(p.name for p in STEP_PHASES if not p.distributed)
# the phases every breakdown has (the others only when some step spent time in them)
ALWAYS = tuple(p.name for p in STEP_PHASES if not p.distributed and not p.when_spent)
DEVICE_PHASES = tuple(p.name for p in STEP_PHASES if p.device)  # CUDA events bound these


# a first step this many times the others' median forward+backward, and this many seconds
# above it, is a one-time cost (``transient_steps``); it needs this many other steps to compare
FIRST_STEP_FACTOR = 10.0
FIRST_STEP_EXCESS_S = 1.0
FIRST_STEP_OTHERS = 3


def transient_steps(compile_s: Sequence[float], compute_s: Sequence[float],
                    first: int) -> dict[int, str]:
    """The steps from index ``first`` on (those after the warm-up) to keep out of the measured
    ones, each with its cause, from facts per step: ``compile_s`` (the seconds torch._dynamo
    spent compiling in it) and ``compute_s`` (its forward + backward seconds).

    - "compile": dynamo compiled in the step;
    - "first step": where dynamo compiled in no step, the first one when its forward +
      backward is over ``FIRST_STEP_FACTOR`` x the median of the others' (at least
      ``FIRST_STEP_OTHERS`` of them) and ``FIRST_STEP_EXCESS_S`` above it: a one-time cost
      (a compiler dynamo does not count, lazy initialisation, autotuning); a slow data wait is
      not one (the loader's start-up is the data verdict's).

    Nothing is left out when every step would be (each step recompiled: none is steady)."""
    steps = range(first, len(compile_s))
    out = {i: "compile" for i in steps if compile_s[i] > 0}
    others = list(compute_s[first + 1:])
    if not out and len(others) >= FIRST_STEP_OTHERS and first < len(compute_s):
        median = statistics.median(others)
        head = compute_s[first]
        if head > FIRST_STEP_FACTOR * median and head - median > FIRST_STEP_EXCESS_S:
            out[first] = "first step"
    return {} if len(out) == len(steps) else out


@dataclass
class PhaseTotals:
    """Seconds per phase summed over steps, and the steps' wall time."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    steps: int = 0
    samples: int = 0
    wall: float = 0.0
    tokens: int = 0  # language models: B x T of the token-id inputs (0: none seen)

    def add(self, phases: dict[str, float], wall: float, samples: int, tokens: int = 0) -> None:
        for k, v in phases.items():
            self.seconds[k] = self.seconds.get(k, 0.0) + v
        self.steps += 1
        self.samples += samples
        self.tokens += tokens
        self.wall += wall

    def to_dict(self) -> dict:
        """``tokens`` and ``tokens_per_s`` only where token ids were seen."""
        # no sample seen (a batch of no tensor, a loop without batches): no throughput, not 0
        out = {"seconds": shown(self.seconds), "steps": self.steps, "samples": self.samples,
               "wall_s": self.wall,
               "throughput_per_s": self.samples / self.wall if self.wall and self.samples
               else None}
        if self.tokens:
            out.update(tokens=self.tokens,
                       tokens_per_s=self.tokens / self.wall if self.wall else None)
        return out


class PhaseTimer:
    def __init__(self, cuda: bool = False, clock: Callable[[], float] = time.perf_counter):
        self.cuda = cuda
        self.clock = clock
        self._t0 = 0.0
        self._last = 0.0
        self._host: dict[str, float] = {}
        self._events: list = []
        self._marked: list[str] = []  # the device phases marked this step, in order
        if cuda:
            import torch  # (lazily: the totals and transient_steps need no torch)

            self._events = [torch.cuda.Event(enable_timing=True)
                            for _ in range(len(DEVICE_PHASES) + 1)]

    def start(self) -> None:
        """Step start: before waiting for the batch."""
        self._t0 = self._last = self.clock()
        self._host = {}
        self._marked = []

    def mark(self, phase: str) -> None:
        """End of ``phase``."""
        if phase == "data" or not self.cuda:
            now = self.clock()
            self._host[phase] = now - self._last
            self._last = now
            if phase == "data" and self.cuda:
                self._events[0].record()
        else:
            self._events[DEVICE_PHASES.index(phase) + 1].record()
            self._marked.append(phase)

    def stop(self) -> tuple[dict[str, float], float]:
        """Step end: one synchronisation on CUDA; returns (phase seconds, step wall time)."""
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        wall = self.clock() - self._t0
        phases = dict(self._host)
        if self.cuda:
            # Each marked phase runs from the previous mark (the data mark first) to its own:
            # a loop that marks only some phases (inference: no loss, backward or optimizer)
            # times those, and a phase never marked has no event to read.
            prev = self._events[0]
            for name in self._marked:
                end = self._events[DEVICE_PHASES.index(name) + 1]
                phases[name] = prev.elapsed_time(end) / 1e3
                prev = end
        phases["other"] = wall - sum(phases.get(p, 0.0) for p in PHASES if p != "other")
        return phases, wall
