"""advice (``AdviceReport``): one row per rule that fired (cause, change, predicted gain,
measured gain, verdict), then each rule's arithmetic, the facts it read and the command that
tests it; the rules that could not judge are notes, with the reason and the facts they read."""
from __future__ import annotations

from typing import Any

from layerscope.advice.rule import facts_text
from layerscope.views.common import pct
from layerscope.views.sections import (
    PALETTE,
    Cell,
    Chart,
    Column,
    DataTable,
    Lead,
    Lines,
    Point,
    RowTable,
    Series,
    View,
)

MINUS = "\u2212"


def heading(result) -> tuple[str, str]:
    verified = result.verify
    if not verified:
        how = "predicted (not verified: --verify runs the commands)"
    elif "runs" in verified:  # a profile's or sweep's rules: their sweeps
        how = f"verified: sweep, {verified['runs']} runs per cell"
    elif "cwd" in verified:  # a script's run: the script again, in fresh processes
        how = f"verified: layerscope run, {verified.get('steps')} steps per run"
    else:
        how = f"verified: ablate, {verified.get('steps')} steps, seed {verified.get('seed')}"
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


# ---- gains in words (the lead of a timed result and of an advice result) ----------------
def percent(x: float) -> str:
    """'41%', '4.2%', '0.31%': two significant figures under 10%."""
    x *= 100
    return f"{x:.0f}%" if abs(x) >= 10 else f"{x:.1f}%" if abs(x) >= 1 else f"{x:.2g}%"


def step_change(gain: float) -> str:
    """A gain (fraction of the time saved) as the change of the time: 0.17 -> '−17%'."""
    return (MINUS if gain > 0 else "+" if gain < 0 else "") + percent(abs(gain))


def predicted(low: float, high: float) -> str:
    if low <= 0 < high:
        return f"up to {step_change(high)}"
    if low == high:
        return step_change(high)
    return f"{step_change(low)}..{step_change(high)}"


def measured(a: dict[str, Any]) -> str:
    """', measured −17% (confirmed)' once verified; ', unverifiable on this machine now' when
    the re-run baseline did not reproduce the result; else ''."""
    if a.get("verdict") == "unverifiable":
        return ", unverifiable on this machine now (the re-run baseline did not reproduce it)"
    if a.get("measured_gain") is None:
        return ""
    verdict = {"within-noise": "within the noise"}.get(a.get("verdict"), a.get("verdict"))
    return f", measured {step_change(a['measured_gain'])} ({verdict})"


def change_label(a: dict[str, Any]) -> str:
    """What the rule changes, short: its ablate variant, its thread count, else its name."""
    return a.get("variant") or (f"threads={a['threads']}" if a.get("threads") else a["rule"])


def _rank(a: dict[str, Any]) -> tuple:
    """Confirmed rules first (largest measured gain first), then the rest by their predicted
    gain: once verified, the headline leads with what was measured to help."""
    confirmed = a.get("verdict") == "confirmed"
    return (not confirmed, -(a.get("measured_gain") or 0.0) if confirmed else 0.0,
            -a["predicted_gain"]["high"])


def top_rule(advice: dict[str, Any]) -> str:
    """The rule the headline names, in a few words: the confirmed one with the largest measured
    gain, else the one with the largest predicted gain: 'amp predicted up to −32%, measured −17%
    (confirmed); 1 more rule'."""
    items = sorted(advice.get("advice") or [], key=_rank)
    if not items:
        return "no advice rule fired"
    top = items[0]
    g = top["predicted_gain"]
    more = f"; {len(items) - 1} more rule{'s' if len(items) > 2 else ''}" \
        if len(items) > 1 else ""
    return f"{change_label(top)} predicted {predicted(g['low'], g['high'])}{measured(top)}{more}"


def rule_line(a: dict[str, Any]) -> str:
    """A rule in one terminal line: its change and its predicted (and measured) gain."""
    g = a["predicted_gain"]
    return f"  {a['rule']}: {a['change']}; predicted {predicted(g['low'], g['high'])}" \
           f"{measured(a)}"


def advice_lead(report) -> Lead:
    """An advice result's lead: the headline of the result it read (written by ``layerscope
    advise``; measured gains beside the predictions once verified), else its top rule."""
    text = getattr(report, "headline", None) or (
        f"{report.subject}: " + top_rule(report.to_dict()))
    return Lead(text)


COMMAND = Column("Command (tests it)", wrap=True, priority=2)


def advice_table(result, commands: bool = False) -> RowTable:
    """One row per rule that fired; ``commands`` (the lead of a timed result's report): with
    the command that tests each, and the measured gain and verdict only once one was run."""
    measured = not commands or any(a.measured_gain is not None for a in result.advice)
    keep = [i for i, c in enumerate(COLUMNS) if measured or c.label not in ("Measured", "Verdict")]
    rows = [[[Cell(a.rule), Cell(a.cause), Cell(a.change),
              Cell(_gain(a.predicted_gain), a.predicted_gain.high),
              Cell(pct(a.measured_gain), a.measured_gain),
              Cell(a.verdict, style={"confirmed": "green", "refuted": "red"}.get(a.verdict))][i]
             for i in keep] + ([Cell(a.command)] if commands else [])
            for a in result.advice]
    return RowTable("advice", "Advice", [COLUMNS[i] for i in keep] + ([COMMAND] if commands
                                                                         else []), rows,
                    hot=[a.verdict == "confirmed" for a in result.advice],
                    caption="gain: fraction of the step time saved (1 - new / old)")


def tables(result) -> list[RowTable]:
    return [advice_table(result)]


def details(result) -> list[str]:
    lines = []
    for a in result.advice:
        lines += [f"{a.rule}: {a.derivation}", f"  facts: {facts_text(a.facts)}",
                  f"  test: {a.command}"]
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
    return facts(result) + [(a.rule, f"{a.derivation} — facts: {facts_text(a.facts)} — "
                                     f"test: {a.command}"
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
               "measured_gain", "verdict", "derivation", "facts"]


def csv(result) -> DataTable:
    return DataTable(CSV_COLUMNS, [[a.rule, a.cause, a.change, a.command, a.predicted_gain.low,
                                    a.predicted_gain.high, a.measured_gain, a.verdict,
                                    a.derivation, facts_text(a.facts)] for a in result.advice])


VIEW = View(heading=heading, terminal=advice_terminal, facts=html_facts, tables=tables,
            charts=charts, csv=csv, lead=advice_lead,
            facts_title="Advice", name=lambda result: result.subject)
