"""What a rule is: a declaration (name, its preconditions, the facts it reads, its prediction
formula in words) and a pure check from the facts (advice/facts.py) to a ``Finding``.

A rule's preconditions (``Need``) are checks on the facts, made in order before its check: one
that fails makes the rule silent (it does not apply: no convolution, no data wait) or, where a
user would expect to hear why, says "cannot judge: REASON" (``CannotJudge``: the fact it needs
is missing or contradicts itself). Every finding carries the facts its rule read
(``Rule.apply``): those of its preconditions and of its prediction.

Gains are fractions of the step time saved (1 - new / old). Amdahl's law gives them: a part
taking a share ``f`` of the step made ``s`` times faster saves ``f * (1 - 1/s)``; a rule states
the range of ``s`` it assumes, and its ``derivation`` writes the arithmetic with the measured
numbers in it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
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
    facts: dict[str, Any] = field(default_factory=dict)  # more than the rule's reads
    variant: str | None = None  # the ablate variant that tests the change
    threads: int | None = None  # or: the thread count that tests it (ablate --threads)
    # a command of its own, as its argument list (else built from variant / threads): each
    # value from the result (its model) one item, never text a shell or parser splits
    command: tuple[str, ...] | None = None
    after: str | None = None  # what to do around that command, in words (not run then)


@dataclass(frozen=True)
class Outcome:
    """What ``--verify`` measured for one finding, for a rule's ``explain``: the facts the
    prediction read, the predicted range, the measured gain and the milliseconds per step of
    each phase in the baseline and the changed run (empty when the command gives no phases, as
    a sweep's)."""

    facts: Facts
    low: float
    high: float
    gain: float
    base_ms: dict[str, float]
    new_ms: dict[str, float]
    variant: str | None = None
    threads: int | None = None


def moved(outcome: Outcome, *, leave_out: tuple[str, ...] = ()) -> str:
    """The phases whose time per step changed the most, "forward 3.0 -> 2.1 ms, ...", those in
    ``leave_out`` left out ("" when no phases were measured)."""
    names = [p for p in dict.fromkeys([*outcome.base_ms, *outcome.new_ms]) if p not in leave_out]
    names.sort(key=lambda p: -abs(outcome.new_ms.get(p, 0.0) - outcome.base_ms.get(p, 0.0)))
    return ", ".join(f"{p} {outcome.base_ms.get(p, 0.0):.1f} -> {outcome.new_ms.get(p, 0.0):.1f}"
                     " ms" for p in names[:3])


def rest_ms(ms: dict[str, float], *parts: str) -> float:
    """Milliseconds per step outside ``parts``."""
    return sum(v for p, v in ms.items() if p not in parts)


def amdahl_why(outcome: Outcome) -> str:
    """The fallback explanation of a gain outside the predicted range: the prediction is
    Amdahl's law over the measured share (that part faster, everything else unchanged), and
    the phases show what else changed."""
    side = "above" if outcome.gain > outcome.high else "below"
    text = (f"the measured gain {outcome.gain:.3f} is {side} the predicted "
            f"{outcome.low:.3f} .. {outcome.high:.3f}, which assumes Amdahl's law over the "
            "measured share: only that part of the step changes, the rest stays as it was")
    phases = moved(outcome)
    return text + (f"; per step: {phases}" if phases else "")


@dataclass(frozen=True)
class CannotJudge:
    """What a rule says when a fact it needs is missing or contradicts itself: the reason and
    the facts it read to find that out."""

    reason: str
    facts: dict[str, Any]


@dataclass(frozen=True)
class Need:
    """A precondition: what it asks of the facts, in words (the docs' rule table), the facts
    it reads and its test, None when the facts meet it, else why not. ``judge``: a failed test
    is said ("cannot judge: why"); otherwise the rule just does not apply."""

    text: str
    reads: tuple[str, ...]
    test: Callable[[Facts], str | None]
    judge: bool = False


@dataclass(frozen=True)
class Rule:
    name: str
    reads: tuple[str, ...]  # the facts its prediction reads (keys of advice/facts.py)
    formula: str  # its prediction, in words
    check: Callable[[Facts], Finding | None]
    # its preconditions, checked in order before ``check``
    needs: tuple[Need, ...] = ()
    # the edit to the user's own code that makes the change, when no option of layerscope run
    # can (a watched script's advice says it instead of running it)
    edit: str | None = None
    # why a measured gain fell outside the predicted range, in the measured numbers
    # (default: ``amdahl_why``)
    explain: Callable[[Outcome], str] | None = None
    # the ``layerscope sweep`` options whose second cell makes the change to a model given by
    # name (a profile or sweep result is verified so), when sweep has them
    sweep: str | None = None

    def why(self, outcome: Outcome) -> str:
        return (self.explain or amdahl_why)(outcome)

    def read(self) -> tuple[str, ...]:
        """Every fact the rule reads: its preconditions', then its prediction's."""
        return tuple(dict.fromkeys([n for need in self.needs for n in need.reads]
                                   + list(self.reads)))

    def apply(self, facts: Facts) -> Finding | CannotJudge | None:
        """The preconditions in order, then the check: a finding with every fact the rule
        read (those the result holds), a ``CannotJudge`` or None (the rule does not apply)."""
        seen: list[str] = []
        for need in self.needs:
            seen += need.reads
            why = need.test(facts)
            if why is not None:
                return CannotJudge(why, pick(facts, *seen)) if need.judge else None
        found = self.check(facts)
        if found is None:
            return None
        return replace(found, facts={**pick(facts, *self.read()), **found.facts})


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


def need(text: str, reads: tuple[str, ...] | str, holds: Callable[[Facts], bool],
         why: Callable[[Facts], str] | str | None = None, judge: bool = False) -> Need:
    """A precondition from a predicate: ``why`` (a text, or a function of the facts) says
    why it failed (default: the text, negated)."""
    names = (reads,) if isinstance(reads, str) else reads

    def test(facts: Facts) -> str | None:
        if holds(facts):
            return None
        if callable(why):
            return why(facts)
        return why or f"not: {text}"
    return Need(text, names, test, judge)


def facts_text(facts: dict[str, Any]) -> str:
    """Facts as one line, "data_share 0.22, workers 0, cores 2" (numbers to 3 significant
    figures), for the output beside a rule's row."""
    def value(v: Any) -> str:
        if isinstance(v, bool) or v is None:
            return str(v).lower()
        if isinstance(v, float):
            return f"{v:.3g}"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k}: {value(x)}" for k, x in v.items()) + "}"
        return str(v)
    return ", ".join(f"{k} {value(v)}" for k, v in facts.items())


def _unseparated(facts: Facts) -> str:
    from layerscope.advice.facts import TRANSIENT

    steps = facts.get("transient_steps") or []
    return (f"step(s) {', '.join(map(str, steps))} took {facts.get('transient_s', 0.0):.3g} "
            f"s, over {TRANSIENT:g}x the median step (compilation or another transient), and "
            "the result keeps no per-phase times of them to take them out of the shares")


# the phase shares a rule reads are those of the steady steps (advice/facts.py)
STEADY = need("transient steps (compilation) taken out of the phase shares",
              ("transient_steps", "transient_s", "transients_unseparated"),
              lambda f: not f.get("transients_unseparated"), _unseparated, judge=True)
