"""The result of ``layerscope memory MODEL`` (kind ``memory``): where the memory of one inference
pass or one training step goes — the live set at its peak by module and kind, the live bytes
after every op, and, when measured, how the static peak compares with a real CPU run. Its JSON
schema is generated from these fields (layerscope/schema/generate.py);
analysis/memory_usage.py builds it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from layerscope.core.document import Record, ResultDocument, omit_empty, omit_none
from layerscope.core.records import ENVIRONMENT
from layerscope.core.report import SCHEMA_VERSION

_BYTES = {"minimum": 0}
MEMORY_KINDS = ("parameters", "buffers", "gradients", "optimizer_state", "activations",
                "inputs", "outputs", "temporaries")


@dataclass
class MemoryRow(Record):
    """The bytes of one kind of storage one module created, alive at the peak."""

    module: str = field(metadata={"description": "the module whose forward or backward "
                                                 "created it (gradients and optimizer states: "
                                                 "their parameter's module); (loss), "
                                                 "(optimizer), (zero_grad): ops outside any "
                                                 "module in those phases; \"\": the top level "
                                                 "(the root's own ops, the inputs)"})
    kind: str = field(metadata={"schema": {"enum": list(MEMORY_KINDS)}})
    bytes: int = field(metadata=_BYTES)


@dataclass
class PostMortem(Record):
    """An out-of-memory failure (``--memory-limit``, or a real out-of-memory error): the live
    set at that moment by module and kind, and what asked for more."""

    error: str = field(metadata={"description": "the error raised: torch.OutOfMemoryError "
                                                "(--memory-limit's own, or CUDA's), MemoryError, "
                                                "or the CPU allocator's RuntimeError"})
    limit_bytes: int | None = field(metadata={**_BYTES, "description": "--memory-limit; null "
                                                                        "for a real failure "
                                                                        "without one"})
    asked_bytes: int | None = field(metadata={**_BYTES, "description": "the new bytes the "
                                                                        "failing op asked for "
                                                                        "(null: unknown)"})
    op: str | None = field(metadata={"description": "the aten op refused (null: a real "
                                                    "failure, op unknown)"})
    module: str = field(metadata={"description": "the module running the op (backward: the "
                                                 "module whose forward made the autograd "
                                                 "node); \"\": the top level or unknown"})
    phase: str = field(metadata={"schema": {"enum": ["forward", "loss", "backward",
                                                     "optimizer", "other", "unknown"]}})
    live_bytes: int | None = field(metadata={
        **_BYTES, "description": "the live tensor bytes at the failure: the rows' sum; null "
                                 "when the run had no --memory-limit (tensors not tracked)"})
    by_module_kind: list[MemoryRow] = field(metadata={
        "description": "the live set at the failure by module and kind, largest first; sums "
                       "to live_bytes exactly (empty without --memory-limit)"})
    step: int | None = field(default=None, metadata=omit_none(
        minimum=1, description="the training step that was running (1: the run's first, "
                               "warm-up steps included); absent when unknown"))

    @property
    def tracked(self) -> bool:
        """Whether the live set was tracked (``--memory-limit``): without it only the error,
        the bytes asked and where are known."""
        return self.live_bytes is not None


@dataclass
class TimelinePoint(Record):
    """The live bytes after event ``t`` (an op, or a phase boundary)."""

    t: int = field(metadata=_BYTES)
    bytes: int = field(metadata=_BYTES)
    phase: str


@dataclass
class Reconciliation(Record):
    """The static peak (fake tensors) beside the same step run for real on the CPU."""

    static_peak_bytes: int | None = field(metadata={**_BYTES, "description": "null: no "
                                                                           "static run (a "
                                                                           "script's step)"})
    measured_peak_bytes: int = field(metadata={**_BYTES, "description": "the peak of the "
                                                                         "real run's live "
                                                                         "storages, tracked "
                                                                         "the same way"})
    difference: int | None = field(metadata={"description": "measured_peak_bytes - "
                                                            "static_peak_bytes (null: no "
                                                            "static run)"})
    rss_bytes: int | None = field(default=None, metadata=omit_none(
        description="growth of the process's peak resident set during the measured step "
                    "(Linux: VmHWM after, VmRSS before)"))
    unexplained_bytes: int | None = field(default=None, metadata=omit_none(
        description="rss_bytes minus what the tracked storages grew by during the step "
                    "(measured peak - live at the step's start): allocator and kernel "
                    "workspace; negative when the allocator reused memory it kept"))
    allocated_peak_bytes: int | None = field(default=None, metadata=omit_none(
        description="CUDA: the caching allocator's peak of allocated bytes during the step "
                    "(torch.cuda.max_memory_allocated)"))
    reserved_peak_bytes: int | None = field(default=None, metadata=omit_none(
        description="CUDA: the allocator's peak of reserved bytes, in use or cached "
                    "(torch.cuda.max_memory_reserved)"))
    fragmentation_bytes: int | None = field(default=None, metadata=omit_none(
        description="CUDA: reserved_peak_bytes - allocated_peak_bytes, cached by the "
                    "allocator and not in use"))
    driver_used_bytes: int | None = field(default=None, metadata=omit_none(
        description="CUDA: what the driver reports in use on the device after the step "
                    "(torch.cuda.mem_get_info: total - free): the reserved memory, the CUDA "
                    "context, library handles and other processes' memory"))
    cuda_unexplained_bytes: int | None = field(default=None, metadata=omit_none(
        description="CUDA: allocated_peak_bytes - measured_peak_bytes, what the allocator "
                    "held at its peak that no tracked storage explains (kernel workspaces, "
                    "its rounding to blocks, tensors from before the step)"))
    notes: list[str] = field(default_factory=list, metadata=omit_empty())


@dataclass
class MemoryFit(Record):
    """``--fit``: the largest batch size whose static peak is at most the budget."""

    budget_bytes: int = field(metadata=_BYTES)
    max_batch_size: int = field(metadata={"minimum": 1})
    bytes_at_max: int = field(metadata={**_BYTES, "description": "the static peak at "
                                                                 "max_batch_size"})
    bytes_at_next: int | None = field(metadata={"description": "the static peak at "
                                                               "max_batch_size + 1 (more than "
                                                               "the budget); null: larger "
                                                               "sizes were not searched (2**40 "
                                                               "and up)"})
    confirmed: bool = field(metadata={"description": "a measured CPU step at max_batch_size "
                                                     "peaked within the budget and one at "
                                                     "max_batch_size + 1 above it (--measure)"})
    method: str = field(metadata={"schema": {"enum": ["affine", "bisection"]}})
    notes: list[str] = field(default_factory=list, metadata=omit_empty())


@dataclass
class MemoryFitSeq(Record):
    """``--fit-seq``: the longest sequence whose static peak at ``batch_size`` is at most the
    budget."""

    budget_bytes: int = field(metadata=_BYTES)
    batch_size: int = field(metadata={"minimum": 1})
    max_seq_len: int = field(metadata={"minimum": 1})
    bytes_at_max: int = field(metadata=_BYTES)
    bytes_at_next: int | None = field(metadata={"description": "the static peak one token "
                                                               "longer; null: max_seq_len is "
                                                               "the position table's end"})
    method: str = field(metadata={"schema": {"enum": ["bisection"]}})
    notes: list[str] = field(default_factory=list, metadata=omit_empty())


@dataclass
class MemoryReport(ResultDocument):
    """``layerscope memory``: the live set of one pass or step, at its peak and over time."""

    model: str
    mode: str = field(metadata={"schema": {"enum": ["inference", "training"]}})
    peak_bytes: int = field(metadata={**_BYTES, "description": "the most bytes of storages "
                                                               "alive at once (static: fake "
                                                               "tensors)"})
    peak_phase: str
    peak_t: int = field(metadata={**_BYTES, "description": "the event at the peak"})
    by_module_kind: list[MemoryRow] = field(metadata={
        "description": "the storages alive at the peak, by module and kind; they sum to "
                       "peak_bytes exactly"})
    timeline: list[TimelinePoint]
    inputs: list[str] = field(default_factory=list)
    batch_size: int | None = field(default=None, metadata=omit_none())
    optimizer: str | None = field(default=None, metadata=omit_none())
    measured_peak_bytes: int | None = field(default=None, metadata=omit_none())
    reconciliation: Reconciliation | None = field(default=None, metadata=omit_none())
    notes: list[str] = field(default_factory=list, metadata=omit_empty())
    settings: dict[str, Any] = field(default_factory=dict)
    fit: MemoryFit | None = field(default=None, metadata=omit_none())
    fit_seq: MemoryFitSeq | None = field(default=None, metadata=omit_none())
    environment: dict[str, Any] = field(default_factory=dict, metadata=ENVIRONMENT)
    kind: str = "memory"
    schema_version: str = SCHEMA_VERSION

    def by_kind(self) -> dict[str, int]:
        """kind -> bytes alive at the peak, in ``MEMORY_KINDS`` order (kinds with bytes only)."""
        totals = {k: 0 for k in MEMORY_KINDS}
        for row in self.by_module_kind:
            totals[row.kind] = totals.get(row.kind, 0) + row.bytes
        return {k: v for k, v in totals.items() if v}
