"""The Report every analysis fills: a header, one row per layer, totals and what was not counted.

Plain data only (docs/design.md, "Results are plain data"): renderers turn it into text, JSON,
CSV or HTML.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from layerscope.core.document import Record, build, omit_none
from layerscope.core.kinds import Result
from layerscope.core.records import (
    ENVIRONMENT,
    AboveRoof,
    Achieved,
    BackwardTiming,
    Ceilings,
    EndToEnd,
    Noise,
    RooflinePoint,
    TypeTiming,
)
from layerscope.core.records.efficiency import Efficiency
from layerscope.core.records.kernels import KernelBreakdown
from layerscope.core.stats import TimingStats

SCHEMA_VERSION = "1.0"
_SHAPES = {"schema": {"$ref": "#/$defs/shapes"}}
# the fields a measured report (kind profile) must have: its schema definition ``profile``
_PROFILE = ("profile",)


@dataclass
class LayerRow(Record):
    """One module (or ONNX node); costs are for the forward pass over all calls of the module.

    ``self_only`` marks the row of a container's own ops (e.g. the residual add written in a
    ResNet block's forward), so that rows never double count their children.
    """

    name: str
    type: str
    depth: int
    calls: int = 0
    input_shapes: list[Any] = field(default_factory=list, metadata=_SHAPES)
    output_shapes: list[Any] = field(default_factory=list, metadata=_SHAPES)
    params: int = 0
    weight_bytes: int = 0
    buffer_bytes: int = 0
    macs: int = 0
    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    activation_bytes: int = 0
    self_only: bool = False
    # Filled in --mode training only: the cost of the backward ops this layer's forward caused.
    backward_macs: int | None = None
    backward_flops: int | None = None
    backward_bytes_read: int | None = None
    backward_bytes_written: int | None = None
    # Filled by `profile` only (left out of the JSON when None): timing statistics, the share of
    # each instrumented run's wall time (trimmed mean over runs, see analysis.runtime), the rank
    # by median time, achieved rates and roofline placement.
    time: TimingStats | None = field(default=None, metadata=omit_none(required_in=_PROFILE))
    share: float | None = field(default=None, metadata=omit_none(required_in=_PROFILE))
    rank: int | None = field(default=None, metadata=omit_none(minimum=0, required_in=_PROFILE))
    backward_time: TimingStats | None = field(default=None, metadata=omit_none())
    achieved: Achieved | None = field(default=None, metadata=omit_none())
    roofline: RooflinePoint | None = field(default=None, metadata=omit_none())
    # Filled for ONNX nodes only: the node's attributes, and the module path the exporter
    # recorded (metadata pkg.torch.onnx.name_scopes), the key for joining to PyTorch rows.
    attributes: dict[str, Any] | None = field(
        default=None, metadata=omit_none(description="ONNX nodes: the node's attributes"))
    scope: str | None = field(default=None, metadata=omit_none(
        description="ONNX nodes: the module path the exporter recorded"))

    _computed: ClassVar[tuple[str, ...]] = ("intensity",)
    _schema_required: ClassVar[tuple[str, ...]] = (
        "name", "type", "depth", "input_shapes", "output_shapes", "params", "macs", "flops",
        "bytes_read", "bytes_written")

    @property
    def intensity(self) -> float | None:
        moved = self.bytes_read + self.bytes_written
        return self.flops / moved if moved else None

    def function(self) -> tuple[str, str] | None:
        """(module path, function) for a row of the ops one torch function ran in a
        container's own code (``--functions``: named "MODULE (FUNCTION)", typed FUNCTION, the
        root's module path ""); None for every other row."""
        tail = f" ({self.type})"
        if not self.self_only or not self.name.endswith(tail):
            return None
        module = self.name[:-len(tail)]
        return ("" if module == "(root)" else module), self.type


@dataclass
class Totals(Record):
    """The whole model: the rows' sums, the peak live activations, inputs and outputs."""

    params: int = 0
    trainable_params: int = 0
    weight_bytes: int = 0
    buffer_bytes: int = 0
    macs: int = 0
    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    activation_bytes: int = 0
    peak_activation_bytes: int = 0
    input_bytes: int = 0
    output_bytes: int = 0
    # Figures users compute by hand or with torchinfo (static.rows._layer_outputs); None for
    # ONNX graphs and TorchScript, where no per-layer outputs are seen.
    layer_output_bytes: int | None = None
    torchinfo_pass_bytes: int | None = None
    backward_macs: int | None = None
    backward_flops: int | None = None
    backward_bytes_read: int | None = None
    backward_bytes_written: int | None = None
    recompute_flops: int | None = field(default=None, metadata=omit_none(
        description="training: of backward_flops, the forward FLOPs recomputed in backward: "
                    "activation checkpointing's, and the attention scores a fused attention "
                    "backward kernel rebuilds (absent when nothing is recomputed)"))
    gradient_bytes: int | None = None
    optimizer_state_bytes: int | None = None
    # Language models: parameters one token uses (a mixture of experts counts k/E of its expert
    # parameters: expected routing); left out for other models.
    params_active: int | None = field(default=None, metadata=omit_none(
        description="language models: parameters one token uses (mixture of experts: "
                    "expected routing, k of E experts)"))

    @property
    def intensity(self) -> float | None:
        moved = self.bytes_read + self.bytes_written
        return self.flops / moved if moved else None

    _computed: ClassVar[tuple[str, ...]] = ("intensity",)
    _schema_required: ClassVar[tuple[str, ...]] = (
        "params", "macs", "flops", "bytes_read", "bytes_written")


@dataclass
class UncountedOp(Record):
    """An op with no cost handler, and how often it ran."""

    op: str
    calls: int


@dataclass
class Report(Record, Result):
    """Header + rows + totals.

    ``op_coverage`` is the share of op calls that had a cost handler. Measured reports
    (``kind="profile"``) add ``end_to_end`` timing statistics (bare runs), ``overhead`` (median
    over interleaved pairs of instrumented / bare - 1), ``coverage`` (median over instrumented
    runs of the rows' summed time / that run's wall time), ``by_type``, ``backward``,
    ``roofline``, ``above_roof`` (present when some layer is measured above 100% of its roof:
    the ceilings look stale, and how to re-measure them) and ``noise``
    (core.noise.noise_section; absent in reports saved before it).
    """

    model: str
    frontend: str
    inputs: list[dict[str, Any]]
    totals: Totals
    layers: list[LayerRow]
    uncounted_ops: list[UncountedOp] = field(default_factory=list)
    op_coverage: float = 1.0
    settings: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict, metadata=ENVIRONMENT)
    kind: str = "analyze"
    schema_version: str = SCHEMA_VERSION
    notes: list[str] = field(default_factory=list)  # caveats for the reader (e.g. attribution)
    # Measured sections (left out of the JSON when None)
    end_to_end: EndToEnd | None = field(default=None, metadata=omit_none(
        required_in=_PROFILE))
    overhead: float | None = field(default=None, metadata=omit_none(
        required_in=_PROFILE, description="median over interleaved pairs of instrumented / bare "
                                          "run time, minus 1"))
    coverage: float | None = field(default=None, metadata=omit_none(
        required_in=_PROFILE, description="median over instrumented runs of the rows' summed "
                                          "time / that run's wall time"))
    by_type: list[TypeTiming] | None = field(default=None, metadata=omit_none(
        required_in=_PROFILE))
    backward: BackwardTiming | None = field(default=None, metadata=omit_none())
    roofline: Ceilings | None = field(default=None, metadata=omit_none())
    # layers above 100% of their roof: the ceilings look stale (analysis.roofline.above_roof)
    above_roof: AboveRoof | None = field(default=None, metadata=omit_none())
    # Static memory plan (ONNX): live-set peak step and tensors, packed arena, fragmentation.
    memory: dict[str, Any] | None = field(default=None, metadata=omit_none(
        description="static memory plan (ONNX)"))
    noise: Noise | None = field(default=None, metadata=omit_none())
    efficiency: Efficiency | None = field(default=None, metadata=omit_none(
        description="profile: MFU and MBU of the forward pass at the median batch time, "
                    "against the measured ceilings (and a GPU's datasheet dense peak)"))
    kernels: KernelBreakdown | None = field(default=None, metadata=omit_none(
        description="profile --kernels: a short torch.profiler window's CPU ops, device "
                    "kernels and launch calls per module and phase, and per step"))

    # a static analysis (analyze) and a measured one (profile: the report plus its measured
    # sections, the fields marked ``required_in`` profile)
    kinds: ClassVar[tuple[str, ...]] = ("analyze", "profile")
    _schema_required: ClassVar[tuple[str, ...]] = (
        "model", "frontend", "inputs", "settings", "totals", "layers", "uncounted_ops",
        "op_coverage")
    _schema_refs: ClassVar[dict[str, tuple[str, ...]]] = {"analyze": ("report",),
                                                           "profile": ("report", "profile")}
    _json_first: ClassVar[tuple[str, ...]] = (
        "schema_version", "kind", "model", "frontend", "inputs", "settings", "totals", "layers",
        "uncounted_ops", "op_coverage", "notes", "environment")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Report:
        major = str(d.get("schema_version", "")).split(".")[0]
        if major != SCHEMA_VERSION.split(".")[0]:
            raise ValueError(
                f"report schema_version {d.get('schema_version')!r} is not readable by this "
                f"layerscope (reads {SCHEMA_VERSION})"
            )
        return build(cls, d)

    # Display hooks for terminals (rich) and notebooks; the formatting lives in renderers/.

