"""The explanation rules: each predicts how much of a row's difference (B - A) it accounts
for; ``explain_row`` applies them in order and ``explain_moves`` pairs leftovers with an
ancestor's."""
from __future__ import annotations

from collections import defaultdict

from layerscope.analysis.compare.context import Context, Row, fmt, signed
from layerscope.analysis.compare.effects import (
    Effect,
    Rule,
    deltas,
    finding,
)
from layerscope.analysis.compare.export_rules import (
    rule_batchnorm_folded,
    rule_bias_added,
    rule_dropout_removed,
    rule_folded_scope,
    rule_fused_activation,
    rule_fused_into,
    rule_maxpool_indices,
    rule_norm_statistics,
    rule_num_batches_tracked,
    rule_shared_initializer,
)
from layerscope.analysis.compare.op_rules import (
    rule_decomposed,
    rule_in_place,
    rule_linear_matmul_add,
    rule_only_in_one,
    rule_shape_ops,
    rule_uncounted,
    rule_view_or_copy,
)
from layerscope.analysis.compare.result import (
    LABELS,
    ROOT_LABEL,
    UNEXPLAINED,
)
from layerscope.core import tree

# the names the rules' modules declare, importable from here as before
__all__ = ["BATCH", "MOVED", "RULES", "RULE_LABELS", "UNEXPLAINED_RULE", "Effect", "Rule",
           "explain_moves", "explain_row", "rule_batch", "rule_batchnorm_folded",
           "rule_bias_added", "rule_decomposed", "rule_dropout_removed", "rule_folded_scope",
           "rule_fused_activation", "rule_fused_into", "rule_in_place",
           "rule_linear_matmul_add", "rule_maxpool_indices", "rule_norm_statistics",
           "rule_num_batches_tracked", "rule_only_in_one", "rule_shape_ops",
           "rule_shared_initializer", "rule_uncounted", "rule_view_or_copy",
           "unexplained_effect"]


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
    return finding(f"batch {ba}->{bb}",
                  f"scales with the batch ({ba} -> {bb}): its arithmetic and the tensors it "
                  f"reads and writes per sample x{float(k):g}{weights} ({deltas(delta)})", delta)




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
                                   f"ancestor's scope ({deltas(delta)})", delta))
            back = {m: -v for m, v in delta.items()}
            out[anc].append(Effect(MOVED.name, f"includes {key}",
                                   f"{where} counts numbers of `{key}` here, where the node that "
                                   f"does the work carries this module's scope "
                                   f"({deltas(back)})", back))
            for m, v in delta.items():
                res[m] -= v
                up[m] += v
            break
    return out
