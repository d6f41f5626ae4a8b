"""What fits a memory budget: the largest batch size (or sequence length) whose peak is at most
``budget`` bytes, given ``peak(n)``, the static peak at size n (``layerscope.memory --fit``;
``memory_usage`` gives the traces, this module only solves).

Batch: with every other shape fixed, a step's memory is affine in the batch size (what is
resident does not grow with it; every activation and temporary does, by the same factor), so two
traces, at 1 and 2, give the line a + b n and the largest n with a + b n <= budget. The answer is
then checked with traces at n and n + 1: where the peak moves between phases as the batch grows
(the weights' phase at small batches, backward at large ones) the line of 1 and 2 is not the line
at n, and the check disagrees; the answer is then searched with traces (bisection between the
largest size seen to fit and the smallest seen not to), and a note says so.

Sequence length: attention's seq x seq tensors make memory quadratic in it, so it is searched
with traces (bisection) from the start, up to the model's position table.

Both assume that the peak does not fall as the size grows (a larger batch or sequence never needs
less memory), which holds for the models' tensors themselves; the search finds the largest
fitting size under that assumption."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from layerscope.core.errors import UserError

AFFINE, BISECTION = "affine", "bisection"
SEARCH_CAP = 2 ** 40  # no batch is searched beyond this (a peak that does not grow with size)


@dataclass
class Solved:
    """The largest fitting size, the peaks at it and at the next size (None: the next is past
    the cap), the method and what the solver has to say."""

    size: int
    bytes_at_max: int
    bytes_at_next: int | None
    method: str
    notes: list[str] = field(default_factory=list)


class _Peaks:
    """``peak(n)`` once per n."""

    def __init__(self, peak: Callable[[int], int], known: dict[int, int] | None = None):
        self.peak, self.seen = peak, dict(known or {})

    def __call__(self, n: int) -> int:
        if n not in self.seen:
            self.seen[n] = self.peak(n)
        return self.seen[n]


def _search(peaks: _Peaks, budget: int, lo: int, hi: int | None,
            cap: int) -> tuple[int, int | None]:
    """The largest n in [lo, cap] with peaks(n) <= budget, given peaks(lo) <= budget and (hi not
    None) peaks(hi) > budget: doubling until a size does not fit (or the cap), then bisection.
    Returns (n, the smallest size seen not to fit or None)."""
    while hi is None:
        step = min(max(2 * lo, lo + 1), cap)
        if step == lo:
            return lo, None
        if peaks(step) > budget:
            hi = step
        else:
            lo = step
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if peaks(mid) <= budget:
            lo = mid
        else:
            hi = mid
    return lo, hi


def _too_small(what: str, first: int, need: int, budget: int) -> UserError:
    return UserError(f"fit: {what} {first} already needs {need:,} bytes, more than the budget of "
                     f"{budget:,} bytes: give at least {need:,} bytes (or a smaller model or "
                     "input)", arguments="fit")


def largest_batch(peak: Callable[[int], int], budget: int,
                  known: dict[int, int] | None = None) -> Solved:
    """The largest batch size whose ``peak`` is at most ``budget``: the affine rule from batches
    1 and 2, checked at the answer and the next size; bisection where the check disagrees.
    ``known``: peaks already traced (size -> bytes). A budget below batch 1's peak is refused
    with one line giving what batch 1 needs."""
    peaks = _Peaks(peak, known)
    one = peaks(1)
    if one > budget:
        raise _too_small("batch size", 1, one, budget)
    slope = peaks(2) - one
    if slope <= 0:
        size, nxt = _search(peaks, budget, 1, None, SEARCH_CAP)
        return Solved(size, peaks(size), None if nxt is None else peaks(nxt), BISECTION,
                      [f"the peak did not grow from batch 1 to 2 ({one:,} -> {peaks(2):,} "
                       "bytes): no line to solve; searched with static traces (doubling, then "
                       "bisection)" + (f", up to {SEARCH_CAP:,} (2**40), the largest size "
                                       "searched" if nxt is None else "")])
    guess = 1 + (budget - one) // slope
    if guess >= SEARCH_CAP:  # the line reaches past the cap: say so, search no further
        return Solved(SEARCH_CAP, peaks(SEARCH_CAP), None, AFFINE,
                      [f"affine in the batch size: {one:,} + {slope:,} x (batch - 1) bytes "
                       f"(static traces at 1 and 2) fits {guess:,}; the answer stops at "
                       f"{SEARCH_CAP:,} (2**40), the largest size searched"])
    at, after = peaks(guess), peaks(guess + 1)
    if at <= budget < after:
        return Solved(guess, at, after, AFFINE,
                      [f"affine in the batch size: {one:,} + {slope:,} x (batch - 1) bytes "
                       "(static traces at 1 and 2), checked with traces at the answer and the "
                       "next size"])
    lo = max(n for n, b in peaks.seen.items() if b <= budget)
    hi = min((n for n, b in peaks.seen.items() if b > budget and n > lo), default=None)
    size, nxt = _search(peaks, budget, lo, hi, SEARCH_CAP)
    return Solved(size, peaks(size), None if nxt is None else peaks(nxt), BISECTION,
                  [f"the line through batches 1 and 2 ({one:,} + {slope:,} x (batch - 1) bytes) "
                   f"predicted {guess:,}, but the traces there disagree ({at:,} bytes at "
                   f"{guess:,}, {after:,} at {guess + 1:,}): the peak moves to another instant "
                   "of the step (another phase or op) as the batch grows; searched with static "
                   "traces (bisection) instead"])


def largest_seq(peak: Callable[[int], int], budget: int, cap: int | None,
                known: dict[int, int] | None = None) -> Solved:
    """The longest sequence whose ``peak`` is at most ``budget``, up to ``cap`` (the model's
    position table; None: no table), by bisection with traces (attention's seq x seq tensors
    make memory quadratic in it, so no line is assumed). ``known``: peaks already traced; the
    search starts from the longest of them that fits (doubling from there) or below the
    shortest that does not."""
    peaks = _Peaks(peak, known)
    fitting = [n for n, b in peaks.seen.items() if b <= budget]
    if not fitting:
        one = peaks(1)
        if one > budget:
            raise _too_small("sequence length", 1, one, budget)
        fitting = [1]
    lo = max(fitting)
    hi = min((n for n, b in peaks.seen.items() if b > budget and n > lo), default=None)
    size, nxt = _search(peaks, budget, lo, hi, cap or SEARCH_CAP)
    notes = ["searched with static traces (doubling, then bisection): attention makes memory "
             "grow faster than linearly in the sequence length"]
    if nxt is None and cap:
        notes.append(f"the model's whole position table ({cap:,}) fits")
    return Solved(size, peaks(size), None if nxt is None else peaks(nxt), BISECTION, notes)
