"""What a rule is: a declaration (name, the result kinds and facts it reads, its prediction
formula in words) and a pure check from the facts (advice/facts.py) to a ``Finding`` or None.

Gains are fractions of the step time saved (1 - new / old). Amdahl's law gives them: a part
taking a share ``f`` of the step made ``s`` times faster saves ``f * (1 - 1/s)``; a rule states
the range of ``s`` it assumes, and its ``derivation`` writes the arithmetic with the measured
numbers in it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Facts = dict[str, Any]


@dataclass(frozen=True)
class Finding:
    """What a rule says when it fires."""

    cause: str
    change: str
    low: float
    high: float
    derivation: str
    facts: dict[str, Any]
    variant: str | None = None  # the ablate variant that tests the change
    threads: int | None = None  # or: the thread count that tests it (ablate --threads)
    command: str | None = None  # a command of its own (else built from variant / threads)


@dataclass(frozen=True)
class Rule:
    name: str
    reads: tuple[str, ...]  # the facts it reads (the docs' rule table)
    formula: str  # its prediction, in words
    check: Callable[[Facts], Finding | None]


def amdahl(share: float, speedup: float) -> float:
    """Time saved when a part taking ``share`` of the time gets ``speedup`` times faster."""
    return share * (1.0 - 1.0 / speedup)


def amdahl_range(share: float, speedups: tuple[float, float], what: str
                 ) -> tuple[float, float, str]:
    """(low, high, derivation) of ``amdahl`` over a range of speed-ups of ``what``."""
    lo_s, hi_s = speedups
    low, high = amdahl(share, lo_s), amdahl(share, hi_s)
    text = (f"{what} share f = {share:.3f}; speed-up s = {lo_s:g}..{hi_s:g}; gain = f x (1 - 1/s)"
            f" = {share:.3f} x {1 - 1 / lo_s:.3f} .. {share:.3f} x {1 - 1 / hi_s:.3f}"
            f" = {low:.3f} .. {high:.3f}")
    return low, high, text


def pick(facts: Facts, *names: str) -> dict[str, Any]:
    """The named facts (those present), for a finding's record."""
    return {n: facts[n] for n in names if facts.get(n) is not None}
