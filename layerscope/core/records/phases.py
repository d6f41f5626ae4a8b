"""A phase breakdown (training.phases.PhaseTotals.to_dict(): the ``phases`` JSON object), as
a typed record shared by the train, ablate and loop results; its JSON schema is generated from
these fields, the phases of ``seconds`` from core.phases.STEP_PHASES
(layerscope/schema/generate.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

from layerscope.core.document import DictRecord, omit_none, timing_bounds


@dataclass(eq=False, kw_only=True)
class PhaseBreakdown(DictRecord):
    """training.phases.PhaseTotals: seconds per phase summed over steps (the ``phases`` JSON
    object)."""

    # its properties are written from core.phases.STEP_PHASES (schema/generate.py)
    seconds: dict[str, float]
    steps: int
    samples: int
    wall_s: float = field(metadata=timing_bounds())
    throughput_per_s: float | None = field(default=None, metadata={"optional": True})
    tokens: int | None = field(default=None, metadata=omit_none(
        description="language models: B x T of the token-id batches (absent when none was "
                    "seen)"))
    tokens_per_s: float | None = field(default=None, metadata={
        "description": "tokens / wall_s (written with tokens)"})

    def _keys(self) -> list[str]:
        # tokens_per_s goes with tokens (it is None, not absent, when wall_s is 0)
        keys = super()._keys()
        return keys if self.tokens is not None else [k for k in keys if k != "tokens_per_s"]
