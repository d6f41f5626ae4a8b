"""Split every training step into phases, correctly on CPU and CUDA.

CPU: the clock is read at each phase boundary. CUDA: the data wait is host time (the host is
blocked on the loader); the other phases are bounded by CUDA events recorded on the stream, read
after the one synchronisation per step at its end. ``other`` is the step's wall time minus the
phases, so the phases always sum to the measured step time. The phases are declared once, in
``core.phases.STEP_PHASES``.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from layerscope.core.phases import STEP_PHASES, shown

# a single process's phases (a data-parallel run adds its own: training.ranks), in step order
PHASES = tuple(p.name for p in STEP_PHASES if not p.distributed)
# the phases every breakdown has (the others only when some step spent time in them)
ALWAYS = tuple(p.name for p in STEP_PHASES if not p.distributed and not p.when_spent)
DEVICE_PHASES = tuple(p.name for p in STEP_PHASES if p.device)  # CUDA events bound these
# the device phases PhaseTimer's loop marks, in this order, every step
_MARKED = tuple(p.name for p in STEP_PHASES if p.device and not p.when_spent)


@dataclass
class PhaseTotals:
    """Seconds per phase summed over steps, and the steps' wall time."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    steps: int = 0
    samples: int = 0
    wall: float = 0.0

    def add(self, phases: dict[str, float], wall: float, samples: int) -> None:
        for k, v in phases.items():
            self.seconds[k] = self.seconds.get(k, 0.0) + v
        self.steps += 1
        self.samples += samples
        self.wall += wall

    def to_dict(self) -> dict:
        return {"seconds": shown(self.seconds), "steps": self.steps, "samples": self.samples,
                "wall_s": self.wall,
                "throughput_per_s": self.samples / self.wall if self.wall else None}


class PhaseTimer:
    def __init__(self, cuda: bool = False, clock: Callable[[], float] = time.perf_counter):
        self.cuda = cuda
        self.clock = clock
        self._t0 = 0.0
        self._last = 0.0
        self._host: dict[str, float] = {}
        self._events: list = []
        if cuda:
            self._events = [torch.cuda.Event(enable_timing=True)
                            for _ in range(len(_MARKED) + 1)]

    def start(self) -> None:
        """Step start: before waiting for the batch."""
        self._t0 = self._last = self.clock()
        self._host = {}

    def mark(self, phase: str) -> None:
        """End of ``phase``."""
        if phase == "data" or not self.cuda:
            now = self.clock()
            self._host[phase] = now - self._last
            self._last = now
            if phase == "data" and self.cuda:
                self._events[0].record()
        else:
            self._events[_MARKED.index(phase) + 1].record()

    def stop(self) -> tuple[dict[str, float], float]:
        """Step end: one synchronisation on CUDA; returns (phase seconds, step wall time)."""
        if self.cuda:
            torch.cuda.synchronize()
        wall = self.clock() - self._t0
        phases = dict(self._host)
        if self.cuda:
            for i, name in enumerate(_MARKED):
                phases[name] = self._events[i].elapsed_time(self._events[i + 1]) / 1e3
        phases["other"] = wall - sum(phases.get(p, 0.0) for p in PHASES if p != "other")
        return phases, wall
