"""The rules for how the ops are spelled and counted: ops as several nodes, in-place ops,
Linear as MatMul + Add, shape arithmetic, copies against views, nodes that could not be
counted, layers only one model has."""
from __future__ import annotations

from collections import Counter

from layerscope.analysis.compare.context import Context, Row, fmt, present_only
from layerscope.analysis.compare.effects import (
    Effect,
    amounts_text,
    deltas,
    finding,
    numel_of,
    scaled_by,
    sign_of,
)
from layerscope.analysis.compare.result import (
    COPY_TYPES,
    ROW_METRICS,
    SHAPE_TYPES,
    SMALL_INT_TYPES,
    VIEW_TYPES,
)
from layerscope.analysis.compare.sides import Group, Side
from layerscope.core.report import LayerRow


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
    return finding(f"{tg.rows[0].type} as {len(working)} nodes",
                  f"ONNX spells {tg.rows[0].type} as {len(working)} nodes ({types}), each "
                  f"writing an intermediate tensor that the next reads back, where PyTorch runs "
                  f"one op ({deltas(delta)})", delta)


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
    return finding("in-place in " + ctx.name(has),
                  f"{ctx.name(has)}'s {what}, creating no new tensor, while each "
                  f"{ctx.name(other)} node ({og.type_text(ctx.side(other).onnx)}) writes a new one "
                  f"({deltas(delta)})", delta)


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
    s = sign_of(onnx_side)
    delta = {"bytes_read": s * n, "bytes_written": s * n, "activation_bytes": s * n}
    if any(res[m] != v for m, v in delta.items()):
        return None
    return finding("Linear as MatMul+Add",
                  f"Linear is exported as MatMul + Add: the product goes to an intermediate "
                  f"tensor ({fmt(n)} bytes) that Add reads back, where PyTorch's addmm adds the "
                  f"bias in the same kernel ({deltas(delta)})", delta)


def _is_shape_node(r: LayerRow) -> bool:
    if r.type in SHAPE_TYPES:
        return True
    if r.type not in SMALL_INT_TYPES or r.params or r.macs:
        return False
    return bool(r.output_shapes) and not _unknown_shapes(r) and all(
        isinstance(s, list) and len(s) <= 1 and numel_of(s) <= 8 for s in r.output_shapes)


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
    return finding("shape arithmetic",
                  f"{ctx.name(has)} computes a shape at run time with {types} nodes on small "
                  f"integer tensors{shape_note}, which {other} does with plain integers "
                  f"({deltas(delta)})", delta)


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
    return finding("copy vs view",
                  f"{ctx.name(copier)} materialises a copy{how} of {fmt(abs(n))} bytes where "
                  f"{ctx.name(viewer)} only takes a view (views such as flatten, reshape, permute "
                  f"and Identity move no bytes) ({deltas(delta)})", delta)


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
        return finding(f"uncounted in {label}",
                      f"{ctx.name(label)} could not count {len(unknown)} of its nodes here "
                      f"({types}): shape inference left their shapes unknown, so its numbers "
                      f"are incomplete ({deltas(delta)})", delta)
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
    delta = scaled_by(g.metrics(), sign_of(has))
    if any(res.get(m, 0) != v for m, v in delta.items()):
        return None
    kind = g.type_text(ctx.side(has).onnx)
    amounts = amounts_text({m: v for m, v in g.metrics().items()
                        if m in ("params", "buffer_bytes", "flops", "activation_bytes")})
    verb = "adds" if has == "B" else "does without"
    return finding(f"only in {ctx.name(has)}",
                  f"only {ctx.name(has)} has this {kind}: {ctx.name(lacks)} has no "
                  f"`{row.key}`, so B {verb} its {amounts} ({deltas(delta)})", delta)
