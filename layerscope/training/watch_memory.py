"""The memory side of a watched run: peak memory per phase (``watch(memory=True)``, ``run
--memory``) and the memory limit (``watch(memory_limit=...)``, ``run --memory-limit``).

Per phase: the peak RSS and, on CUDA, the peak allocated bytes, read at each phase's end (the
device's peak statistic is reset there, so the run's own peak is kept apart). The limit: every
tensor storage of the run counted against it (``analysis.memory_limit.LimitGuard``); an
allocation above it raises ``torch.OutOfMemoryError``, and the post-mortem of the error the run
ended with says what was alive (without a limit, a real out-of-memory error still says what
failed and where).
"""
from __future__ import annotations

import os
import resource
from collections.abc import Callable
from typing import Any

import torch

from layerscope.analysis.memory_limit import LimitGuard
from layerscope.analysis.memory_oom import caught_note, untracked_post_mortem


def current_rss() -> int:
    """The process's resident set size now (its peak where /proc is missing)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class MemoryGuard:
    """Per-phase peaks (``rows``: phase -> {"peak_rss_bytes", "peak_cuda_bytes"}) and the
    memory limit's guard (``limit``: bytes, or None for no limit)."""

    def __init__(self, limit: int | None = None):
        self.limit = limit
        self.guard: LimitGuard | None = None
        self.rows: dict[str, dict[str, int]] = {}
        self.cuda_peak = 0  # the run's CUDA peak across the per-phase resets

    def sample(self, phase: str, cuda: bool) -> None:
        """The peaks of the phase that just ended (``cuda``: CUDA timing is on)."""
        row = self.rows.setdefault(phase, {"peak_rss_bytes": 0})
        row["peak_rss_bytes"] = max(row["peak_rss_bytes"], current_rss())
        if cuda:
            peak = torch.cuda.max_memory_allocated()
            row["peak_cuda_bytes"] = max(row.get("peak_cuda_bytes", 0), peak)
            # the per-phase peaks reset the device's statistic: the run's peak is kept here
            self.cuda_peak = max(self.cuda_peak, peak)
            torch.cuda.reset_peak_memory_stats()

    def run_cuda_peak(self) -> int:
        """The run's peak allocated CUDA bytes (the per-phase resets' and the one left now)."""
        return max(self.cuda_peak, torch.cuda.max_memory_allocated())

    def start(self, undo: Callable[[Callable[[], None]], None]) -> None:
        """With a limit: the guard starts, its end queued through ``undo``."""
        if self.limit is None:
            return
        guard = self.guard = LimitGuard(self.limit)
        guard.__enter__()
        undo(lambda: guard.__exit__(None, None, None))

    def post_mortem(self, exc: BaseException | None) -> dict[str, Any] | None:
        """What the run's out-of-memory error (if ``exc`` is one) found alive: the live set by
        module and kind with a limit; without one, what failed and where."""
        return (self.guard.post_mortem_of(exc) if self.guard is not None
                else untracked_post_mortem(exc))

    def notes(self, post_mortem: dict[str, Any] | None) -> list[str]:
        """The allocations the limit refused that the script caught (and ran on)."""
        if self.guard is None:
            return []
        return [caught_note(pm) for pm in self.guard.caught(post_mortem)]
