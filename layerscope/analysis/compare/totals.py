"""The totals' explanations: sums of the rows' accounted differences per rule, and the peak
by how each side measures it."""
from __future__ import annotations

from layerscope.analysis.compare.context import Context, fmt, signed
from layerscope.analysis.compare.result import LABELS, UNEXPLAINED
from layerscope.analysis.compare.rules import BATCH, RULE_LABELS


# ------------------------------------------------------------------------------- totals
def _pct(diff: int, base: int) -> str:
    return f", {diff / base:+.2%}" if base else ""


def explain_total(metric: str, a: int, b: int, contributions: dict[str, list[int]],
                   row_sums: tuple[int, int]) -> tuple[list[str], str]:
    diff = b - a
    ranked = [(rule, total, n) for rule, (total, n) in
              sorted(contributions.items(), key=lambda kv: -abs(kv[1][0])) if total]
    parts = [f"{RULE_LABELS.get(rule, rule)} {signed(total)} ({n} row{'s' if n != 1 else ''})"
             for rule, total, n in ranked]
    rules = [rule for rule, _, _ in ranked]
    gap = diff - (row_sums[1] - row_sums[0])
    if gap:
        parts.append(f"the rows do not sum to the totals ({signed(gap)} left unexplained)")
        rules.append(UNEXPLAINED)
    if not parts:
        parts.append("the rows' differences cancel out")
    return rules, (f"{LABELS[metric]}: {fmt(a)} vs {fmt(b)} ({signed(diff)}{_pct(diff, a)}): "
                   + "; ".join(parts))


def explain_peak(ctx: Context, a: int, b: int, act_rules: set[str]) -> tuple[list[str], str]:
    diff = b - a
    head = f"{LABELS['peak_activation_bytes']}: {fmt(a)} vs {fmt(b)} ({signed(diff)}" \
           f"{_pct(diff, a)}): "
    causes = [RULE_LABELS.get(r, r) for r in sorted(act_rules) if r != UNEXPLAINED]
    if ctx.batch is not None:
        ba, bb = ctx.batches
        return [BATCH.name], head + (f"the live tensors scale with the batch ({ba} -> {bb}), "
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
