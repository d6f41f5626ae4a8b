"""The rules for what an exporter changes: BatchNorm folded (and the node left under its
scope), Dropout removed, activations fused, num_batches_tracked buffers, biases added,
initializers stored once, max-pool indices, norm statistics."""
from __future__ import annotations

from layerscope.analysis.compare.context import Context, Row, fmt, present_only
from layerscope.analysis.compare.effects import (
    Effect,
    amounts_text,
    deltas,
    finding,
    itemsize_of,
    numel_of,
    out_numel,
    scaled_by,
    sign_of,
)
from layerscope.analysis.compare.result import (
    FUSED_TYPES,
    INDEX_BYTES,
    ROW_METRICS,
    category,
)
from layerscope.analysis.compare.sides import Group


def rule_batchnorm_folded(ctx: Context, row: Row, res: dict[str, int]) -> Effect | None:
    """A BatchNorm with no nodes on the other side, right after a convolution or linear layer,
    was folded into it: all its numbers are gone (its output tensor too)."""
    if row.key not in ctx.folded_bn:
        return None
    conv, has = ctx.folded_bn[row.key]
    g = ctx.group(has, row.key)
    delta = scaled_by(g.metrics(), sign_of(has))
    lacks = ctx.name("B" if has == "A" else "A")
    buffers = g.metric("buffer_bytes")
    stats = f", {fmt(buffers)} buffer bytes (running statistics)" if buffers else ""
    return finding(f"BN folded into {conv}",
                  f"{g.type_text(ctx.side(has).onnx)} folded into the preceding `{conv}`: its "
                  f"scale and shift now live in that layer's weights and bias, so {lacks} runs "
                  f"nothing here and its {fmt(g.metric('params'))} parameters{stats}, "
                  f"{fmt(g.metric('flops'))} FLOPs and output tensor are gone "
                  f"({deltas(delta)})", delta)


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
    delta = scaled_by(g.metrics(), -sign_of(has) if arriving else sign_of(has))
    folded = ctx.name("B" if has == "A" else "A")
    if arriving:
        return finding(f"holds {conv}",
                      f"{folded}'s node for `{conv}` (with `{bn}` folded in) carries this "
                      f"BatchNorm's scope, so {conv}'s numbers are counted here "
                      f"({deltas(delta)})", delta)
    return finding(f"counted at {bn}",
                  f"{folded} folded `{bn}` into this layer and gave the folded node the "
                  f"BatchNorm's scope, so this layer's numbers are counted at `{bn}` "
                  f"({deltas(delta)})", delta)


def rule_dropout_removed(ctx: Context, row: Row, res: dict[str, int]) -> Effect | None:
    """Dropout is the identity at inference: exporters drop it (or leave an Identity)."""
    has = present_only(row)
    if has is None or ctx.group(has, row.key).categories() != {"dropout"}:
        return None
    g = ctx.group(has, row.key)
    delta = scaled_by(g.metrics(), sign_of(has))
    other = ctx.name("B" if has == "A" else "A")
    return finding("Dropout removed",
                  f"Dropout is the identity at inference, so {other} has no node for it, while "
                  f"{ctx.name(has)} counted {amounts_text(delta)} for it ({deltas(delta)})", delta)


def rule_fused_activation(ctx: Context, row: Row, res: dict[str, int]) -> Effect | None:
    """An activation with no node on the other side, fused into the preceding layer's node
    (FusedConv, FusedGemm, ...): its FLOPs are counted there; its tensor is never written."""
    if row.key not in ctx.fused_act:
        return None
    into = ctx.fused_act[row.key]
    has = "A" if row.a is not None and not row.a.is_zero() else "B"
    g = ctx.group(has, row.key)
    delta = scaled_by(g.metrics(), sign_of(has))
    other = "B" if has == "A" else "A"
    fused = ", ".join(sorted({t for t in ctx.group(other, into).types if t in FUSED_TYPES}))
    return finding(f"fused into {into}",
                  f"{g.type_text(ctx.side(has).onnx)} fused into `{into}`'s {fused} node: the "
                  f"activation runs in the same kernel, so its {fmt(g.metric('flops'))} FLOPs "
                  f"are counted there and its input is never written out and read back "
                  f"({deltas(delta)})", delta)


def rule_fused_into(ctx: Context, row: Row, res: dict[str, int]) -> Effect | None:
    """The other half of ``fused-activation``: the fused node does the activation's FLOPs."""
    act = ctx.fused_into.get(row.key)
    if act is None or row.a is None or row.b is None:
        return None
    has_act = "A" if ctx.group("A", act) is not None and not ctx.group("A", act).is_zero() \
        else "B"
    flops = ctx.group(has_act, act).metric("flops")
    delta = {"flops": -sign_of(has_act) * flops}
    if res["flops"] != delta["flops"]:
        return None
    side = "B" if has_act == "A" else "A"
    fused = ", ".join(sorted({t for t in ctx.group(side, row.key).types if t in FUSED_TYPES}))
    return finding(f"+{act} fused",
                  f"{ctx.name(side)}'s {fused} also applies `{act}` in the same kernel "
                  f"({deltas(delta)})", delta)


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
    delta = {"buffer_bytes": sign_of(torch_side) * n * INDEX_BYTES}
    if res["buffer_bytes"] != delta["buffer_bytes"]:
        return None
    return finding("num_batches_tracked",
                  f"PyTorch's BatchNorm also keeps num_batches_tracked (one int64, 8 bytes) as a "
                  f"buffer, which ONNX BatchNormalization does not have ({deltas(delta)})", delta)


def _bias_nodes(g: Group | None) -> list[tuple[int, int]]:
    """(bias length, output elements) of the conv/Gemm nodes of an ONNX group that add a bias."""
    out = []
    for r in g.rows if g else []:
        if r.type in ("Conv", "ConvTranspose", "FusedConv", "Gemm", "FusedGemm") \
                and len(r.input_shapes) >= 3 and r.input_shapes[2]:
            out.append((numel_of(r.input_shapes[2]), out_numel(r)))
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
    isz = itemsize_of(row.b if values > 0 else row.a)
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
    return finding(summary, f"{text} ({deltas(delta)})", delta)


def _unclaimed(g: Group | None) -> int:
    """Values of the weights (and biases) that Conv/Gemm/BatchNormalization nodes read but do not
    count as their parameters: an initializer already counted at an earlier reader."""
    n = 0
    for r in g.rows if g else []:
        if r.type in ("Conv", "ConvTranspose", "FusedConv", "Gemm", "FusedGemm",
                      "BatchNormalization", "LayerNormalization"):
            n += sum(numel_of(s) for s in r.input_shapes[1:3] if s) - r.params
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
    isz = itemsize_of(ctx.group(has, row.key))
    delta = {"params": shared, "weight_bytes": shared * isz}
    if res["weight_bytes"] != delta["weight_bytes"]:
        return None
    g = ctx.group(has, row.key)
    layer = next((t for t in g.types if t in ("Conv", "ConvTranspose", "FusedConv", "Gemm",
                                             "FusedGemm", "BatchNormalization",
                                             "LayerNormalization")), g.types[0])
    identity = any(r.type == "Identity" for r in ctx.side(has).report.layers)
    return finding("shared initializer",
                  f"{fmt(abs(shared))} of the values {ctx.name(has)}'s {layer} reads are an "
                  f"initializer identical to one read earlier, which the exporter stores once"
                  f"{' (handed on through Identity nodes, which cost nothing)' if identity else ''}"
                  f", so they are counted as parameters at the first node that reads them "
                  f"({deltas(delta)})", delta)


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
    idx = sum(out_numel(r) for r in pools) * INDEX_BYTES
    s = sign_of(onnx_side)  # the ONNX side writes idx bytes fewer
    delta = {"bytes_written": -s * idx, "activation_bytes": -s * idx}
    if res["bytes_written"] != delta["bytes_written"] \
            or res["activation_bytes"] != delta["activation_bytes"]:
        return None
    return finding("max-pool indices",
                  f"PyTorch's max_pool2d_with_indices also writes an int64 index tensor "
                  f"({fmt(idx)} bytes, kept for backward); ONNX MaxPool writes only the values "
                  f"({deltas(delta)})", delta)


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
        stats += 2 * numel_of(shape[:axis if axis >= 0 else len(shape) + axis])
    nbytes = stats * isz
    s = sign_of(onnx_side)
    delta = {"bytes_written": -s * nbytes, "activation_bytes": -s * nbytes}
    if any(res[m] != v for m, v in delta.items()):
        return None
    return finding("norm statistics",
                  f"PyTorch's native_layer_norm also writes the mean and inverse standard "
                  f"deviation of each of the {fmt(stats // 2)} normalised rows ({fmt(nbytes)} "
                  f"bytes, kept for backward); ONNX LayerNormalization writes only its output "
                  f"({deltas(delta)})", delta)
