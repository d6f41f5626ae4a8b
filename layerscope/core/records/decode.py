"""The result of ``layerscope profile hf:config.json --decode N`` (kind ``decode``): measured
single-token decode steps of a language model with its KV cache, beside what ``layerscope llm``
counts and bounds for the same step; its JSON schema is generated from these fields
(layerscope/schema/generate.py). analysis/decode.py builds it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from layerscope.core.document import Record, ResultDocument, omit_empty, omit_none
from layerscope.core.records import ENVIRONMENT, Noise
from layerscope.core.records.efficiency import Efficiency
from layerscope.core.report import SCHEMA_VERSION
from layerscope.core.stats import TimingStats

_COUNT = {"minimum": 0}


@dataclass
class DecodeBound(Record):
    """``layerscope llm``'s roofline bound on decode for this step against one peak: a step
    takes at least max(FLOPs / peak FLOP/s, bytes / bandwidth)."""

    source: str = field(metadata={"description": "\"measured\" (layerscope roofline on this "
                                                 "machine) or the datasheet it comes from"})
    peak_flops_per_s: float = field(metadata=_COUNT)
    bandwidth_bytes_per_s: float = field(metadata=_COUNT)
    tokens_per_s: float = field(metadata={**_COUNT, "description": "the bound: batch / the "
                                                                   "step's least time"})
    bound: str = field(metadata={"description": "memory or compute: which term is larger"})


@dataclass
class DecodeProfile(ResultDocument):
    """profile --decode: a prefill of ``context`` tokens, then timed single-token decode steps
    of ``batch_size`` sequences, each attending the same ``context`` cached tokens."""

    model: str
    device: str
    dtype: str
    batch_size: int = field(metadata={"minimum": 1})
    context: int = field(metadata={"minimum": 1, "description": "tokens in the KV cache that "
                                                               "every timed step attends"})
    steps: int = field(metadata={"minimum": 1,
                                 "description": "timed decode steps (warm-up excluded)"})
    warmup: int = field(metadata=_COUNT)
    step_time: TimingStats = field(metadata={"description": "seconds per decode step"})
    prefill_s: float = field(metadata={**_COUNT, "description": "the one prefill's seconds "
                                                                "(not timed repeatedly)"})
    tokens_per_s: float = field(metadata={**_COUNT, "description": "batch_size / the median "
                                                                   "step"})
    flops_per_step: int = field(metadata={**_COUNT, "description": "batch_size x layerscope "
                                                                   "llm's decode FLOPs per "
                                                                   "token at this context"})
    bytes_per_step: int = field(metadata={**_COUNT, "description": "weight_bytes + kv_bytes, "
                                                                   "as layerscope llm counts "
                                                                   "a decode step"})
    weight_bytes: int = field(metadata={**_COUNT, "description": "weights one step reads (the "
                                                                 "embedding: one row a "
                                                                 "sequence)"})
    kv_bytes: int = field(metadata={**_COUNT, "description": "the KV cache the step attends"})
    bounds: list[DecodeBound] = field(default_factory=list, metadata=omit_empty(
        description="llm's decode bound against the measured ceilings and, on a GPU the "
                    "datasheet table knows, its datasheet"))
    efficiency: Efficiency | None = field(default=None, metadata=omit_none(
        description="MBU and MFU of the median step against the measured ceilings and a GPU "
                    "datasheet"))
    notes: list[str] = field(default_factory=list, metadata=omit_empty())
    settings: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict, metadata=ENVIRONMENT)
    noise: Noise | None = field(default=None, metadata=omit_none(
        description="core.noise section: spread of the decode steps and the machine at the "
                    "start"))
    kind: str = "decode"
    schema_version: str = SCHEMA_VERSION
