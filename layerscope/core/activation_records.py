"""The result of ``layerscope activations`` (statistics of captured layer outputs), as typed
records; its JSON schema is generated from these fields (layerscope/schema/generate.py). The
capture lives in analysis/activations.py."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from layerscope.core.document import Record, ResultDocument, transient
from layerscope.core.report import SCHEMA_VERSION


@dataclass
class ActivationStat(Record):
    """One captured layer output: its shape, mean, standard deviation and share of zeros."""

    name: str
    type: str
    shape: list[int]
    mean: float
    std: float
    zero_fraction: float


@dataclass
class ActivationCapture(ResultDocument):
    """Statistics of captured layer outputs; the arrays themselves are written to their own
    .npz file, never to the JSON (a capture read back from JSON has none)."""

    model: str
    pattern: str
    layers: list[ActivationStat]
    arrays: dict[str, Any] = field(default_factory=dict, repr=False,
                                   metadata=transient())  # name -> numpy array
    kind: str = "activations"
    schema_version: str = SCHEMA_VERSION

    @property
    def stats(self) -> list[ActivationStat]:
        """The captured layers (the JSON's ``layers``)."""
        return self.layers
