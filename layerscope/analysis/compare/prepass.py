"""The pre-pass before the rules run: BatchNorms folded and activations fused into the layer
before them, and the batch ratio when only the batch differs."""
from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from layerscope.analysis.compare.context import Context, Row, present_only
from layerscope.analysis.compare.result import CATEGORIES, FUSED_TYPES
from layerscope.analysis.compare.sides import Side
from layerscope.core.report import Report


# ------------------------------------------------------------------------------- pre-pass
def previous_keys(side: Side) -> dict[str, str | None]:
    """For each key, the key before it in the side's row order, skipping rows that cost
    nothing (None for the first): one pass over the side (looking back from each row was
    quadratic in the rows)."""
    out: dict[str, str | None] = {}
    last = None
    for k in side.order():
        out[k] = last
        if not side.groups[k].is_zero():
            last = k
    return out


def find_folds(ctx: Context) -> None:
    """BatchNorms folded into the layer before them; activations fused into the node before."""
    before = {label: previous_keys(ctx.side(label)) for label in ("A", "B")}

    def _previous(side: Side, key: str) -> str | None:
        return before[side.label].get(key)

    for key, row in ctx.rows.items():
        has = present_only(row)
        if has is None:
            _find_folded_scope(ctx, key, row, _previous)
            continue
        other = "B" if has == "A" else "A"
        g = ctx.group(has, key)
        cats = g.categories()
        prev = _previous(ctx.side(has), key)
        if prev is None:
            continue
        prev_cats = ctx.group(has, prev).categories()
        prev_other = ctx.group(other, prev)
        if cats == {"batchnorm"} and prev_cats & {"conv", "linear"} and prev_other is not None \
                and _could_fold(ctx, other, key):
            ctx.folded_bn[key] = (prev, has)
            ctx.bn_into[prev] = key
        elif cats == {"activation"} and prev_other is not None \
                and prev_other.has(FUSED_TYPES):
            ctx.fused_act[key] = prev
            ctx.fused_into[prev] = key


def _could_fold(ctx: Context, lacks: str, key: str) -> bool:
    """Whether side ``lacks`` could have folded away the BatchNorm at ``key`` that the other
    side has: it is an export (ONNX, TorchScript: exporters and ``torch.jit.freeze`` fold
    BatchNorms into the layer before), or it keeps a zero-cost module there (the Identity
    ``torch.ao.quantization.fuse_modules`` leaves). Two PyTorch models, one with a BatchNorm
    the other never had, differ by a layer instead (rule ``only-in-one``)."""
    return ctx.side(lacks).report.frontend != "torch" or ctx.group(lacks, key) is not None


def _find_folded_scope(ctx: Context, key: str, row: Row,
                       _previous: Callable[[Side, str], str | None]) -> None:
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


def batch_ratio(a: Report, b: Report) -> tuple[Fraction, tuple[int, int]] | None:
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
