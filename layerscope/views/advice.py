"""advice (``AdviceReport``): one row per rule that fired (cause, change, predicted gain,
measured gain, verdict), then each rule's arithmetic and the command that tests it."""
from __future__ import annotations

from layerscope.views.common import pct
from layerscope.views.sections import (
    PALETTE,
    Cell,
    Chart,
    Column,
    DataTable,
    Lines,
    Point,
    RowTable,
    Series,
    View,
)


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


def charts(result) -> list[Chart]:
    """Each fired rule's predicted gain (bar at the middle, whisker low..high), the measured
    gain written on the bars that were verified."""
    s = Series("predicted gain", PALETTE[0])
    for i, a in enumerate(result.advice):
        g = a.predicted_gain
        tip = (f"{a.rule}\npredicted {_gain(g)}"
               + (f"\nmeasured {pct(a.measured_gain)} ({a.verdict})"
                  if a.measured_gain is not None else f"\n{a.verdict}"))
        s.points.append(Point(i, 50.0 * (g.low + g.high), tip, lo=100.0 * g.low,
                              hi=100.0 * g.high, hot=a.verdict == "confirmed",
                              label=(f"measured {pct(a.measured_gain, 0)}"
                                     if a.measured_gain is not None else None)))
    return [Chart("advice-gains", "bars", "Predicted gain per rule (range); measured where run",
                  "rule", "% of the step saved", [s], [a.rule for a in result.advice])]


CSV_COLUMNS = ["rule", "cause", "change", "command", "predicted_low", "predicted_high",
               "measured_gain", "verdict", "derivation"]


def csv(result) -> DataTable:
    return DataTable(CSV_COLUMNS, [[a.rule, a.cause, a.change, a.command, a.predicted_gain.low,
                                    a.predicted_gain.high, a.measured_gain, a.verdict,
                                    a.derivation] for a in result.advice])


VIEW = View(heading=heading, terminal=advice_terminal, facts=html_facts, tables=tables,
            charts=charts, csv=csv,
            facts_title="Advice", name=lambda result: result.subject)
