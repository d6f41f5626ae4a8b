"""``layerscope compare A B``: two reports of the same model joined layer by layer, totals side by
side, and every difference explained in words.

A and B are anything ``analyze`` reads (a model spec, a TorchScript file, an ONNX file), a saved
report JSON (kind analyze or profile), or a :class:`~layerscope.core.report.Report`.

**Join key: the PyTorch module path.** PyTorch and TorchScript rows are keyed by their ``name``
(a container's ``(own ops)`` row by the container's path, ``(root)`` by ""). ONNX nodes are
grouped by module path and summed: the dynamo exporter's name scopes (row ``scope``), or, for
the legacy exporter, the path parsed from the node name (:func:`legacy_scope`); nodes with
neither belong to the root. A key one side has and the other lacks is folded into its nearest
ancestor on the other side when that ancestor's row covers its whole subtree (a ``--depth``
report), so leaf rows and depth-limited rows join too.

**Explanations.** Every joined row whose numbers differ gets one sentence. The sentence is built
from rules (``RULES``); each rule that applies predicts exactly how much of each number it
accounts for (B - A), and the prediction is subtracted from the observed difference. Whatever is
left after all rules is reported as ``unexplained`` with the exact numbers, so an explanation
is never a guess that hides a discrepancy. Totals are explained by summing the rows' accounted
differences per rule; the peak, which is not a sum over rows, by how each side measures it.
"""
from __future__ import annotations

import math
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, ClassVar, Collection, Sequence

from layerscope.core.document import ResultDocument
from layerscope.core.report import SCHEMA_VERSION, LayerRow, Report
from layerscope.errors import UserError

ROW_METRICS = ("params", "weight_bytes", "buffer_bytes", "macs", "flops", "bytes_read",
               "bytes_written", "activation_bytes")
TOTAL_METRICS = ROW_METRICS + ("peak_activation_bytes",)
LABELS = {"params": "parameters", "weight_bytes": "weight bytes", "buffer_bytes": "buffer bytes",
          "macs": "MACs", "flops": "FLOPs", "bytes_read": "bytes read",
          "bytes_written": "bytes written", "activation_bytes": "activation bytes",
          "peak_activation_bytes": "peak activation bytes"}
ROOT = ""
ROOT_LABEL = "(root)"
UNEXPLAINED = "unexplained"

# Layer types by what they do, for PyTorch modules and ONNX ops alike.
CATEGORIES = {
    "batchnorm": {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm",
                  "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d", "BatchNormalization"},
    "conv": {"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
             "ConvTranspose3d", "LazyConv1d", "LazyConv2d", "LazyConv3d", "Conv",
             "ConvTranspose", "FusedConv"},
    "linear": {"Linear", "LazyLinear", "NonDynamicallyQuantizableLinear", "Bilinear", "Gemm",
               "FusedGemm", "MatMul", "FusedMatMul"},
    "dropout": {"Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout",
                "FeatureAlphaDropout"},
    "activation": {"ReLU", "Relu", "ReLU6", "LeakyReLU", "LeakyRelu", "PReLU", "ELU", "Elu",
                   "SELU", "Selu", "CELU", "Celu", "GELU", "Gelu", "SiLU", "Mish", "Hardswish",
                   "HardSwish", "Hardsigmoid", "HardSigmoid", "Sigmoid", "Tanh", "Softplus",
                   "Clip"},
    "identity": {"Identity"},
    "layernorm": {"LayerNorm", "LayerNormalization"},
}
FUSED_TYPES = {"FusedConv", "FusedGemm", "FusedMatMul", "QLinearConv"}
# ONNX ops that are views (no new tensor) and ops that copy data without arithmetic
VIEW_TYPES = {"Flatten", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Unflatten"}
COPY_TYPES = {"Transpose", "Expand", "Concat", "Slice", "Split", "Cast", "Tile", "Pad", "Gather"}
# ONNX ops that compute shapes (PyTorch does that with Python integers)
SHAPE_TYPES = {"Shape", "Size", "ConstantOfShape", "Range"}
SMALL_INT_TYPES = {"Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast", "Constant",
                   "Equal", "Where", "Mul", "Div", "Add", "Sub", "Reshape"}
INDEX_BYTES = 8  # PyTorch's max-pool indices are int64
FRONTEND_NAMES = {"torch": "PyTorch", "torchscript": "TorchScript", "onnx": "ONNX"}


def category(type_name: str) -> str | None:
    for cat, names in CATEGORIES.items():
        if type_name in names:
            return cat
    return None


# ------------------------------------------------------------------------------- result
@dataclass
class CompareRow:
    """One module path: each side's rows summed (``a``/``b`` None where that side has none)."""

    module: str  # "(root)" for the model's own ops
    a_type: str
    b_type: str
    a: dict[str, int] | None
    b: dict[str, int] | None
    diff: dict[str, int]  # B - A, the numbers that differ only
    rules: list[str] = field(default_factory=list)  # the rules that explain ``diff``
    summary: str | None = None  # a few words per rule, for the table
    explanation: str | None = None  # one sentence


@dataclass
class TotalRow:
    metric: str
    a: int
    b: int
    diff: int  # B - A
    rules: list[str] = field(default_factory=list)
    explanation: str | None = None


@dataclass
class Comparison(ResultDocument):
    """Two reports joined. ``a``/``b``: source, model, frontend, inputs, exporter, rows."""

    a: dict[str, Any]
    b: dict[str, Any]
    totals: list[TotalRow]
    rows: list[CompareRow]
    explanations: list[str]  # every sentence, rows first, then totals
    identical: bool
    unexplained: int  # rows and totals with an unexplained part
    notes: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)  # A's (else B's) analysis machine
    kind: str = "compare"
    schema_version: str = SCHEMA_VERSION

    _row_types: ClassVar[dict[str, type]] = {"totals": TotalRow, "rows": CompareRow}

    @property
    def model(self) -> str:
        return f"{self.a.get('model')} vs {self.b.get('model')}"

    def differing_rows(self) -> list[CompareRow]:
        return [r for r in self.rows if r.diff]

    def __rich__(self):
        from layerscope.renderers.compare_out import render_compare

        return render_compare(self)


# ------------------------------------------------------------------------------- loading
def _shape_text(d: dict[str, Any]) -> str:
    return "x".join(str(int(x)) for x in d.get("shape") or [])


def _inputs_for(report: Report) -> list[str]:
    """A report's input shapes as --input strings for a PyTorch side ('1x3x224x224:int64')."""
    out = []
    for d in report.inputs:
        dtype = d.get("dtype")
        out.append(_shape_text(d) + (f":{dtype}" if dtype and dtype != "float32" else ""))
    return out


def _is_saved_report(spec: Any) -> bool:
    return isinstance(spec, str) and spec.lower().endswith(".json")


def _needs_inputs(spec: Any) -> bool:
    """A TorchScript file and an nn.Module have no default input; built-in models, factories,
    ONNX files and saved reports carry theirs."""
    if not isinstance(spec, str):
        return not isinstance(spec, Report)
    return os.path.isfile(spec) and not spec.lower().endswith((".onnx", ".json", ".py"))


def _read_report(path: str) -> Report:
    from layerscope.core.results import read_result

    result = read_result(path)
    if not isinstance(result, Report):
        raise UserError(f"{path}: a saved {result.kind} result; compare needs a report of kind "
                        "analyze (layerscope analyze MODEL --format json -o FILE.json)")
    return result


def _analyze(spec: Any, inputs: Any) -> Report:
    from layerscope.analysis.analyze import analyze

    return analyze(spec, inputs)


def _source(spec: Any) -> str:
    if isinstance(spec, str):
        return spec
    if isinstance(spec, Report):
        return spec.model
    return type(spec).__name__


def _load_sides(a: Any, b: Any, inputs: Any) -> tuple[Report, Report, list[str]]:
    """Both reports. A side that needs inputs and got none takes the other side's shapes."""
    notes: list[str] = []
    specs = {"A": a, "B": b}
    reports: dict[str, Report] = {}
    for label, spec in specs.items():
        if isinstance(spec, Report):
            reports[label] = spec
        elif _is_saved_report(spec):
            reports[label] = _read_report(spec)
            if inputs:
                notes.append(f"{label} is a saved report ({spec}): --input does not apply to it")
    deferred = []
    for label, spec in specs.items():
        if label in reports:
            continue
        if inputs is None and _needs_inputs(spec):
            deferred.append(label)
            continue
        reports[label] = _analyze(spec, inputs)
    for label in deferred:
        other = reports.get("B" if label == "A" else "A")
        if other is None:  # both need inputs: analyze says how to give them
            reports[label] = _analyze(specs[label], None)
            continue
        given = _inputs_for(other)
        reports[label] = _analyze(specs[label], given)
        notes.append(f"{label} ({_source(specs[label])}) has no default input; it was analysed "
                     f"with {'B' if label == 'A' else 'A'}'s input {', '.join(given)}")
    return reports["A"], reports["B"], notes


# ------------------------------------------------------------------------------- join keys
_SUFFIX = re.compile(r"^(.*)_(\d+)$")


def legacy_scope(node_name: str, known: Collection[str] = ()) -> str | None:
    """The module path in a legacy (TorchScript-based) exporter's node name.

    ``/layer1/layer1.0/conv1/Conv`` -> ``layer1.0.conv1``: the segments between the first and
    the last ``/`` are scope names. A segment that starts with the previous one plus "." names
    the child of a container by its path from the container's parent (``layer1`` ->
    ``layer1.0``; ``downsample`` -> ``downsample.0`` is ``layer1.0.downsample.0``), so it
    replaces the previous segment; any other segment is appended. The exporter numbers repeated
    calls of a module (``relu``, ``relu_1``, ``relu_2``): when ``known`` module paths are given,
    a path that is not known but is known without its ``_N`` suffix is taken without it.
    ``/Relu`` is the root (""); a name that does not start with "/" has no scope (None).
    """
    if not node_name.startswith("/"):
        return None
    path = previous = ROOT
    for seg in node_name.split("/")[1:-1]:
        if not seg:
            continue
        if previous and seg.startswith(previous + "."):  # replaces the previous segment
            parent = path[: len(path) - len(previous)].rstrip(".")
            path = f"{parent}.{seg}" if parent else seg
        else:
            path = f"{path}.{seg}" if path else seg
        previous = seg
        if known and path not in known:
            m = _SUFFIX.match(path)
            if m and m.group(1) in known:
                path = m.group(1)
    return path


def _ancestors(key: str) -> list[str]:
    """'a.b.c' -> ['a.b', 'a', '']; '' -> []."""
    if key == ROOT:
        return []
    parts = key.split(".")
    return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)] + [ROOT]


def _with_ancestors(keys: Collection[str]) -> set[str]:
    out = set(keys)
    for k in keys:
        out.update(_ancestors(k))
    return out


@dataclass
class _Group:
    key: str
    rows: list[LayerRow]
    first: int  # position of the first row in its report
    covers_subtree: bool  # a PyTorch row that sums its submodules (leaf or --depth row)

    def metric(self, name: str) -> int:
        return sum(int(getattr(r, name) or 0) for r in self.rows)

    def metrics(self) -> dict[str, int]:
        return {m: self.metric(m) for m in ROW_METRICS}

    @property
    def types(self) -> list[str]:
        return [r.type for r in self.rows]

    def has(self, types: Collection[str]) -> bool:
        return any(t in types for t in self.types)

    def categories(self) -> set[str | None]:
        return {category(r.type) for r in self.rows if not r.self_only}

    def nodes(self, types: Collection[str]) -> list[LayerRow]:
        return [r for r in self.rows if r.type in types]

    def is_zero(self) -> bool:
        return not any(self.metrics().values())

    def type_text(self, onnx: bool) -> str:
        if not onnx:
            return ", ".join(r.type + (" (own ops)" if r.self_only else "") for r in self.rows)
        counts = Counter(self.types)
        return ", ".join(t if n == 1 else f"{t} x{n}" for t, n in counts.items())


@dataclass
class _Side:
    label: str  # "A" / "B"
    report: Report
    source: str
    onnx: bool
    groups: dict[str, _Group] = field(default_factory=dict)
    exporter: str | None = None

    def order(self) -> list[str]:
        return sorted(self.groups, key=lambda k: self.groups[k].first)


def _key_of_torch_row(row: LayerRow) -> str:
    return ROOT if row.name == ROOT_LABEL else row.name


def _onnx_exporter(report: Report) -> str:
    if any(r.scope is not None for r in report.layers):
        return "dynamo (module paths from name scopes)"
    if any(r.name.startswith("/") for r in report.layers):
        return "legacy (module paths from node names)"
    return "unscoped (every node at the root)"


def _group_side(side: _Side, known: Collection[str]) -> None:
    groups: dict[str, _Group] = {}
    for i, row in enumerate(side.report.layers):
        if side.onnx:
            key = row.scope if row.scope is not None else legacy_scope(row.name, known)
            key = ROOT if key is None else key
            covers = False
        else:
            key = _key_of_torch_row(row)
            covers = not row.self_only
        g = groups.get(key)
        if g is None:
            groups[key] = _Group(key, [row], i, covers)
        else:
            g.rows.append(row)
            g.covers_subtree = g.covers_subtree and covers
    side.groups = groups
    if side.onnx:
        side.exporter = _onnx_exporter(side.report)


def _fold_into_covering_rows(x: _Side, y: _Side) -> None:
    """x's keys that y lacks go into the nearest ancestor whose y row covers its subtree."""
    for key in sorted(x.groups, key=lambda k: -k.count(".")):
        if key in y.groups or key not in x.groups:
            continue
        anc = next((p for p in _ancestors(key) if p in y.groups), None)
        if anc is None or not y.groups[anc].covers_subtree:
            continue
        moved = x.groups.pop(key)
        target = x.groups.get(anc)
        if target is None:
            x.groups[anc] = _Group(anc, moved.rows, moved.first, moved.covers_subtree)
        else:
            target.rows.extend(moved.rows)
            target.first = min(target.first, moved.first)


def _joined_order(a: _Side, b: _Side) -> list[str]:
    order = a.order()
    placed = set(order)
    last = -1  # index in ``order`` after which B-only keys go
    for key in b.order():
        if key in placed:
            last = order.index(key)
            continue
        order.insert(last + 1, key)
        placed.add(key)
        last += 1
    return order


# ------------------------------------------------------------------------------- rules
@dataclass
class Effect:
    """What one rule accounts for in one row: B - A per number, and the words for it."""

    rule: str
    summary: str
    text: str
    delta: dict[str, int]


@dataclass
class _Row:
    key: str
    a: _Group | None
    b: _Group | None

    def value(self, side: str, metric: str) -> int:
        g = self.a if side == "A" else self.b
        return g.metric(metric) if g else 0

    def diff(self) -> dict[str, int]:
        return {m: self.value("B", m) - self.value("A", m) for m in ROW_METRICS}


@dataclass
class _Ctx:
    a: _Side
    b: _Side
    rows: dict[str, _Row]
    batch: Fraction | None = None  # B's batch / A's batch when only the batch differs
    batches: tuple[int, int] | None = None
    # bn key -> (the conv key it folded into, the side that still has the BN)
    folded_bn: dict[str, tuple[str, str]] = field(default_factory=dict)
    bn_into: dict[str, str] = field(default_factory=dict)  # conv key -> bn key
    # conv key -> bn key, where the folded node carries the BatchNorm's scope (onnxscript)
    conv_under_bn: dict[str, str] = field(default_factory=dict)
    fused_act: dict[str, str] = field(default_factory=dict)  # act key -> the key it fused into
    fused_into: dict[str, str] = field(default_factory=dict)  # key -> act key fused into it

    def side(self, label: str) -> _Side:
        return self.a if label == "A" else self.b

    def group(self, label: str, key: str) -> _Group | None:
        return self.side(label).groups.get(key)

    def name(self, label: str) -> str:
        """'PyTorch', 'ONNX', ...; 'A'/'B' when both sides are the same kind."""
        fa, fb = self.a.report.frontend, self.b.report.frontend
        if FRONTEND_NAMES.get(fa, fa) == FRONTEND_NAMES.get(fb, fb):
            return label
        f = self.side(label).report.frontend
        return FRONTEND_NAMES.get(f, f)


def _fmt(n: int | float) -> str:
    return f"{n:,}"


def _signed(n: int) -> str:
    return f"{n:+,}"


def _deltas(delta: dict[str, int], metrics: Sequence[str] = ROW_METRICS) -> str:
    return ", ".join(f"{LABELS[m]} {_signed(delta[m])}" for m in metrics if delta.get(m))


def _amounts(values: dict[str, int]) -> str:
    """'16 FLOPs, 128 bytes read' (magnitudes)."""
    return ", ".join(f"{_fmt(abs(v))} {LABELS[m]}" for m, v in values.items() if v)


def _sign(has: str) -> int:
    """B - A of something only side ``has`` has: +1 when B has it, -1 when A does."""
    return 1 if has == "B" else -1


def _present_only(row: _Row) -> str | None:
    """'A' or 'B' when only that side has non-zero numbers for the row (the other has no rows or
    only zero-cost ones such as Identity)."""
    a_zero = row.a is None or row.a.is_zero()
    b_zero = row.b is None or row.b.is_zero()
    if row.a is not None and not a_zero and b_zero:
        return "A"
    if row.b is not None and not b_zero and a_zero:
        return "B"
    return None


def _scaled(delta: dict[str, int], s: int) -> dict[str, int]:
    return {k: s * v for k, v in delta.items()}


def _numel(shape: Sequence[Any]) -> int:
    return math.prod(int(d) for d in shape) if all(isinstance(d, int) for d in shape) else 0


def _out_numel(row: LayerRow) -> int:
    return _numel(row.output_shapes[0]) if row.output_shapes else 0


def _itemsize(*groups: _Group | None) -> int:
    for g in groups:
        if g is not None and g.metric("params"):
            return max(g.metric("weight_bytes") // g.metric("params"), 1)
    return 4


def rule_batch(ctx: _Ctx, row: _Row, res: dict[str, int]) -> Effect | None:
    """Only the batch differs: per-sample numbers scale by k = B's batch / A's batch, weights do
    not; bytes_read = k * (activations read) + weights read, so the weight part W must solve
    read_B = k * (read_A - W) + W with 0 <= W <= read_A."""
    k = ctx.batch
    if k is None or row.a is None or row.b is None:
        return None
    a = row.a.metrics()
    scaled = ("macs", "flops", "bytes_written", "activation_bytes")
    if any(res[m] != (k - 1) * a[m] for m in scaled):
        return None
    if any(res[m] for m in ("params", "weight_bytes", "buffer_bytes")):
        return None
    w = (k * a["bytes_read"] - (a["bytes_read"] + res["bytes_read"])) / (k - 1)
    if w.denominator != 1 or not 0 <= w <= a["bytes_read"]:
        return None
    delta = {m: res[m] for m in scaled + ("bytes_read",)}
    ba, bb = ctx.batches
    weights = (f", while its {_fmt(int(w))} bytes of weights are read once either way"
               if w else "")
    return Effect("batch", f"batch {ba}->{bb}",
                  f"scales with the batch ({ba} -> {bb}): its arithmetic and the tensors it "
                  f"reads and writes per sample x{float(k):g}{weights} ({_deltas(delta)})", delta)


def rule_batchnorm_folded(ctx: _Ctx, row: _Row, res: dict[str, int]) -> Effect | None:
    """A BatchNorm with no nodes on the other side, right after a convolution or linear layer,
    was folded into it: all its numbers are gone (its output tensor too)."""
    if row.key not in ctx.folded_bn:
        return None
    conv, has = ctx.folded_bn[row.key]
    g = ctx.group(has, row.key)
    delta = _scaled(g.metrics(), _sign(has))
    lacks = ctx.name("B" if has == "A" else "A")
    buffers = g.metric("buffer_bytes")
    stats = f", {_fmt(buffers)} buffer bytes (running statistics)" if buffers else ""
    return Effect("batchnorm-folded", f"BN folded into {conv}",
                  f"{g.type_text(ctx.side(has).onnx)} folded into the preceding `{conv}`: its "
                  f"scale and shift now live in that layer's weights and bias, so {lacks} runs "
                  f"nothing here and its {_fmt(g.metric('params'))} parameters{stats}, "
                  f"{_fmt(g.metric('flops'))} FLOPs and output tensor are gone "
                  f"({_deltas(delta)})", delta)


def rule_folded_scope(ctx: _Ctx, row: _Row, res: dict[str, int]) -> Effect | None:
    """A Conv+BatchNorm pair folded into one node that carries the BatchNorm's scope (onnxscript's
    optimizer): the Conv's numbers leave its own row and arrive in the BatchNorm's."""
    if row.key in ctx.conv_under_bn:
        conv, bn = row.key, ctx.conv_under_bn[row.key]
        arriving = False
    elif row.key in ctx.conv_under_bn.values():
        conv = next(c for c, b in ctx.conv_under_bn.items() if b == row.key)
        bn, arriving = row.key, True
    else:
        return None
    has = ctx.folded_bn[bn][1]
    g = ctx.group(has, conv)
    delta = _scaled(g.metrics(), -_sign(has) if arriving else _sign(has))
    folded = ctx.name("B" if has == "A" else "A")
    if arriving:
        return Effect("folded-scope", f"holds {conv}",
                      f"{folded}'s node for `{conv}` (with `{bn}` folded in) carries this "
                      f"BatchNorm's scope, so {conv}'s numbers are counted here "
                      f"({_deltas(delta)})", delta)
    return Effect("folded-scope", f"counted at {bn}",
                  f"{folded} folded `{bn}` into this layer and gave the folded node the "
                  f"BatchNorm's scope, so this layer's numbers are counted at `{bn}` "
                  f"({_deltas(delta)})", delta)


def rule_dropout_removed(ctx: _Ctx, row: _Row, res: dict[str, int]) -> Effect | None:
    """Dropout is the identity at inference: exporters drop it (or leave an Identity)."""
    has = _present_only(row)
    if has is None or ctx.group(has, row.key).categories() != {"dropout"}:
        return None
    g = ctx.group(has, row.key)
    delta = _scaled(g.metrics(), _sign(has))
    other = ctx.name("B" if has == "A" else "A")
    return Effect("dropout-removed", "Dropout removed",
                  f"Dropout is the identity at inference, so {other} has no node for it, while "
                  f"{ctx.name(has)} counted {_amounts(delta)} for it ({_deltas(delta)})", delta)


def rule_fused_activation(ctx: _Ctx, row: _Row, res: dict[str, int]) -> Effect | None:
    """An activation with no node on the other side, fused into the preceding layer's node
    (FusedConv, FusedGemm, ...): its FLOPs are counted there; its tensor is never written."""
    if row.key not in ctx.fused_act:
        return None
    into = ctx.fused_act[row.key]
    has = "A" if row.a is not None and not row.a.is_zero() else "B"
    g = ctx.group(has, row.key)
    delta = _scaled(g.metrics(), _sign(has))
    other = "B" if has == "A" else "A"
    fused = ", ".join(sorted({t for t in ctx.group(other, into).types if t in FUSED_TYPES}))
    return Effect("fused-activation", f"fused into {into}",
                  f"{g.type_text(ctx.side(has).onnx)} fused into `{into}`'s {fused} node: the "
                  f"activation runs in the same kernel, so its {_fmt(g.metric('flops'))} FLOPs "
                  f"are counted there and its input is never written out and read back "
                  f"({_deltas(delta)})", delta)


def rule_fused_into(ctx: _Ctx, row: _Row, res: dict[str, int]) -> Effect | None:
    """The other half of ``fused-activation``: the fused node does the activation's FLOPs."""
    act = ctx.fused_into.get(row.key)
    if act is None or row.a is None or row.b is None:
        return None
    has_act = "A" if ctx.group("A", act) is not None and not ctx.group("A", act).is_zero() \
        else "B"
    flops = ctx.group(has_act, act).metric("flops")
    delta = {"flops": -_sign(has_act) * flops}
    if res["flops"] != delta["flops"]:
        return None
    side = "B" if has_act == "A" else "A"
    fused = ", ".join(sorted({t for t in ctx.group(side, row.key).types if t in FUSED_TYPES}))
    return Effect("fused-into", f"+{act} fused",
                  f"{ctx.name(side)}'s {fused} also applies `{act}` in the same kernel "
                  f"({_deltas(delta)})", delta)


def rule_num_batches_tracked(ctx: _Ctx, row: _Row, res: dict[str, int]) -> Effect | None:
    """PyTorch's BatchNorm keeps num_batches_tracked (an int64) as a buffer; ONNX
    BatchNormalization has no such input."""
    if row.a is None or row.b is None or ctx.a.onnx == ctx.b.onnx:
        return None
    torch_side = "A" if ctx.b.onnx else "B"
    # counted on the ONNX side, so that a --depth row (a whole subtree) works too
    n = len(ctx.group("B" if torch_side == "A" else "A", row.key).nodes({"BatchNormalization"}))
    if not n:
        return None
    delta = {"buffer_bytes": _sign(torch_side) * n * INDEX_BYTES}
    if res["buffer_bytes"] != delta["buffer_bytes"]:
        return None
    return Effect("num-batches-tracked", "num_batches_tracked",
                  f"PyTorch's BatchNorm also keeps num_batches_tracked (one int64, 8 bytes) as a "
                  f"buffer, which ONNX BatchNormalization does not have ({_deltas(delta)})", delta)


def _bias_nodes(g: _Group | None) -> list[tuple[int, int]]:
    """(bias length, output elements) of the conv/Gemm nodes of an ONNX group that add a bias."""
    out = []
    for r in g.rows if g else []:
        if r.type in ("Conv", "ConvTranspose", "FusedConv", "Gemm", "FusedGemm") \
                and len(r.input_shapes) >= 3 and r.input_shapes[2]:
            out.append((_numel(r.input_shapes[2]), _out_numel(r)))
    return out


def rule_bias_added(ctx: _Ctx, row: _Row, res: dict[str, int]) -> Effect | None:
    """A convolution or Gemm that adds a bias the other side's layer does not have (BatchNorm
    folded into it, or a bias the exporter added): +1 FLOP per output element and the bias read;
    its values are parameters unless the exporter stored an identical bias once for several
    nodes (then they are counted at the first node that reads it)."""
    if row.a is None or row.b is None:
        return None
    cats = row.a.categories() | row.b.categories()
    if not cats & {"conv", "linear"}:
        return None
    nodes = {"A": _bias_nodes(row.a) if ctx.a.onnx else None,
             "B": _bias_nodes(row.b) if ctx.b.onnx else None}
    if nodes["A"] is None and nodes["B"] is None:
        return None

    def sums(label):
        ns = nodes[label] or []
        return sum(c for c, _ in ns), sum(o for _, o in ns)

    (ca, oa), (cb, ob) = sums("A"), sums("B")
    if nodes["A"] is None:  # PyTorch A: it had no bias if the flops say so
        ca = oa = 0
    if nodes["B"] is None:
        cb = ob = 0
    values, outputs = cb - ca, ob - oa
    if not outputs or res["flops"] != outputs:
        return None
    isz = _itemsize(row.b if values > 0 else row.a)
    if res["bytes_read"] != values * isz:
        return None
    params = res["params"]
    if not (0 <= params <= values if values > 0 else values <= params <= 0) \
            or res["weight_bytes"] != params * isz:
        return None
    delta = {"flops": outputs, "bytes_read": values * isz, "params": params,
             "weight_bytes": params * isz}
    has = "B" if values > 0 else "A"
    lacks = "A" if has == "B" else "B"
    bn = ctx.bn_into.get(row.key)
    g = ctx.group(has, row.key)
    layer = next((t for t in g.types if category(t) in ("conv", "linear")), g.types[0])
    lg = ctx.group(lacks, row.key)
    other_layer = next((t for t in lg.types if category(t) in ("conv", "linear")), "layer")
    why = (f"BatchNorm `{bn}` was folded into it" if bn
           else "the exporter added it")
    text = (f"{ctx.name(has)}'s {layer} adds a bias ({_fmt(abs(values))} values) that "
            f"{ctx.name(lacks)}'s {other_layer} does not have, because {why}: one add per "
            f"output element ({_fmt(abs(outputs))} FLOPs) and the bias read")
    shared = abs(values) - abs(params)
    if shared:
        identity = any(r.type == "Identity" for r in ctx.side(has).report.layers)
        text += (f"; {_fmt(shared)} of those values are an initializer identical to one read "
                 f"earlier, which the exporter stores once"
                 f"{' (handed on through Identity nodes, which cost nothing)' if identity else ''}"
                 f", so they are counted as parameters at the first node that reads them")
    summary = f"bias from {bn}" if bn else "bias added"
    if shared:
        summary += " (shared)"
    return Effect("bias-added", summary, f"{text} ({_deltas(delta)})", delta)


def _unclaimed(g: _Group | None) -> int:
    """Values of the weights (and biases) that Conv/Gemm/BatchNormalization nodes read but do not
    count as their parameters: an initializer already counted at an earlier reader."""
    n = 0
    for r in g.rows if g else []:
        if r.type in ("Conv", "ConvTranspose", "FusedConv", "Gemm", "FusedGemm",
                      "BatchNormalization", "LayerNormalization"):
            n += sum(_numel(s) for s in r.input_shapes[1:3] if s) - r.params
    return n


def rule_shared_initializer(ctx: _Ctx, row: _Row, res: dict[str, int]) -> Effect | None:
    """An exporter that stores identical initializers once (the legacy exporter's constant
    folding; freshly initialised biases are all zeros) counts them as parameters at the first
    node that reads them only: the later readers read them but own none."""
    if not res["params"] or any(res[m] for m in ROW_METRICS
                                if m not in ("params", "weight_bytes")):
        return None
    n = {label: _unclaimed(ctx.group(label, row.key)) if ctx.side(label).onnx else 0
         for label in ("A", "B")}
    shared = n["A"] - n["B"]  # B - A of the parameters: fewer where more values are unclaimed
    if shared != res["params"]:
        return None
    has = "B" if shared < 0 else "A"  # the side that reads shared values
    isz = _itemsize(ctx.group(has, row.key))
    delta = {"params": shared, "weight_bytes": shared * isz}
    if res["weight_bytes"] != delta["weight_bytes"]:
        return None
    g = ctx.group(has, row.key)
    layer = next((t for t in g.types if t in ("Conv", "ConvTranspose", "FusedConv", "Gemm",
                                             "FusedGemm", "BatchNormalization",
                                             "LayerNormalization")), g.types[0])
    identity = any(r.type == "Identity" for r in ctx.side(has).report.layers)
    return Effect("shared-initializer", "shared initializer",
                  f"{_fmt(abs(shared))} of the values {ctx.name(has)}'s {layer} reads are an "
                  f"initializer identical to one read earlier, which the exporter stores once"
                  f"{' (handed on through Identity nodes, which cost nothing)' if identity else ''}"
                  f", so they are counted as parameters at the first node that reads them "
                  f"({_deltas(delta)})", delta)


def rule_maxpool_indices(ctx: _Ctx, row: _Row, res: dict[str, int]) -> Effect | None:
    """PyTorch's max_pool2d_with_indices also writes an int64 index tensor (for backward);
    ONNX MaxPool with one output writes the values only."""
    if row.a is None or row.b is None or ctx.a.onnx == ctx.b.onnx:
        return None
    onnx_side = "B" if ctx.b.onnx else "A"
    pools = [r for r in ctx.group(onnx_side, row.key).rows
             if r.type == "MaxPool" and len(r.output_shapes) == 1]
    if not pools:
        return None
    idx = sum(_out_numel(r) for r in pools) * INDEX_BYTES
    s = _sign(onnx_side)  # the ONNX side writes idx bytes fewer
    delta = {"bytes_written": -s * idx, "activation_bytes": -s * idx}
    if res["bytes_written"] != delta["bytes_written"] \
            or res["activation_bytes"] != delta["activation_bytes"]:
        return None
    return Effect("maxpool-indices", "max-pool indices",
                  f"PyTorch's max_pool2d_with_indices also writes an int64 index tensor "
                  f"({_fmt(idx)} bytes, kept for backward); ONNX MaxPool writes only the values "
                  f"({_deltas(delta)})", delta)


def rule_norm_statistics(ctx: _Ctx, row: _Row, res: dict[str, int]) -> Effect | None:
    """PyTorch's native_layer_norm also writes the mean and inverse standard deviation of every
    normalised row (kept for backward); ONNX LayerNormalization with one output writes only y."""
    if row.a is None or row.b is None or ctx.a.onnx == ctx.b.onnx:
        return None
    onnx_side = "B" if ctx.b.onnx else "A"
    torch_side = "A" if onnx_side == "B" else "B"
    tg = ctx.group(torch_side, row.key)
    norms = [r for r in ctx.group(onnx_side, row.key).rows
             if r.type == "LayerNormalization" and len(r.output_shapes) == 1]
    if not norms or "layernorm" not in tg.categories():
        return None
    isz = 4  # float32 statistics (the analysis runs in float32 unless --dtype)
    stats = 0
    for r in norms:
        axis = r.attributes.get("axis", -1) if r.attributes else -1
        shape = r.output_shapes[0]
        stats += 2 * _numel(shape[:axis if axis >= 0 else len(shape) + axis])
    nbytes = stats * isz
    s = _sign(onnx_side)
    delta = {"bytes_written": -s * nbytes, "activation_bytes": -s * nbytes}
    if any(res[m] != v for m, v in delta.items()):
        return None
    return Effect("norm-statistics", "norm statistics",
                  f"PyTorch's native_layer_norm also writes the mean and inverse standard "
                  f"deviation of each of the {_fmt(stats // 2)} normalised rows ({_fmt(nbytes)} "
                  f"bytes, kept for backward); ONNX LayerNormalization writes only its output "
                  f"({_deltas(delta)})", delta)


def rule_decomposed(ctx: _Ctx, row: _Row, res: dict[str, int]) -> Effect | None:
    """One PyTorch op (a leaf module such as GELU) spelled as several ONNX nodes: the extra
    nodes' arithmetic and the intermediate tensors each of them writes."""
    if row.a is None or row.b is None or ctx.a.onnx == ctx.b.onnx:
        return None
    if res["macs"] or any(res[m] for m in ("params", "weight_bytes", "buffer_bytes")):
        return None
    onnx_side = "B" if ctx.b.onnx else "A"
    torch_side = "A" if onnx_side == "B" else "B"
    tg, og = ctx.group(torch_side, row.key), ctx.group(onnx_side, row.key)
    if len(tg.rows) != 1 or tg.rows[0].self_only or tg.metric("macs"):
        return None
    working = [r for r in og.rows if r.bytes_written or r.flops]
    if len(working) < 2:
        return None
    delta = {m: res[m] for m in ("flops", "bytes_read", "bytes_written", "activation_bytes")}
    counts = Counter(r.type for r in working)
    types = ", ".join(t if n == 1 else f"{t} x{n}" for t, n in counts.items())
    return Effect("decomposed", f"{tg.rows[0].type} as {len(working)} nodes",
                  f"ONNX spells {tg.rows[0].type} as {len(working)} nodes ({types}), each "
                  f"writing an intermediate tensor that the next reads back, where PyTorch runs "
                  f"one op ({_deltas(delta)})", delta)


def _in_place(g: _Group | None, side: _Side) -> int:
    """Bytes a PyTorch row writes into existing tensors (written - new tensors)."""
    if g is None or side.onnx:
        return 0
    return g.metric("bytes_written") - g.metric("activation_bytes")


def rule_in_place(ctx: _Ctx, row: _Row, res: dict[str, int]) -> Effect | None:
    """PyTorch in-place ops (ReLU(inplace=True), ``out += identity``) write into an existing
    tensor, so they create no new one; an ONNX node always writes a new tensor. With the writes
    otherwise equal, activation_bytes differ by exactly the bytes written in place."""
    if row.a is None or row.b is None:
        return None
    ip_a, ip_b = _in_place(row.a, ctx.a), _in_place(row.b, ctx.b)
    if ip_a == ip_b:
        return None
    delta = {"activation_bytes": ip_a - ip_b}
    if res["activation_bytes"] != delta["activation_bytes"]:
        return None
    has = "A" if ip_a > ip_b else "B"
    other = "B" if has == "A" else "A"
    g, og = ctx.group(has, row.key), ctx.group(other, row.key)
    ip = abs(ip_a - ip_b)
    if any(r.self_only for r in g.rows):
        what = (f"in-place ops in {g.rows[0].type}'s own forward (e.g. `x += y`) write "
                f"{_fmt(ip)} bytes into existing tensors")
    else:
        what = f"{g.type_text(False)}(inplace=True) writes {_fmt(ip)} bytes into its input"
    return Effect("in-place", "in-place in " + ctx.name(has),
                  f"{ctx.name(has)}'s {what}, creating no new tensor, while each "
                  f"{ctx.name(other)} node ({og.type_text(ctx.side(other).onnx)}) writes a new one "
                  f"({_deltas(delta)})", delta)


def rule_linear_matmul_add(ctx: _Ctx, row: _Row, res: dict[str, int]) -> Effect | None:
    """nn.Linear exported as MatMul + Add (no Gemm): the product goes to an intermediate tensor
    that Add reads back, where addmm adds the bias in the same kernel."""
    if row.a is None or row.b is None or ctx.a.onnx == ctx.b.onnx:
        return None
    onnx_side = "B" if ctx.b.onnx else "A"
    torch_side = "A" if onnx_side == "B" else "B"
    og, tg = ctx.group(onnx_side, row.key), ctx.group(torch_side, row.key)
    if "linear" not in tg.categories() or og.has({"Gemm", "FusedGemm"}):
        return None
    adds = og.nodes({"Add"})
    if not og.nodes({"MatMul"}) or not adds:
        return None
    n = sum(r.bytes_written for r in adds)
    s = _sign(onnx_side)
    delta = {"bytes_read": s * n, "bytes_written": s * n, "activation_bytes": s * n}
    if any(res[m] != v for m, v in delta.items()):
        return None
    return Effect("linear-matmul-add", "Linear as MatMul+Add",
                  f"Linear is exported as MatMul + Add: the product goes to an intermediate "
                  f"tensor ({_fmt(n)} bytes) that Add reads back, where PyTorch's addmm adds the "
                  f"bias in the same kernel ({_deltas(delta)})", delta)


def _is_shape_node(r: LayerRow) -> bool:
    if r.type in SHAPE_TYPES:
        return True
    if r.type not in SMALL_INT_TYPES or r.params or r.macs:
        return False
    return bool(r.output_shapes) and not _unknown_shapes(r) and all(
        isinstance(s, list) and len(s) <= 1 and _numel(s) <= 8 for s in r.output_shapes)


def rule_shape_ops(ctx: _Ctx, row: _Row, res: dict[str, int]) -> Effect | None:
    """ONNX computes shapes at run time with nodes on tiny integer tensors (Shape, Gather,
    Unsqueeze, Concat, ...); PyTorch does that with Python integers, at no tensor cost."""
    def shape_sum(label) -> tuple[dict[str, int], list[str]]:
        g = ctx.group(label, row.key)
        if g is None or not ctx.side(label).onnx:
            return {m: 0 for m in ROW_METRICS}, []
        nodes = [r for r in g.rows if _is_shape_node(r)]
        return ({m: sum(int(getattr(r, m)) for r in nodes) for m in ROW_METRICS},
                [r.type for r in nodes])

    (sa, ta), (sb, tb) = shape_sum("A"), shape_sum("B")
    delta = {m: sb[m] - sa[m] for m in ROW_METRICS}
    if not any(delta.values()):
        return None
    has = "B" if len(tb) >= len(ta) else "A"
    types = ", ".join(dict.fromkeys(tb if has == "B" else ta))
    other = ctx.name("A" if has == "B" else "B")
    shape_note = " (a Shape node counts its whole input as read)" if "Shape" in types else ""
    return Effect("shape-ops", "shape arithmetic",
                  f"{ctx.name(has)} computes a shape at run time with {types} nodes on small "
                  f"integer tensors{shape_note}, which {other} does with plain integers "
                  f"({_deltas(delta)})", delta)


def rule_view_or_copy(ctx: _Ctx, row: _Row, res: dict[str, int]) -> Effect | None:
    """The same data movement is a view on one side (no bytes) and a copy on the other (reads n
    bytes, writes n, creates an n-byte tensor): ONNX Transpose is a real copy where PyTorch's
    permute is a view; PyTorch's contiguous()/clone() copy where ONNX Identity/Reshape only
    rename; a reshape of a non-contiguous tensor copies in PyTorch."""
    n = res["bytes_written"]
    if not n or res["bytes_read"] != n or res["activation_bytes"] != n:
        return None
    if any(res[m] for m in ("params", "weight_bytes", "buffer_bytes", "macs", "flops")):
        return None
    groups = [g for g in (row.a, row.b) if g is not None]
    typed = VIEW_TYPES | COPY_TYPES
    if not any(g.has(typed) or any(r.self_only for r in g.rows) for g in groups):
        return None
    copier = "B" if n > 0 else "A"
    viewer = "A" if copier == "B" else "B"
    g = ctx.group(copier, row.key)
    copies = sorted({t for t in g.types if t in COPY_TYPES}) if g else []
    how = f" ({', '.join(copies)})" if copies else ""
    delta = {"bytes_read": n, "bytes_written": n, "activation_bytes": n}
    return Effect("view-or-copy", "copy vs view",
                  f"{ctx.name(copier)} materialises a copy{how} of {_fmt(abs(n))} bytes where "
                  f"{ctx.name(viewer)} only takes a view (views such as flatten, reshape, permute "
                  f"and Identity move no bytes) ({_deltas(delta)})", delta)


def _unknown_shapes(r: LayerRow) -> bool:
    return any(not isinstance(d, int) for s in r.input_shapes + r.output_shapes
               for d in (s if isinstance(s, list) else [s]))


def rule_uncounted(ctx: _Ctx, row: _Row, res: dict[str, int]) -> Effect | None:
    """A side whose analysis could not cost some of the row's nodes (shape inference left their
    shapes unknown): its numbers are incomplete, and that is the difference."""
    for label in ("A", "B"):
        g = ctx.group(label, row.key)
        if g is None or not ctx.side(label).onnx:
            continue
        unknown = [r for r in g.rows if _unknown_shapes(r)]
        if not unknown:
            continue
        types = ", ".join(dict.fromkeys(r.type for r in unknown))
        delta = dict(res)
        return Effect("uncounted", f"uncounted in {label}",
                      f"{ctx.name(label)} could not count {len(unknown)} of its nodes here "
                      f"({types}): shape inference left their shapes unknown, so its numbers "
                      f"are incomplete ({_deltas(delta)})", delta)
    return None


RULES: list[tuple[str, Callable[[_Ctx, _Row, dict[str, int]], Effect | None]]] = [
    ("batch", rule_batch),
    ("uncounted", rule_uncounted),
    ("folded-scope", rule_folded_scope),
    ("batchnorm-folded", rule_batchnorm_folded),
    ("dropout-removed", rule_dropout_removed),
    ("fused-activation", rule_fused_activation),
    ("num-batches-tracked", rule_num_batches_tracked),
    ("bias-added", rule_bias_added),
    ("fused-into", rule_fused_into),
    ("maxpool-indices", rule_maxpool_indices),
    ("norm-statistics", rule_norm_statistics),
    ("in-place", rule_in_place),
    ("linear-matmul-add", rule_linear_matmul_add),
    ("shape-ops", rule_shape_ops),
    ("shared-initializer", rule_shared_initializer),
    ("view-or-copy", rule_view_or_copy),
    ("decomposed", rule_decomposed),
]
RULE_LABELS = {
    "batch": "batch size", "batchnorm-folded": "BatchNorm folded into the preceding layer",
    "folded-scope": "folded node under the BatchNorm's scope",
    "dropout-removed": "Dropout removed", "fused-activation": "activations fused",
    "fused-into": "fused activations", "num-batches-tracked": "num_batches_tracked buffers",
    "bias-added": "biases added", "shared-initializer": "initializers stored once",
    "maxpool-indices": "max-pool indices",
    "in-place": "in-place ops", "linear-matmul-add": "Linear as MatMul + Add",
    "shape-ops": "shape arithmetic", "view-or-copy": "copies vs views",
    "uncounted": "nodes that could not be counted", "norm-statistics": "norm statistics",
    "decomposed": "ops spelled as several nodes", "moved": "numbers counted in another row",
    UNEXPLAINED: UNEXPLAINED,
}


def _unexplained(row: _Row, res: dict[str, int]) -> Effect:
    parts = [f"{LABELS[m]} {_signed(v)}" for m, v in res.items() if v]
    missing = ("A has no rows for it; " if row.a is None
               else "B has no rows for it; " if row.b is None else "")
    return Effect(UNEXPLAINED, UNEXPLAINED,
                  f"unexplained: {missing}{', '.join(parts)} (no rule accounts for "
                  f"{'them' if len(parts) > 1 else 'it'})", dict(res))


def explain_row(ctx: _Ctx, row: _Row) -> tuple[list[Effect], dict[str, int]]:
    """The rules that account for the row's differences, and what is left (B - A)."""
    res = row.diff()
    effects: list[Effect] = []
    for _, rule in RULES:
        if not any(res.values()):
            break
        effect = rule(ctx, row, res)
        if effect is None:
            continue
        effects.append(effect)
        for m, v in effect.delta.items():
            res[m] -= v
    return effects, res


def explain_moves(ctx: _Ctx, residuals: dict[str, dict[str, int]]) -> dict[str, list[Effect]]:
    """Numbers one side counts in a module and the other in one of its ancestors (the node that
    does the work carries the parent's scope, e.g. MultiheadAttention using ``out_proj``'s
    weights in its own forward): a row's leftover is exactly the negative of an ancestor's on
    every number it has. Both rows get a ``moved`` effect; ``residuals`` are updated."""
    out: dict[str, list[Effect]] = defaultdict(list)
    for key in sorted(residuals, key=lambda k: -k.count(".") if k else 1):
        res = residuals[key]
        if not key or not any(res.values()):
            continue
        for anc in _ancestors(key):
            up = residuals.get(anc)
            if up is None or not all(up[m] == -v for m, v in res.items() if v):
                continue
            delta = {m: v for m, v in res.items() if v}
            # the side that counts the numbers at the ancestor: where the ancestor gained them
            side = "B" if any(up[m] > 0 for m in delta) else "A"
            where = ctx.name(side)
            out[key].append(Effect("moved", f"counted at {anc or ROOT_LABEL}",
                                   f"{where} counts these numbers at `{anc or ROOT_LABEL}` "
                                   f"instead: the node that does this work carries the "
                                   f"ancestor's scope ({_deltas(delta)})", delta))
            back = {m: -v for m, v in delta.items()}
            out[anc].append(Effect("moved", f"includes {key}",
                                   f"{where} counts numbers of `{key}` here, where the node that "
                                   f"does the work carries this module's scope "
                                   f"({_deltas(back)})", back))
            for m, v in delta.items():
                res[m] -= v
                up[m] += v
            break
    return out


# ------------------------------------------------------------------------------- pre-pass
def _previous(side: _Side, key: str) -> str | None:
    """The key before ``key`` in the side's row order, skipping rows that cost nothing."""
    order = side.order()
    i = order.index(key)
    for k in reversed(order[:i]):
        if not side.groups[k].is_zero():
            return k
    return None


def _find_folds(ctx: _Ctx) -> None:
    """BatchNorms folded into the layer before them; activations fused into the node before."""
    for key, row in ctx.rows.items():
        has = _present_only(row)
        if has is None:
            _find_folded_scope(ctx, key, row)
            continue
        other = "B" if has == "A" else "A"
        g = ctx.group(has, key)
        cats = g.categories()
        prev = _previous(ctx.side(has), key)
        if prev is None:
            continue
        prev_cats = ctx.group(has, prev).categories()
        prev_other = ctx.group(other, prev)
        if cats == {"batchnorm"} and prev_cats & {"conv", "linear"} and prev_other is not None:
            ctx.folded_bn[key] = (prev, has)
            ctx.bn_into[prev] = key
        elif cats == {"activation"} and prev_other is not None \
                and prev_other.has(FUSED_TYPES):
            ctx.fused_act[key] = prev
            ctx.fused_into[prev] = key


def _find_folded_scope(ctx: _Ctx, key: str, row: _Row) -> None:
    """A BatchNorm row whose other side holds a Conv/Gemm node and no BatchNormalization, right
    after a conv or linear layer that the other side lacks: folded, under the BN's scope."""
    if row.a is None or row.b is None:
        return
    for has, other in (("A", "B"), ("B", "A")):
        g, og = ctx.group(has, key), ctx.group(other, key)
        if g.categories() != {"batchnorm"} or og.nodes(CATEGORIES["batchnorm"]) \
                or not og.has(CATEGORIES["conv"] | CATEGORIES["linear"]):
            continue
        prev = _previous(ctx.side(has), key)
        if prev is None or not ctx.group(has, prev).categories() & {"conv", "linear"}:
            continue
        lost = ctx.group(other, prev)
        if lost is None or lost.is_zero():
            ctx.conv_under_bn[prev] = key
            ctx.folded_bn[key] = (prev, has)
            ctx.bn_into[prev] = key
            return


def _batch_ratio(a: Report, b: Report) -> tuple[Fraction, tuple[int, int]] | None:
    """B's batch / A's batch when the inputs differ only in their first dimension, by the same
    ratio for every input."""
    sa = [d.get("shape") or [] for d in a.inputs]
    sb = [d.get("shape") or [] for d in b.inputs]
    if len(sa) != len(sb) or not sa or sa == sb:
        return None
    ratios = set()
    for x, y in zip(sa, sb):
        if len(x) != len(y) or not x or x[1:] != y[1:] or not x[0] or not y[0]:
            return None
        ratios.add((x[0], y[0]))
    if len({Fraction(bb, ba) for ba, bb in ratios}) != 1:
        return None
    ba, bb = next(iter(ratios))
    return Fraction(bb, ba), (ba, bb)


# ------------------------------------------------------------------------------- totals
def _pct(diff: int, base: int) -> str:
    return f", {diff / base:+.2%}" if base else ""


def _explain_total(metric: str, a: int, b: int, contributions: dict[str, list[int]],
                   row_sums: tuple[int, int]) -> tuple[list[str], str]:
    diff = b - a
    ranked = [(rule, total, n) for rule, (total, n) in
              sorted(contributions.items(), key=lambda kv: -abs(kv[1][0])) if total]
    parts = [f"{RULE_LABELS.get(rule, rule)} {_signed(total)} ({n} row{'s' if n != 1 else ''})"
             for rule, total, n in ranked]
    rules = [rule for rule, _, _ in ranked]
    gap = diff - (row_sums[1] - row_sums[0])
    if gap:
        parts.append(f"the rows do not sum to the totals ({_signed(gap)} left unexplained)")
        rules.append(UNEXPLAINED)
    if not parts:
        parts.append("the rows' differences cancel out")
    return rules, (f"{LABELS[metric]}: {_fmt(a)} vs {_fmt(b)} ({_signed(diff)}{_pct(diff, a)}): "
                   + "; ".join(parts))


def _explain_peak(ctx: _Ctx, a: int, b: int, act_rules: set[str]) -> tuple[list[str], str]:
    diff = b - a
    head = f"{LABELS['peak_activation_bytes']}: {_fmt(a)} vs {_fmt(b)} ({_signed(diff)}" \
           f"{_pct(diff, a)}): "
    causes = [RULE_LABELS.get(r, r) for r in sorted(act_rules) if r != UNEXPLAINED]
    if ctx.batch is not None:
        ba, bb = ctx.batches
        return ["batch"], head + (f"the live tensors scale with the batch ({ba} -> {bb}), "
                                  f"the weights do not")
    frontends = {ctx.a.report.frontend, ctx.b.report.frontend}
    if frontends == {"torch", "torchscript"}:
        script = "A" if ctx.a.report.frontend == "torchscript" else "B"
        lower = (diff < 0) == (script == "B")
        text = (f"TorchScript's interpreter frees each tensor right after its last use, while "
                f"an eager PyTorch forward keeps a tensor alive as long as a Python variable "
                f"names it (in `x = f(g(x))` the old `x` lives until the assignment), so "
                f"{ctx.name(script)}'s peak is {'lower' if lower else 'higher'}")
        if causes:
            text += f"; the tensors also differ as the rows say ({', '.join(causes)})"
        return ["interpreter-lifetimes"], head + text
    if ctx.a.onnx != ctx.b.onnx:
        how = {True: "a static liveness plan over the graph's tensors (a node's inputs and "
                     "outputs live together while it runs)",
               False: "the tensor lifetimes of an eager run (a tensor is freed when its last "
                      "reference dies)"}
        text = head + (f"the peak is measured differently: {ctx.name('A')} from {how[ctx.a.onnx]}, "
                f"{ctx.name('B')} from {how[ctx.b.onnx]}")
        if causes:
            text += f", over tensors that differ as the rows say ({', '.join(causes)})"
        return ["memory-model"], text
    if causes:
        return sorted(act_rules - {UNEXPLAINED}) or [UNEXPLAINED], \
            head + f"the tensors the two create differ as the rows say ({', '.join(causes)})"
    return [UNEXPLAINED], head + ("unexplained: both sides create the same tensors but their "
                                  "peaks differ")


# ------------------------------------------------------------------------------- compare
def _describe_side(side: _Side) -> dict[str, Any]:
    r = side.report
    return {"source": side.source, "model": r.model, "frontend": r.frontend, "inputs": r.inputs,
            "exporter": side.exporter, "layers": len(r.layers), "kind": r.kind}


def compare(a: Any, b: Any, inputs: Any = None) -> Comparison:
    """Join two reports of the same model by module path and explain every difference.

    ``a``/``b``: a model spec, TorchScript file, ONNX file, saved report JSON or Report.
    ``inputs``: input shapes for both sides (as ``analyze`` takes them); by default each side's
    own, and a TorchScript file takes the other side's."""
    ra, rb, notes = _load_sides(a, b, inputs)
    side_a = _Side("A", ra, _source(a), ra.frontend == "onnx")
    side_b = _Side("B", rb, _source(b), rb.frontend == "onnx")
    # keys: a side that parses legacy node names resolves suffixes against the other's paths
    _group_side(side_a, ())
    _group_side(side_b, _with_ancestors(side_a.groups))
    if side_a.onnx:
        _group_side(side_a, _with_ancestors(side_b.groups))
    _fold_into_covering_rows(side_a, side_b)
    _fold_into_covering_rows(side_b, side_a)
    order = _joined_order(side_a, side_b)
    rows = {k: _Row(k, side_a.groups.get(k), side_b.groups.get(k)) for k in order}
    ctx = _Ctx(side_a, side_b, rows)
    ratio = _batch_ratio(ra, rb)
    if ratio:
        ctx.batch, ctx.batches = ratio
    _find_folds(ctx)

    out_rows: list[CompareRow] = []
    explanations: list[str] = []
    contributions: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(
        lambda: [0, 0]))
    act_rules: set[str] = set()
    unexplained = 0
    residuals: dict[str, dict[str, int]] = {}
    pending: dict[str, list[Effect]] = {}
    for key in order:
        row = rows[key]
        diff = {m: v for m, v in row.diff().items() if v}
        cr = CompareRow(module=key or ROOT_LABEL,
                        a_type=row.a.type_text(side_a.onnx) if row.a else "",
                        b_type=row.b.type_text(side_b.onnx) if row.b else "",
                        a=row.a.metrics() if row.a else None,
                        b=row.b.metrics() if row.b else None, diff=diff)
        if diff:
            effects, residuals[key] = explain_row(ctx, row)
            pending[key] = effects
        out_rows.append(cr)
    moves = explain_moves(ctx, residuals)
    for cr, key in zip(out_rows, order):
        if key not in pending:
            continue
        effects = pending[key] + moves.get(key, [])
        if any(residuals[key].values()):
            effects.append(_unexplained(rows[key], residuals[key]))
        cr.rules = [e.rule for e in effects]
        cr.summary = "; ".join(e.summary for e in effects)
        text = "; ".join(e.text for e in effects)
        cr.explanation = text[0].upper() + text[1:] + "."
        explanations.append(f"{cr.module}: {cr.explanation}")
        unexplained += UNEXPLAINED in cr.rules
        for e in effects:
            for m, v in e.delta.items():
                if v:
                    contributions[m][e.rule][0] += v
                    contributions[m][e.rule][1] += 1
            if e.delta.get("activation_bytes"):
                act_rules.add(e.rule)

    totals: list[TotalRow] = []
    total_texts: list[str] = []
    for m in TOTAL_METRICS:
        ta, tb = int(getattr(ra.totals, m) or 0), int(getattr(rb.totals, m) or 0)
        tr = TotalRow(m, ta, tb, tb - ta)
        if tr.diff:
            if m == "peak_activation_bytes":
                tr.rules, text = _explain_peak(ctx, ta, tb, act_rules)
            else:
                sums = (sum(int(getattr(r, m) or 0) for r in ra.layers),
                        sum(int(getattr(r, m) or 0) for r in rb.layers))
                tr.rules, text = _explain_total(m, ta, tb, contributions[m], sums)
            tr.explanation = text + "."
            unexplained += UNEXPLAINED in tr.rules
            total_texts.append(tr.explanation)
        totals.append(tr)
    explanations += total_texts
    identical = not any(r.diff for r in out_rows) and not any(t.diff for t in totals)
    return Comparison(a=_describe_side(side_a), b=_describe_side(side_b), totals=totals,
                      rows=out_rows, explanations=explanations, identical=identical,
                      unexplained=unexplained, notes=notes,
                      environment=dict(ra.environment or rb.environment or {}))
