"""The result of ``layerscope diff BASE.json NEW.json`` (kind ``diff``): did it get slower, and
why; as typed records, their JSON schema generated from these fields
(layerscope/schema/generate.py). The matching and the verdicts live in analysis/diff/."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from layerscope.core.document import Record, ResultDocument, omit_empty, omit_none
from layerscope.core.report import SCHEMA_VERSION

VERDICTS = ("slower", "faster", "within-noise", "added", "removed", "changed", "same")
LEVELS = ("end_to_end", "phase", "rank", "type", "layer", "cell", "point")
BASES = ("rank test", "p10-p90 overlap", "end-to-end spread", "static")
# the whole-model static facts a diff joins before any timing (analysis/diff/facts.py)
FACTS = ("flops", "macs", "params", "inputs", "dtype", "batch", "compile", "torchscript", "amp",
         "channels_last", "threads")

_SIGNED = {"minimum": None}
_SECONDS = {"description": "median seconds (the baseline's: of every baseline file's samples "
                           "together); null where that side has none"}


@dataclass
class DiffRow(Record):
    """One thing timed on both sides (or on one: added, removed): its medians, the change and
    the verdict, on the basis named. Levels: end_to_end, phase (train, run, loop), rank (a
    distributed run's step per rank), type and layer (profile, loop; train --layers), cell
    (sweep), point (scaling)."""

    name: str
    level: str = field(metadata={"schema": {"enum": list(LEVELS)}})
    base_s: float | None = field(metadata=_SECONDS)
    new_s: float | None = field(metadata=_SECONDS)
    change: float | None = field(metadata={
        **_SIGNED, "description": "new / base - 1 (of the medians); null without both"})
    verdict: str = field(metadata={"schema": {"enum": list(VERDICTS)}, "description":
                                   "slower or faster: beyond the noise and the minimum effect; "
                                   "within-noise otherwise; added, removed: on one side only; "
                                   "changed, same: static results (analyze), no timing"})
    explanation: str = ""
    basis: str | None = field(default=None, metadata={
        "schema": {"anyOf": [{"enum": list(BASES)}, {"type": "null"}]},
        "description": "what the verdict rests on: the rank test of both sides' samples, the "
                       "overlap of their p10-p90 ranges (a side without samples), or the "
                       "end-to-end spread (a figure without a spread of its own)"})
    p_value: float | None = field(default=None, metadata=omit_none(
        description="rank test: the row's own two-sided Mann-Whitney U p-value (before the "
                    "Holm-Bonferroni adjustment over the diff's rows that its verdict uses)"))
    type: str | None = field(default=None, metadata=omit_none(
        description="a layer's type (the new side's)"))
    base_n: int | None = field(default=None, metadata=omit_none(minimum=0))
    new_n: int | None = field(default=None, metadata=omit_none(minimum=0))
    static: dict[str, int] | None = field(default=None, metadata=omit_none(
        schema={"type": "object", "additionalProperties": {"type": "integer"}},
        description="new - base of the static figures that differ (compare's row metrics)"))

    _schema_required: ClassVar[tuple[str, ...]] = (
        "name", "level", "base_s", "new_s", "change", "verdict", "explanation", "basis")

    @property
    def beyond_noise(self) -> bool:
        return self.verdict in ("slower", "faster")


@dataclass
class StaticChange(Record):
    """One static fact of the two results' whole model or run that differs (the FLOPs per
    step, the parameters, the input shapes, the batch size, the dtype, compilation, the
    threads): joined before any timing, named first in the summary."""

    fact: str = field(metadata={"schema": {"enum": list(FACTS)}})
    base: Any = field(metadata={"description": "the base's value (a count, the input shapes, a "
                                               "dtype, a flag or a thread count)"})
    new: Any = field(metadata={"description": "the new one's value"})
    text: str = field(metadata={"description": "the difference in words"})
    ratio: float | None = field(default=None, metadata=omit_none(
        description="new / base of an amount of work (FLOPs, MACs, parameters, input "
                    "elements, batch size)"))
    work: int = field(default=0, metadata={
        "schema": {"enum": [-1, 0, 1]},
        "description": "1: the new side does more work, -1: less, 0: a setting (dtype, "
                       "compilation, threads) whose effect on the time has no sign"})


@dataclass
class DiffFile(Record):
    """One file compared: its path, kind and what it measured."""

    path: str
    kind: str
    model: str | None = None
    role: str = field(default="base", metadata={"schema": {"enum": ["base", "new"]}})


@dataclass
class DiffReport(ResultDocument):
    """Base (every file but the last, their samples together) against new (the last): the
    end-to-end row first, then phases, layer types and layers, each with its verdict; the
    environment differences that make the comparison unfair; a summary sentence."""

    summary: str
    files: list[DiffFile]
    compared: str = field(metadata={"description": "the kind of the files compared"})
    end_to_end: DiffRow | None = field(metadata={
        "description": "the whole run (profile: a forward pass; train, run: a step; loop: a "
                       "batch); null for kinds without one (analyze, sweep, scaling)"})
    rows: list[DiffRow]
    unfair: list[str] = field(default_factory=list, metadata={
        "description": "environment differences that make the comparison unfair, one line "
                       "each"})
    min_effect: float = field(default=0.03, metadata={
        "description": "the smallest |change| called slower or faster"})
    alpha: float = field(default=0.05, metadata={
        "description": "the rank test's significance level"})
    notes: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict, metadata={
        "schema": {"$ref": "#/$defs/environment"}, "description": "the new file's"})
    static_changes: list[StaticChange] = field(default_factory=list, metadata=omit_empty(
        description="the whole model's static facts that differ between base and new, "
                    "joined before any timing: when any does, no row is taken for "
                    "unchanged work unless its own static figures say so"))
    kind: str = "diff"
    schema_version: str = SCHEMA_VERSION

    @property
    def model(self) -> str:
        """The model compared; "BASE → NEW" where the files name different ones (a script
        copied and changed, two configs), so a heading never names one side only."""
        base = list(dict.fromkeys(f.model for f in self.files if f.model and f.role == "base"))
        new = [f.model for f in self.files if f.model and f.role == "new"]
        if not new:
            return base[-1] if base else self.compared
        if not base or base == new:
            return new[0]
        return f"{', '.join(base)} → {new[0]}"

    def all_rows(self) -> list[DiffRow]:
        return ([self.end_to_end] if self.end_to_end is not None else []) + list(self.rows)
