"""The result of ``layerscope advise`` (kind ``advice``): what a saved result's measured facts
say to change, each rule's predicted gain with its arithmetic, the command that tests it and,
after ``--verify``, the measured gain and a verdict. Gains are fractions of the step (or run)
time saved: 1 - new time / old time (0.2 = a fifth shorter; negative = slower).
layerscope/advice builds them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from layerscope.core.document import Record, ResultDocument, omit_none, transient
from layerscope.core.records import ENVIRONMENT
from layerscope.core.report import SCHEMA_VERSION

VERDICTS = ("confirmed", "refuted", "within-noise", "unverifiable", "not-run")


@dataclass
class Gain(Record):
    """A predicted range of the time saved, as fractions of the step time."""

    low: float
    high: float


@dataclass
class Advice(Record):
    """One rule that fired: the cause it read in the facts, the change, the command that tests
    it, the predicted gain (``derivation``: its arithmetic) and, once verified, the measured
    gain and the verdict."""

    rule: str
    cause: str
    change: str
    command: str = field(metadata={"description": "the command that measures the change"})
    predicted_gain: Gain
    derivation: str = field(metadata={"description": "the arithmetic of predicted_gain"})
    facts: dict[str, Any] = field(default_factory=dict, metadata={
        "description": "the measured facts the rule read", "schema": {"type": "object"}})
    measured_gain: float | None = field(default=None, metadata={
        "description": "1 - changed step time / baseline step time (medians), when verified"})
    verdict: str = field(default="not-run", metadata={"schema": {"enum": list(VERDICTS)}})
    verify_note: str | None = field(default=None, metadata=omit_none(
        description="how the verdict was reached, or why the command was not run"))
    variant: str | None = field(default=None, metadata=omit_none(
        description="the ablate variant that tests the change"))
    threads: int | None = field(default=None, metadata=omit_none(
        description="the thread count that tests the change (ablate --threads)"))
    # the command as its argument list (``command`` is it quoted for a shell): what --verify
    # runs; None where the command is not one to run as it is (a placeholder, a step first)
    argv: list[str] | None = field(default=None, metadata=transient())


@dataclass
class AdviceReport(ResultDocument):
    """The advice on one saved result."""

    source: str = field(metadata={"description": "the result file the advice reads"})
    source_kind: str
    subject: str = field(metadata={"description": "its recipe or model"})
    device: str
    advice: list[Advice]
    checked: list[str] = field(default_factory=list, metadata={
        "description": "every rule that was checked (those that did not fire included)"})
    verify: dict[str, Any] | None = field(default=None, metadata=omit_none(
        description="--verify's settings (steps, repeats, seed)", schema={"type": "object"}))
    notes: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict, metadata=ENVIRONMENT)
    headline: str | None = field(default=None, metadata=omit_none(
        description="the headline of the result the advice reads (its step time, MFU, data "
                    "share and the rule with the largest predicted gain, measured beside it "
                    "once verified), as the advise command writes it"))
    kind: str = "advice"
    schema_version: str = SCHEMA_VERSION
