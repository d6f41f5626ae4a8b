"""advice (``AdviceReport``): one row per rule that fired (cause, change, predicted gain,
measured gain, verdict), then each rule's arithmetic and the command that tests it."""
from __future__ import annotations

from layerscope.views.common import pct
from layerscope.views.sections import Cell, Column, DataTable, Lines, RowTable, View


def heading(result) -> tuple[str, str]:
    verified = result.verify
    how = (f"verified: ablate, {verified.get('steps')} steps, seed {verified.get('seed')}"
           if verified else "predicted (not verified: --verify runs the commands)")
    return (f"{result.subject} — advice", f"from {result.source} ({result.source_kind}, "
                                         f"{result.device}) · {how}")


def _gain(g) -> str:
    return f"{pct(g.low, 0)} .. {pct(g.high, 0)}"


def facts(result) -> list[tuple[str, str]]:
    counts: dict[str, int] = {}
    for a in result.advice:
        counts[a.verdict] = counts.get(a.verdict, 0) + 1
    verdicts = ", ".join(f"{n} {v}" for v, n in counts.items()) or "none"
    return [("Rules fired", f"{len(result.advice)} of {len(result.checked)} "
                            f"({', '.join(result.checked)})"),
            ("Verdicts", verdicts)] + [("Note", n) for n in result.notes]


COLUMNS = [Column("Rule"), Column("Cause", wrap=True), Column("Change", wrap=True, priority=1),
           Column("Predicted gain", True), Column("Measured", True), Column("Verdict")]


def tables(result) -> list[RowTable]:
    rows = [[Cell(a.rule), Cell(a.cause), Cell(a.change),
             Cell(_gain(a.predicted_gain), a.predicted_gain.high),
             Cell(pct(a.measured_gain), a.measured_gain),
             Cell(a.verdict, style={"confirmed": "green", "refuted": "red"}.get(a.verdict))]
            for a in result.advice]
    return [RowTable("advice", "Advice", COLUMNS, rows,
                     hot=[a.verdict == "confirmed" for a in result.advice],
                     caption="gain: fraction of the step time saved (1 - new / old)")]


def details(result) -> list[str]:
    lines = []
    for a in result.advice:
        lines += [f"{a.rule}: {a.derivation}", f"  test: {a.command}"]
        if a.verify_note:
            lines.append(f"  verify: {a.verify_note}")
    return lines


def advice_terminal(result) -> list:
    title, sub = heading(result)
    out: list = [Lines([title, sub], style="bold")]
    if result.advice:
        out += [tables(result)[0], Lines(details(result))]
    return out + [Lines([f"note: {n}" for n in result.notes])]


def html_facts(result) -> list[tuple[str, str]]:
    return facts(result) + [(a.rule, f"{a.derivation} — test: {a.command}"
                             + (f" — verify: {a.verify_note}" if a.verify_note else ""))
                            for a in result.advice]


CSV_COLUMNS = ["rule", "cause", "change", "command", "predicted_low", "predicted_high",
               "measured_gain", "verdict", "derivation"]


def csv(result) -> DataTable:
    return DataTable(CSV_COLUMNS, [[a.rule, a.cause, a.change, a.command, a.predicted_gain.low,
                                    a.predicted_gain.high, a.measured_gain, a.verdict,
                                    a.derivation] for a in result.advice])


VIEW = View(heading=heading, terminal=advice_terminal, facts=html_facts, tables=tables, csv=csv,
            facts_title="Advice", name=lambda result: result.subject)
