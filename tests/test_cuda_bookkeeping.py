"""The CUDA bookkeeping of the phase timers, on a machine without CUDA: torch.cuda's events and
memory statistics replaced by fakes that behave as the real ones do (an event not recorded
cannot be read; the peak statistic is what max_memory_allocated returns until reset). Both
defects below were found by the GPU check (make test-gpu) on an H200."""
from __future__ import annotations

import pytest
import torch

from layerscope.training.phases import PhaseTimer


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class FakeEvent:
    """torch.cuda.Event as far as PhaseTimer uses it; time comes from the shared clock."""

    clock: FakeClock

    def __init__(self, enable_timing=True):
        self.at = None

    def record(self):
        self.at = FakeEvent.clock.t

    def elapsed_time(self, end):  # milliseconds, as torch's
        if self.at is None or end.at is None:
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        return (end.at - self.at) * 1e3


@pytest.fixture
def fake_cuda(monkeypatch):
    clock = FakeClock()
    FakeEvent.clock = clock
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    return clock


# (phases marked after data, each phase's length in seconds): the training loop marks every
# device phase, the inference loop (profile --loop) marks h2d and forward only.
CASES = [
    (("h2d", "forward", "loss", "backward", "optimizer"), (1.0, 2.0, 0.5, 3.0, 0.25)),
    (("h2d", "forward"), (1.0, 2.0)),
    (("forward",), (4.0,)),
]


@pytest.mark.parametrize("marked,lengths", CASES)
def test_phase_timer_times_the_phases_a_loop_marks(fake_cuda, marked, lengths):
    timer = PhaseTimer(cuda=True, clock=fake_cuda)
    timer.start()
    fake_cuda.t += 0.5
    timer.mark("data")
    for name, length in zip(marked, lengths):
        fake_cuda.t += length
        timer.mark(name)
    fake_cuda.t += 0.125
    phases, wall = timer.stop()
    assert wall == pytest.approx(0.5 + sum(lengths) + 0.125)
    assert phases["data"] == pytest.approx(0.5)
    for name, length in zip(marked, lengths):
        assert phases[name] == pytest.approx(length)
    assert not set(phases) - {"data", "other", *marked}  # nothing invented for unmarked phases
    assert phases["other"] == pytest.approx(0.125)
    assert sum(phases.values()) == pytest.approx(wall)


def test_phase_timer_forgets_the_last_steps_marks(fake_cuda):
    timer = PhaseTimer(cuda=True, clock=fake_cuda)
    for phase, length in (("forward", 1.0), ("h2d", 2.0)):  # two steps, one phase each
        timer.start()
        timer.mark("data")
        fake_cuda.t += length
        timer.mark(phase)
        if phase == "forward":
            timer.stop()
    phases, _ = timer.stop()
    assert phases["h2d"] == pytest.approx(2) and "forward" not in phases


def test_watch_keeps_the_runs_cuda_peak_across_the_per_phase_resets(monkeypatch):
    """watch(memory=True) resets the peak statistic at each phase end to read per-phase peaks;
    the run's peak is the largest of them, not the statistic left after the last reset."""
    from layerscope.training.watch import Watch

    stat = {"peak": 0}
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: stat["peak"])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a: stat.update(peak=0))
    w = Watch(memory=True)
    w._cuda = True
    for phase, peak in (("data", 100), ("forward", 700), ("backward", 900), ("optimizer", 300)):
        stat["peak"] = peak
        w._sample_memory(phase)
    stat["peak"] = 50
    w.cuda_used = True
    rows = {p: r["peak_cuda_bytes"] for p, r in w._mem.items()}
    assert rows == {"data": 100, "forward": 700, "backward": 900, "optimizer": 300}
    assert w.report().peak_cuda_bytes == 900
