"""profile --decode (``DecodeProfile``): measured decode steps beside ``layerscope llm``'s bound
for the same step, the bytes and FLOPs a step moves as llm counts them, and MBU / MFU against
the measured ceilings and a GPU's datasheet."""
from __future__ import annotations

from layerscope.core.units import si
from layerscope.views.common import cell, efficiency_facts, ms, noise_facts, noise_lines, pct
from layerscope.views.llm import gb
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


def heading(r) -> tuple[str, str]:
    warm = f"{r.warmup} warm-up step{'s' if r.warmup != 1 else ''} excluded"
    return (f"{r.model} — decode",
            f"device {r.device} · {r.dtype} · batch {r.batch_size} · context {r.context:,} · "
            f"{r.steps} steps ({warm}) · ms per step")


def rate(tokens_per_s: float) -> str:
    """Tokens/s with three significant figures ('0.186', '933', '1.10K')."""
    return f"{tokens_per_s:.3g}" if tokens_per_s < 1000 else si(tokens_per_s)


def _step(r) -> str:
    t = r.step_time
    return f"{ms(t['median_s'], 3)} ms (p10 {ms(t['p10_s'], 3)}, p90 {ms(t['p90_s'], 3)})"


def _of_bound(r, b) -> float | None:
    return r.tokens_per_s / b.tokens_per_s if b.tokens_per_s else None


def _source(b) -> str:
    return "measured ceilings" if b.source == "measured" else b.source


def figures(r) -> list[tuple[str, str]]:
    """The key figures without the noise line (the terminal writes it under them)."""
    out = [("Decode step", f"{_step(r)}: {rate(r.tokens_per_s)} tokens/s "
                           f"({r.batch_size} sequence{'s' if r.batch_size != 1 else ''}, "
                           f"{r.context:,} tokens cached)")]
    for b in r.bounds:
        out.append((f"Bound ({_source(b)})",
                    f"{rate(b.tokens_per_s)} tokens/s, {b.bound}-bound (layerscope llm's "
                    f"roofline: {si(b.peak_flops_per_s)}FLOP/s, "
                    f"{si(b.bandwidth_bytes_per_s)}B/s); measured {pct(_of_bound(r, b))} "
                    "of it"))
    out += [("Bytes per step", f"{gb(r.bytes_per_step)}: weights {gb(r.weight_bytes)} + KV "
                               f"cache {gb(r.kv_bytes)} (as layerscope llm counts a decode "
                               "step)"),
            ("FLOPs per step", f"{si(r.flops_per_step)}FLOP ({r.batch_size} x llm's decode "
                               "FLOPs per token)"),
            ("Prefill", f"{ms(r.prefill_s, 2)} ms for {r.batch_size} x {r.context:,} tokens "
                        "(once, not repeated)")]
    return out + efficiency_facts(r) + [("Note", n) for n in r.notes]


def facts(r) -> list[tuple[str, str]]:
    return figures(r) + noise_facts(r)


COLUMNS = [("", False), ("tokens/s", True), ("ms per step", True), ("bound by", False),
           ("measured / bound", True)]


def tables(r, title: str = "Decode: measured vs layerscope llm's bound") -> list[RowTable]:
    rows = [[Cell("measured"), cell(r.tokens_per_s, rate(r.tokens_per_s)),
             cell(r.step_time["median_s"], ms(r.step_time["median_s"], 3)), Cell(""), Cell("")]]
    for b in r.bounds:
        step = r.batch_size / b.tokens_per_s if b.tokens_per_s else None
        share = _of_bound(r, b)
        rows.append([Cell(f"bound ({_source(b)})"), cell(b.tokens_per_s, rate(b.tokens_per_s)),
                     cell(step, ms(step, 3)), Cell(b.bound), cell(share, pct(share))])
    return [RowTable("decode", title, COLUMNS, rows)]


def charts(r) -> list[Chart]:
    """Tokens/s measured beside each bound, the measured bar with its p10-p90 spread."""
    t = r.step_time
    tokens = r.batch_size / t["median_s"] if t["median_s"] else 0.0
    spread = {"lo": r.batch_size / t["p90_s"] if t["p90_s"] else None,
              "hi": r.batch_size / t["p10_s"] if t["p10_s"] else None}
    names = ["measured"] + ["bound" if b.source == "measured" else "bound, datasheet"
                            for b in r.bounds]
    points = [Point(0, tokens, f"measured: {rate(tokens)} tokens/s (p90-p10 steps: "
                               f"{rate(spread['lo'] or 0)} to {rate(spread['hi'] or 0)})",
                    **spread)]
    points += [Point(i + 1, b.tokens_per_s,
                     f"bound ({_source(b)}): {rate(b.tokens_per_s)} tokens/s, {b.bound}-bound")
               for i, b in enumerate(r.bounds)]
    return [Chart("decode-tokens", "bars", "Decode tokens/s: measured and layerscope llm's "
                  "bound", "", "tokens/s", [Series("tokens/s", PALETTE[0], points)], names,
                  log_y=True)]


def terminal(r) -> list:
    title = (f"{r.model}: decode on {r.device} ({r.dtype}, batch {r.batch_size}, context "
             f"{r.context:,}; {r.steps} steps, {r.warmup} warm-up excluded) vs layerscope "
             "llm's bound")
    return [*tables(r, title), Facts("Decode", figures(r)), Lines(noise_lines(r))]


CSV = ["row", "source", "tokens_per_s", "step_s", "bound", "bytes_per_step", "flops_per_step",
       "peak_flops_per_s", "bandwidth_bytes_per_s", "mfu", "mbu"]


def csv(r) -> DataTable:
    e = r.efficiency or {}
    sheet = e.get("datasheet") or {}
    ratios = {e.get("peak_source"): (e.get("mfu"), e.get("mbu")),
              sheet.get("peak_source"): (sheet.get("mfu"), sheet.get("mbu"))}
    rows = []
    for b in r.bounds:
        mfu, mbu = ratios.get(b.source, (None, None))
        rows.append(["measured", b.source, r.tokens_per_s, r.step_time["median_s"], None,
                     r.bytes_per_step, r.flops_per_step, b.peak_flops_per_s,
                     b.bandwidth_bytes_per_s, mfu, mbu])
        rows.append(["bound", b.source, b.tokens_per_s,
                     r.batch_size / b.tokens_per_s if b.tokens_per_s else None, b.bound,
                     r.bytes_per_step, r.flops_per_step, b.peak_flops_per_s,
                     b.bandwidth_bytes_per_s, None, None])
    return DataTable(CSV, rows)


VIEW = View(heading=heading, terminal=terminal, facts=facts, tables=tables, charts=charts,
            csv=csv,
            facts_title="Decode")
