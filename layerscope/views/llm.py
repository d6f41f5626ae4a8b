"""llm (``LLMReport``): one screen of parameters, weight bytes, prefill/decode cost, KV cache and
roofline; plan (``PlanReport``): bytes per device for each sharding strategy and whether it
fits. Sizes are shown in GB = 10^9 bytes (MB, kB), as GPU datasheets give memory."""
from __future__ import annotations

from dataclasses import replace

from layerscope.core.units import si
from layerscope.views.common import exact
from layerscope.views.sections import (
    PALETTE,
    Cell,
    Chart,
    DataTable,
    Facts,
    Lines,
    Point,
    RowTable,
    Series,
    View,
)


def gb(n: float | None) -> str:
    """Bytes in GB (10^9) from a GB up, smaller sizes in MB / kB / bytes."""
    if n is None:
        return "-"
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f} bytes"


def _rate(x: float) -> str:
    return f"{si(x)} tokens/s"


# ---------------------------------------------------------------- llm
def llm_heading(r) -> tuple[str, str]:
    s = r.settings
    return (f"{r.model} — LLM cost",
            f"batch {s.get('batch_size')} × {s.get('seq_len')} tokens · context {r.decode.context}"
            f" · {s.get('dtype')} weights, {r.kv_cache.dtype} KV · {r.attention_count} "
            "attention")


def llm_facts(r) -> list[tuple[str, str]]:
    s = r.settings
    out = [("Parameters", exact(r.params_total))]
    if r.params_active != r.params_total:
        out.append(("Active per token", exact(r.params_active)))
    out += [("Weights", "  ".join(f"{d} {gb(b)}" for d, b in r.weight_bytes.items())),
            ("Prefill", f"{si(r.prefill.macs)}MACs, {si(r.prefill.flops)}FLOPs for "
                        f"{r.prefill.tokens:,} tokens ({s.get('batch_size')} × {s.get('seq_len')}"
                        f", {r.attention_count} attention)"),
            ("Prefill per token", f"{si(r.prefill.flops / max(r.prefill.tokens, 1))}FLOPs"),
            ("Decode per token", f"{si(r.decode.macs_per_token)}MACs, "
                                 f"{si(r.decode.flops_per_token)}FLOPs at context "
                                 f"{r.decode.context:,}"),
            ("KV cache", f"{r.kv_cache.bytes_per_token:,} bytes per token ({r.kv_cache.dtype}); "
                         f"{gb(r.kv_cache.bytes_total)} for {r.kv_cache.batch_size} × "
                         f"{r.kv_cache.context:,} tokens")]
    groups = getattr(r, "attention_layers", None) or []
    if len(groups) > 1 or any(g.kind != "causal" for g in groups):
        out.append(("Attention", "; ".join(
            f"{g.layers} layer{'s' if g.layers != 1 else ''} without attention (no scores, no "
            "KV cache)" if g.kind == "recurrent" else
            f"{g.layers} layer{'s' if g.layers != 1 else ''} {_attention_kind(g)} (counted "
            f"{g.counted}; KV {g.kv_bytes_per_token:,} bytes per token, "
            f"{gb(g.kv_bytes_total)})" for g in groups)))
    roof = r.roofline
    if roof is not None:
        tp = f" × {roof.tp} (tensor parallel)" if (roof.tp or 1) > 1 else ""
        out += [("GPU", f"{roof.gpu}: {si(roof.peak_flops)}FLOP/s peak, "
                        f"{gb(roof.bandwidth_bytes_per_s)}/s, {gb(roof.memory_bytes)}{tp}"),
                ("Prefill bound", f"≤ {_rate(roof.prefill_tokens_per_s)} "
                                  f"({roof.prefill_bound}-bound)"),
                ("Decode bound", f"≤ {_rate(roof.decode_tokens_per_s)} ({roof.decode_bound}-"
                                 f"bound, {gb(roof.decode_bytes_per_step)} read per step)")]
    return out


def _attention_kind(g) -> str:
    kind = {"sliding": f"sliding window {g.window}", "mla": "latent (MLA)",
            "chunked": f"chunked attention ({getattr(g, 'chunk', None)} tokens)",
            "unknown": "of unknown structure"}.get(g.kind, g.kind)
    if g.kind == "mla" and g.window is not None:
        kind += f", window {g.window}"
    return kind


def llm_terminal(r, **_options) -> list:
    return [Facts(" — ".join(llm_heading(r)), llm_facts(r)),
            Lines([f"note: {n}" for n in r.notes])]


def llm_tables(r) -> list[RowTable]:
    rows = [[Cell(d), Cell(f"{b:,}", b), Cell(gb(b), b)] for d, b in r.weight_bytes.items()]
    return [RowTable("weights", "Weight bytes per dtype",
                     [("Dtype", False), ("Bytes", True), ("GB", True)], rows)]


def llm_csv(r) -> DataTable:
    return DataTable(["name", "value"], [
        ["params_total", r.params_total], ["params_active", r.params_active],
        *[[f"weight_bytes_{d}", b] for d, b in r.weight_bytes.items()],
        ["prefill_macs", r.prefill.macs], ["prefill_flops", r.prefill.flops],
        ["prefill_tokens", r.prefill.tokens], ["decode_macs_per_token", r.decode.macs_per_token],
        ["decode_flops_per_token", r.decode.flops_per_token], ["context", r.decode.context],
        ["kv_bytes_per_token", r.kv_cache.bytes_per_token],
        ["kv_bytes_total", r.kv_cache.bytes_total]])


def llm_charts(r) -> list[Chart]:
    """Memory to hold: the weights in each dtype and the KV cache of the batch."""
    names = [f"weights {d}" for d in r.weight_bytes] + [f"KV cache {r.kv_cache.dtype}"]
    sizes = list(r.weight_bytes.values()) + [r.kv_cache.bytes_total]
    s = Series("bytes", PALETTE[0], [Point(i, b / 1e9, f"{n}: {gb(b)}")
                                     for i, (n, b) in enumerate(zip(names, sizes))])
    return [Chart("llm-memory", "bars", "Weights per dtype and KV cache", "", "GB", [s], names)]


LLM = View(heading=llm_heading, terminal=llm_terminal, facts=llm_facts, tables=llm_tables,
           charts=llm_charts, csv=llm_csv)


# ---------------------------------------------------------------- plan
_PLAN_COLUMNS = [("Strategy", False), ("Weights", True), ("Gradients", True),
                 ("Optimizer", True), ("Activations", True), ("Peak", True), ("Fits", False)]


def plan_heading(p) -> tuple[str, str]:
    return (f"{p.model} — training memory plan",
            f"{p.gpus} GPUs (tp {p.tp} × pp {p.pp} × dp {p.dp}) · micro-batch {p.micro_batch} × "
            f"{p.seq_len} tokens · {p.dtype} · {p.kernels or 'unfused'} kernels · "
            f"recompute {p.recompute} · {gb(p.gpu_memory_bytes)} per GPU")


def plan_facts(p) -> list[tuple[str, str]]:
    a = p.activations
    how = "measured" if p.kernels in (None, "unfused") else \
        f"with {p.kernels} kernels (unfused, measured: {gb(a.measured_per_layer_bytes or 0)})"
    groups = getattr(a, "groups", None) or []
    top = max(groups, key=lambda g: g.per_layer_bytes).label if groups else ""
    facts = [("Parameters", exact(p.params_total))]
    if p.params_active is not None and p.params_active != p.params_total:
        facts.append(("Active per token", exact(p.params_active)))
    facts.append(("Activations per layer" + (f" (heaviest: {top})" if top else ""),
                  f"{gb(a.per_layer_bytes)} {how}, {gb(a.attention_scores_bytes)} seq×seq, "
                  f"{gb(a.per_layer_kept_bytes)} kept"))
    if groups:
        facts.append(("Layer groups", " + ".join(
            f"{g.layers} {g.label} layer{'s' if g.layers > 1 else ''} × "
            f"{gb(g.per_layer_kept_bytes)}" for g in groups)
            + " kept"))
    facts += [("Outside the blocks", f"{gb(a.other_bytes)} (embeddings, head, loss)"),
              ("Per device", f"{a.layers_per_stage} layers × {a.micro_batches_in_flight} "
                             "micro-batches in flight")]
    first = p.strategies[0] if p.strategies else None
    if first is not None and first.gather_bytes is not None:
        # the peak's parts beyond the table's columns (the same for every strategy but the
        # gather buffers); plans saved before they were counted have none
        facts += [("Recompute working set", gb(a.recompute_working_bytes // p.tp)),
                  ("Loss backward, log-probabilities' gradient (fp32)",
                   gb(first.logprobs_grad_bytes or 0)),
                  ("Loss backward, logits' gradient (fp32)", gb(first.logits_grad_bytes or 0)),
                  ("Gather buffers", ", ".join(f"{s.strategy} {gb(s.gather_bytes or 0)}"
                                               for s in p.strategies))]
    if first is not None and first.reduce_scatter_bytes is not None:
        # added later than the lines above: plans saved between the two have none of these
        if p.tp > 1:  # both are 0 without tensor parallelism
            facts[-1:-1] = [("Sequence-parallel gathered inputs",
                             gb(first.gathered_inputs_bytes)),
                            ("Loss backward, loss parallel's sum (fp32)",
                             gb(first.loss_parallel_bytes))]
        facts.append(("Reduce-scatter buffers", ", ".join(
            f"{s.strategy} {gb(s.reduce_scatter_bytes or 0)}" for s in p.strategies)))
    return facts


def plan_tables(p) -> list[RowTable]:
    rows = [[Cell(s.strategy), Cell(gb(s.weights_bytes), s.weights_bytes),
             Cell(gb(s.grads_bytes), s.grads_bytes), Cell(gb(s.optimizer_bytes),
                                                         s.optimizer_bytes),
             Cell(gb(s.activations_bytes), s.activations_bytes),
             Cell(gb(s.peak_bytes), s.peak_bytes),
             Cell("fits" if s.fits else "does not fit", s.fits)] for s in p.strategies]
    columns = _PLAN_COLUMNS
    budget = getattr(p, "fit_budget_bytes", None)
    if budget is not None:  # --fit: each strategy's largest micro-batch
        columns = [*columns, (f"Max micro-batch ({gb(budget)})", True)]
        for row, s in zip(rows, p.strategies):
            n = s.fit_micro_batch or 0
            row.append(Cell(f"{n:,}" if n else "none", n))
    return [RowTable("strategies", "Bytes per device", columns, rows,
                     hot=[s.fits for s in p.strategies], emphasis="bold")]


def plan_terminal(p, **_options) -> list:
    strategies = replace(plan_tables(p)[0], title=" — ".join(plan_heading(p)), title_left=True)
    return [strategies, Lines([f"{name}: {value}" for name, value in plan_facts(p)]
                              + [f"note: {n}" for n in p.notes])]


def plan_csv(p) -> DataTable:
    cols = ["strategy", "weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
            "peak_bytes", "fits"] + (["fit_micro_batch"] if getattr(p, "fit_budget_bytes", None)
                                     is not None else [])
    return DataTable(cols, [[getattr(s, c) for c in cols] for s in p.strategies])


def plan_charts(p) -> list[Chart]:
    """Bytes per device by strategy, stacked: weights, gradients, optimizer, activations."""
    names = [s.strategy for s in p.strategies]
    parts = [("weights", "weights_bytes"), ("gradients", "grads_bytes"),
             ("optimizer", "optimizer_bytes"), ("activations", "activations_bytes")]
    series = [Series(label, PALETTE[i % len(PALETTE)],
                     [Point(j, getattr(s, key) / 1e9, f"{s.strategy}: {label} "
                            f"{gb(getattr(s, key))}; peak {gb(s.peak_bytes)} of "
                            f"{gb(p.gpu_memory_bytes)}") for j, s in enumerate(p.strategies)])
              for i, (label, key) in enumerate(parts)]
    return [Chart("plan-memory", "stacked", f"Bytes per GPU ({gb(p.gpu_memory_bytes)} each)",
                  "strategy", "GB", series, names)]


PLAN = View(heading=plan_heading, terminal=plan_terminal, facts=plan_facts, tables=plan_tables,
            charts=plan_charts, csv=plan_csv)
