"""The explanation rules: each predicts how much of a row's difference (B - A) it accounts
for; ``explain_row`` applies them in order and ``explain_moves`` pairs leftovers with an
ancestor's."""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from layerscope.analysis.compare.context import Context, Row, fmt, present_only, signed
from layerscope.analysis.compare.result import (
    COPY_TYPES,
    FUSED_TYPES,
    INDEX_BYTES,
    LABELS,
    ROOT_LABEL,
    ROW_METRICS,
    SHAPE_TYPES,
    SMALL_INT_TYPES,
    UNEXPLAINED,
    VIEW_TYPES,
    category,
)
from layerscope.analysis.compare.sides import Group, Side
from layerscope.core import tree
from layerscope.core.report import LayerRow


# ------------------------------------------------------------------------------- rules
@dataclass
class Effect:
    """What one rule accounts for in one row: B - A per number, and the words for it."""

    rule: str
    summary: str
    text: str
    delta: dict[str, int]


@dataclass(frozen=True)
class Rule:
    name: str
    label: str
    # (context, row, what is left of B - A) -> the part it accounts for, or None
    explain: Callable[[Context, Row, dict[str, int]], Effect | None] | None


def _effect(summary: str, text: str, delta: dict[str, int]) -> Effect:
    """A rule function's finding; ``explain_row`` fills in the rule's name from RULES."""
    return Effect("", summary, text, delta)


def _deltas(delta: dict[str, int], metrics: Sequence[str] = ROW_METRICS) -> str:
    return ", ".join(f"{LABELS[m]} {signed(delta[m])}" for m in metrics if delta.get(m))


def _amounts(values: dict[str, int]) -> str:
    """'16 FLOPs, 128 bytes read' (magnitudes)."""
    return ", ".join(f"{fmt(abs(v))} {LABELS[m]}" for m, v in values.items() if v)


def _sign(has: str) -> int:
    """B - A of something only side ``has`` has: +1 when B has it, -1 when A does."""
    return 1 if has == "B" else -1


def _scaled(delta: dict[str, int], s: int) -> dict[str, int]:
    return {k: s * v for k, v in delta.items()}


def _numel(shape: Sequence[Any]) -> int:
    return math.prod(int(d) for d in shape) if all(isinstance(d, int) for d in shape) else 0


def _out_numel(row: LayerRow) -> int:
    return _numel(row.output_shapes[0]) if row.output_shapes else 0


def _itemsize(*groups: Group | None) -> int:
    for g in groups:
        if g is not None and g.metric("params"):
            return max(g.metric("weight_bytes") // g.metric("params"), 1)
    return 4


def rule_batch(ctx: Context, row: Row, res: dict[str, int]) -> Effect | None:
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
    weights = (f", while its {fmt(int(w))} bytes of weights are read once either way"
               if w else "")
    return _effect(f"batch {ba}->{bb}",
                  f"scales with the batch ({ba} -> {bb}): its arithmetic and the tensors it "
                  f"reads and writes per sample x{float(k):g}{weights} ({_deltas(delta)})", delta)


def rule_batchnorm_folded(ctx: Context, row: Row, res: dict[str, int]) -> Effect | None:
    """A BatchNorm with no nodes on the other side, right after a convolution or linear layer,
    was folded into it: all its numbers are gone (its output tensor too)."""
    if row.key not in ctx.folded_bn:
        return None
    conv, has = ctx.folded_bn[row.key]
    g = ctx.group(has, row.key)
    delta = _scaled(g.metrics(), _sign(has))
    lacks = ctx.name("B" if has == "A" else "A")
    buffers = g.metric("buffer_bytes")
    stats = f", {fmt(buffers)} buffer bytes (running statistics)" if buffers else ""
    return _effect(f"BN folded into {conv}",
                  f"{g.type_text(ctx.side(has).onnx)} folded into the preceding `{conv}`: its "
                  f"scale and shift now live in that layer's weights and bias, so {lacks} runs "
                  f"nothing here and its {fmt(g.metric('params'))} parameters{stats}, "
                  f"{fmt(g.metric('flops'))} FLOPs and output tensor are gone "
                  f"({_deltas(delta)})", delta)


def rule_folded_scope(ctx: Context, row: Row, res: dict[str, int]) -> Effect | None:
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
        return _effect(f"holds {conv}",
                      f"{folded}'s node for `{conv}` (with `{bn}` folded in) carries this "
                      f"BatchNorm's scope, so {conv}'s numbers are counted here "
                      f"({_deltas(delta)})", delta)
    return _effect(f"counted at {bn}",
                  f"{folded} folded `{bn}` into this layer and gave the folded node the "
                  f"BatchNorm's scope, so this layer's numbers are counted at `{bn}` "
                  f"({_deltas(delta)})", delta)


def rule_dropout_removed(ctx: Context, row: Row, res: dict[str, int]) -> Effect | None:
    """Dropout is the identity at inference: exporters drop it (or leave an Identity)."""
    has = present_only(row)
    if has is None or ctx.group(has, row.key).categories() != {"dropout"}:
        return None
    g = ctx.group(has, row.key)
    delta = _scaled(g.metrics(), _sign(has))
    other = ctx.name("B" if has == "A" else "A")
    return _effect("Dropout removed",
                  f"Dropout is the identity at inference, so {other} has no node for it, while "
                  f"{ctx.name(has)} counted {_amounts(delta)} for it ({_deltas(delta)})", delta)


def rule_fused_activation(ctx: Context, row: Row, res: dict[str, int]) -> Effect | None:
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
    return _effect(f"fused into {into}",
                  f"{g.type_text(ctx.side(has).onnx)} fused into `{into}`'s {fused} node: the "
                  f"activation runs in the same kernel, so its {fmt(g.metric('flops'))} FLOPs "
                  f"are counted there and its input is never written out and read back "
                  f"({_deltas(delta)})", delta)


def rule_fused_into(ctx: Context, row: Row, res: dict[str, int]) -> Effect | None:
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
    return _effect(f"+{act} fused",
                  f"{ctx.name(side)}'s {fused} also applies `{act}` in the same kernel "
                  f"({_deltas(delta)})", delta)


def rule_num_batches_tracked(ctx: Context, row: Row, res: dict[str, int]) -> Effect | None:
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
    return _effect("num_batches_tracked",
                  f"PyTorch's BatchNorm also keeps num_batches_tracked (one int64, 8 bytes) as a "
                  f"buffer, which ONNX BatchNormalization does not have ({_deltas(delta)})", delta)


def _bias_nodes(g: Group | None) -> list[tuple[int, int]]:
    """(bias length, output elements) of the conv/Gemm nodes of an ONNX group that add a bias."""
    out = []
    for r in g.rows if g else []:
        if r.type in ("Conv", "ConvTranspose", "FusedConv", "Gemm", "FusedGemm") \
                and len(r.input_shapes) >= 3 and r.input_shapes[2]:
            out.append((_numel(r.input_shapes[2]), _out_numel(r)))
    return out


def rule_bias_added(ctx: Context, row: Row, res: dict[str, int]) -> Effect | None:
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
    text = (f"{ctx.name(has)}'s {layer} adds a bias ({fmt(abs(values))} values) that "
            f"{ctx.name(lacks)}'s {other_layer} does not have, because {why}: one add per "
            f"output element ({fmt(abs(outputs))} FLOPs) and the bias read")
    shared = abs(values) - abs(params)
    if shared:
        identity = any(r.type == "Identity" for r in ctx.side(has).report.layers)
        text += (f"; {fmt(shared)} of those values are an initializer identical to one read "
                 f"earlier, which the exporter stores once"
                 f"{' (handed on through Identity nodes, which cost nothing)' if identity else ''}"
                 f", so they are counted as parameters at the first node that reads them")
    summary = f"bias from {bn}" if bn else "bias added"
    if shared:
        summary += " (shared)"
    return _effect(summary, f"{text} ({_deltas(delta)})", delta)


def _unclaimed(g: Group | None) -> int:
    """Values of the weights (and biases) that Conv/Gemm/BatchNormalization nodes read but do not
    count as their parameters: an initializer already counted at an earlier reader."""
    n = 0
    for r in g.rows if g else []:
        if r.type in ("Conv", "ConvTranspose", "FusedConv", "Gemm", "FusedGemm",
                      "BatchNormalization", "LayerNormalization"):
            n += sum(_numel(s) for s in r.input_shapes[1:3] if s) - r.params
    return n


def rule_shared_initializer(ctx: Context, row: Row, res: dict[str, int]) -> Effect | None:
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
    return _effect("shared initializer",
                  f"{fmt(abs(shared))} of the values {ctx.name(has)}'s {layer} reads are an "
                  f"initializer identical to one read earlier, which the exporter stores once"
                  f"{' (handed on through Identity nodes, which cost nothing)' if identity else ''}"
                  f", so they are counted as parameters at the first node that reads them "
                  f"({_deltas(delta)})", delta)


def rule_maxpool_indices(ctx: Context, row: Row, res: dict[str, int]) -> Effect | None:
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
    return _effect("max-pool indices",
                  f"PyTorch's max_pool2d_with_indices also writes an int64 index tensor "
                  f"({fmt(idx)} bytes, kept for backward); ONNX MaxPool writes only the values "
                  f"({_deltas(delta)})", delta)


def rule_norm_statistics(ctx: Context, row: Row, res: dict[str, int]) -> Effect | None:
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
    return _effect("norm statistics",
                  f"PyTorch's native_layer_norm also writes the mean and inverse standard "
                  f"deviation of each of the {fmt(stats // 2)} normalised rows ({fmt(nbytes)} "
                  f"bytes, kept for backward); ONNX LayerNormalization writes only its output "
                  f"({_deltas(delta)})", delta)


def rule_decomposed(ctx: Context, row: Row, res: dict[str, int]) -> Effect | None:
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
    return _effect(f"{tg.rows[0].type} as {len(working)} nodes",
                  f"ONNX spells {tg.rows[0].type} as {len(working)} nodes ({types}), each "
                  f"writing an intermediate tensor that the next reads back, where PyTorch runs "
                  f"one op ({_deltas(delta)})", delta)


def _in_place(g: Group | None, side: Side) -> int:
    """Bytes a PyTorch row writes into existing tensors (written - new tensors)."""
    if g is None or side.onnx:
        return 0
    return g.metric("bytes_written") - g.metric("activation_bytes")


def rule_in_place(ctx: Context, row: Row, res: dict[str, int]) -> Effect | None:
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
                f"{fmt(ip)} bytes into existing tensors")
    else:
        what = f"{g.type_text(False)}(inplace=True) writes {fmt(ip)} bytes into its input"
    return _effect("in-place in " + ctx.name(has),
                  f"{ctx.name(has)}'s {what}, creating no new tensor, while each "
                  f"{ctx.name(other)} node ({og.type_text(ctx.side(other).onnx)}) writes a new one "
                  f"({_deltas(delta)})", delta)


def rule_linear_matmul_add(ctx: Context, row: Row, res: dict[str, int]) -> Effect | None:
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
    return _effect("Linear as MatMul+Add",
                  f"Linear is exported as MatMul + Add: the product goes to an intermediate "
                  f"tensor ({fmt(n)} bytes) that Add reads back, where PyTorch's addmm adds the "
                  f"bias in the same kernel ({_deltas(delta)})", delta)


def _is_shape_node(r: LayerRow) -> bool:
    if r.type in SHAPE_TYPES:
        return True
    if r.type not in SMALL_INT_TYPES or r.params or r.macs:
        return False
    return bool(r.output_shapes) and not _unknown_shapes(r) and all(
        isinstance(s, list) and len(s) <= 1 and _numel(s) <= 8 for s in r.output_shapes)


def rule_shape_ops(ctx: Context, row: Row, res: dict[str, int]) -> Effect | None:
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
    return _effect("shape arithmetic",
                  f"{ctx.name(has)} computes a shape at run time with {types} nodes on small "
                  f"integer tensors{shape_note}, which {other} does with plain integers "
                  f"({_deltas(delta)})", delta)


def rule_view_or_copy(ctx: Context, row: Row, res: dict[str, int]) -> Effect | None:
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
    return _effect("copy vs view",
                  f"{ctx.name(copier)} materialises a copy{how} of {fmt(abs(n))} bytes where "
                  f"{ctx.name(viewer)} only takes a view (views such as flatten, reshape, permute "
                  f"and Identity move no bytes) ({_deltas(delta)})", delta)


def _unknown_shapes(r: LayerRow) -> bool:
    return any(not isinstance(d, int) for s in r.input_shapes + r.output_shapes
               for d in (s if isinstance(s, list) else [s]))


def rule_uncounted(ctx: Context, row: Row, res: dict[str, int]) -> Effect | None:
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
        return _effect(f"uncounted in {label}",
                      f"{ctx.name(label)} could not count {len(unknown)} of its nodes here "
                      f"({types}): shape inference left their shapes unknown, so its numbers "
                      f"are incomplete ({_deltas(delta)})", delta)
    return None


def rule_only_in_one(ctx: Context, row: Row, res: dict[str, int]) -> Effect | None:
    """A layer one model has and the other has no module for (two module trees, neither an
    export of the other): all its numbers are the difference, signed by which side has it."""
    has = present_only(row)
    if has is None or ctx.a.onnx or ctx.b.onnx:
        return None
    lacks = "B" if has == "A" else "A"
    if ctx.group(lacks, row.key) is not None:
        return None
    g = ctx.group(has, row.key)
    delta = _scaled(g.metrics(), _sign(has))
    if any(res.get(m, 0) != v for m, v in delta.items()):
        return None
    kind = g.type_text(ctx.side(has).onnx)
    amounts = _amounts({m: v for m, v in g.metrics().items()
                        if m in ("params", "buffer_bytes", "flops", "activation_bytes")})
    verb = "adds" if has == "B" else "does without"
    return _effect(f"only in {ctx.name(has)}",
                  f"only {ctx.name(has)} has this {kind}: {ctx.name(lacks)} has no "
                  f"`{row.key}`, so B {verb} its {amounts} ({_deltas(delta)})", delta)


# Every rule, declared once, in the order they are tried: its name (in CompareRow.rules and the
# JSON), its label (in the explanations of totals), and the function that applies it.
BATCH = Rule("batch", "batch size", rule_batch)  # named: totals.explain_peak cites it too
RULES: list[Rule] = [
    BATCH,
    Rule("uncounted", "nodes that could not be counted", rule_uncounted),
    Rule("folded-scope", "folded node under the BatchNorm's scope", rule_folded_scope),
    Rule("batchnorm-folded", "BatchNorm folded into the preceding layer", rule_batchnorm_folded),
    Rule("dropout-removed", "Dropout removed", rule_dropout_removed),
    Rule("fused-activation", "activations fused", rule_fused_activation),
    Rule("num-batches-tracked", "num_batches_tracked buffers", rule_num_batches_tracked),
    Rule("bias-added", "biases added", rule_bias_added),
    Rule("fused-into", "fused activations", rule_fused_into),
    Rule("maxpool-indices", "max-pool indices", rule_maxpool_indices),
    Rule("norm-statistics", "norm statistics", rule_norm_statistics),
    Rule("in-place", "in-place ops", rule_in_place),
    Rule("linear-matmul-add", "Linear as MatMul + Add", rule_linear_matmul_add),
    Rule("shape-ops", "shape arithmetic", rule_shape_ops),
    Rule("shared-initializer", "initializers stored once", rule_shared_initializer),
    Rule("view-or-copy", "copies vs views", rule_view_or_copy),
    Rule("decomposed", "ops spelled as several nodes", rule_decomposed),
    Rule("only-in-one", "layers one model has and the other does not", rule_only_in_one),
]
# Effects that no rule function makes: a leftover matched with an ancestor's, and what is left.
MOVED = Rule("moved", "numbers counted in another row", None)
UNEXPLAINED_RULE = Rule(UNEXPLAINED, UNEXPLAINED, None)
RULE_LABELS = {r.name: r.label for r in (*RULES, MOVED, UNEXPLAINED_RULE)}


def unexplained_effect(row: Row, res: dict[str, int]) -> Effect:
    parts = [f"{LABELS[m]} {signed(v)}" for m, v in res.items() if v]
    missing = ("A has no rows for it; " if row.a is None
               else "B has no rows for it; " if row.b is None else "")
    return Effect(UNEXPLAINED, UNEXPLAINED,
                  f"unexplained: {missing}{', '.join(parts)} (no rule accounts for "
                  f"{'them' if len(parts) > 1 else 'it'})", dict(res))


def explain_row(ctx: Context, row: Row) -> tuple[list[Effect], dict[str, int]]:
    """The rules that account for the row's differences, and what is left (B - A)."""
    res = row.diff()
    effects: list[Effect] = []
    for rule in RULES:
        if not any(res.values()):
            break
        effect = rule.explain(ctx, row, res)
        if effect is None:
            continue
        effect.rule = rule.name
        effects.append(effect)
        for m, v in effect.delta.items():
            res[m] -= v
    return effects, res


def explain_moves(ctx: Context, residuals: dict[str, dict[str, int]]) -> dict[str, list[Effect]]:
    """Numbers one side counts in a module and the other in one of its ancestors (the node that
    does the work carries the parent's scope, e.g. MultiheadAttention using ``out_proj``'s
    weights in its own forward): a row's leftover is exactly the negative of an ancestor's on
    every number it has. Both rows get a ``moved`` effect; ``residuals`` are updated."""
    out: dict[str, list[Effect]] = defaultdict(list)
    for key in sorted(residuals, key=lambda k: -tree.depth(k)):
        res = residuals[key]
        if not key or not any(res.values()):
            continue
        for anc in tree.ancestors(key):
            up = residuals.get(anc)
            if up is None or not all(up[m] == -v for m, v in res.items() if v):
                continue
            delta = {m: v for m, v in res.items() if v}
            # the side that counts the numbers at the ancestor: where the ancestor gained them
            side = "B" if any(up[m] > 0 for m in delta) else "A"
            where = ctx.name(side)
            out[key].append(Effect(MOVED.name, f"counted at {anc or ROOT_LABEL}",
                                   f"{where} counts these numbers at `{anc or ROOT_LABEL}` "
                                   f"instead: the node that does this work carries the "
                                   f"ancestor's scope ({_deltas(delta)})", delta))
            back = {m: -v for m, v in delta.items()}
            out[anc].append(Effect(MOVED.name, f"includes {key}",
                                   f"{where} counts numbers of `{key}` here, where the node that "
                                   f"does the work carries this module's scope "
                                   f"({_deltas(back)})", back))
            for m, v in delta.items():
                res[m] -= v
                up[m] += v
            break
    return out
