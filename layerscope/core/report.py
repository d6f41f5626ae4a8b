"""The Report every analysis fills: a header, one row per layer, totals and what was not counted.

Plain data only (see DESIGN.md section 1): renderers turn it into text, JSON, CSV or HTML.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

SCHEMA_VERSION = "1.0"


@dataclass
class LayerRow:
    """One module (or ONNX node). Costs are for the forward pass over all calls of the module.

    ``self_only`` marks the row of a container's own ops (e.g. the residual add written in a
    ResNet block's forward), so that rows never double count their children.
    """

    name: str
    type: str
    depth: int
    calls: int = 0
    input_shapes: list = field(default_factory=list)
    output_shapes: list = field(default_factory=list)
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
    # Filled by `profile` only: timing statistics (core.stats.TimingStats.to_dict), the share of
    # each instrumented run's wall time (trimmed mean over runs, see analysis.runtime), the rank
    # by median time, achieved rates and roofline placement.
    time: dict[str, Any] | None = None
    share: float | None = None
    rank: int | None = None
    backward_time: dict[str, Any] | None = None
    achieved: dict[str, Any] | None = None
    roofline: dict[str, Any] | None = None
    # Filled for ONNX nodes only: the node's attributes, and the module path the exporter
    # recorded (metadata pkg.torch.onnx.name_scopes), the key for joining to PyTorch rows.
    attributes: dict[str, Any] | None = None
    scope: str | None = None

    # optional fields: left out of to_dict when None
    _MEASURED = ("time", "share", "rank", "backward_time", "achieved", "roofline", "attributes",
                 "scope")

    @property
    def intensity(self) -> float | None:
        moved = self.bytes_read + self.bytes_written
        return self.flops / moved if moved else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in self._MEASURED:
            if d[k] is None:
                del d[k]
        d["intensity"] = self.intensity
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LayerRow":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class Totals:
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
    # Figures users compute by hand or with torchinfo (analysis.static.rows._layer_outputs); None for
    # ONNX graphs and TorchScript, where no per-layer outputs are seen.
    layer_output_bytes: int | None = None
    torchinfo_pass_bytes: int | None = None
    backward_macs: int | None = None
    backward_flops: int | None = None
    backward_bytes_read: int | None = None
    backward_bytes_written: int | None = None
    gradient_bytes: int | None = None
    optimizer_state_bytes: int | None = None

    @property
    def intensity(self) -> float | None:
        moved = self.bytes_read + self.bytes_written
        return self.flops / moved if moved else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["intensity"] = self.intensity
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Totals":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class UncountedOp:
    op: str
    calls: int


@dataclass
class Report:
    """Header + rows + totals.

    ``op_coverage`` is the share of op calls that had a cost handler. Measured reports
    (``kind="profile"``) add ``end_to_end`` timing statistics (bare runs), ``overhead`` (median
    over interleaved pairs of instrumented / bare - 1), ``coverage`` (median over instrumented
    runs of the rows' summed time / that run's wall time), ``by_type``, ``backward``,
    ``roofline`` and ``noise`` (core.noise.noise_section; absent in reports saved before it).
    """

    model: str
    frontend: str
    inputs: list[dict[str, Any]]
    totals: Totals
    layers: list[LayerRow]
    uncounted_ops: list[UncountedOp] = field(default_factory=list)
    op_coverage: float = 1.0
    settings: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    kind: str = "analyze"
    schema_version: str = SCHEMA_VERSION
    notes: list[str] = field(default_factory=list)  # caveats for the reader (e.g. attribution)
    end_to_end: dict[str, Any] | None = None
    overhead: float | None = None
    coverage: float | None = None
    by_type: list[dict[str, Any]] | None = None
    backward: dict[str, Any] | None = None
    roofline: dict[str, Any] | None = None
    # Static memory plan (ONNX): live-set peak step and tensors, packed arena, fragmentation.
    memory: dict[str, Any] | None = None
    noise: dict[str, Any] | None = None

    # optional fields: left out of to_dict when None
    _MEASURED = ("end_to_end", "overhead", "coverage", "by_type", "backward", "roofline",
                 "memory", "noise")

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "kind": self.kind,
            "model": self.model,
            "frontend": self.frontend,
            "inputs": self.inputs,
            "settings": self.settings,
            "totals": self.totals.to_dict(),
            "layers": [row.to_dict() for row in self.layers],
            "uncounted_ops": [asdict(u) for u in self.uncounted_ops],
            "op_coverage": self.op_coverage,
            "notes": self.notes,
            "environment": self.environment,
        } | {k: getattr(self, k) for k in self._MEASURED if getattr(self, k) is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Report":
        major = str(d.get("schema_version", "")).split(".")[0]
        if major != SCHEMA_VERSION.split(".")[0]:
            raise ValueError(
                f"report schema_version {d.get('schema_version')!r} is not readable by this "
                f"layerscope (reads {SCHEMA_VERSION})"
            )
        return cls(
            model=d["model"],
            frontend=d["frontend"],
            inputs=d["inputs"],
            totals=Totals.from_dict(d["totals"]),
            layers=[LayerRow.from_dict(r) for r in d["layers"]],
            uncounted_ops=[UncountedOp(**u) for u in d.get("uncounted_ops", [])],
            op_coverage=d.get("op_coverage", 1.0),
            settings=d.get("settings", {}),
            environment=d.get("environment", {}),
            kind=d.get("kind", "analyze"),
            schema_version=d["schema_version"],
            notes=d.get("notes", []),
            **{k: d.get(k) for k in cls._MEASURED},
        )

    # Display hooks for terminals (rich) and notebooks; the formatting lives in renderers/.
    def __rich__(self):
        from layerscope.core import display

        return display.rich(self)

    def _repr_html_(self) -> str:
        from layerscope.core import display

        return display.html(self)
