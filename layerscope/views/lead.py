"""The answer first: the headline of a timed result, one sentence (``headline``), and the lead
section every timed view declares (``lead_section``): the headline and the advice rules that
fired, each with its cause, change, predicted gain, measured gain once verified and the command
that tests it. The advice comes from the result's own record through the pure rules
(``layerscope.advice.advise_result``); nothing is run.

A headline reads the record's fields and nothing else:
    step 39.3 ms, MFU 12.6% of this machine (measured peak); data loading 2% of the step —
    amp predicted up to −32%; 1 more rule
and, verified (``layerscope advise --verify``), "…, measured −17% (confirmed)". A figure the
result does not hold is left out; MFU says why it is not given.
"""
from __future__ import annotations

import re
from statistics import median
from typing import Any

from layerscope.core.phases import BY_NAME as PHASES
from layerscope.views.advice import advice_table, percent, rule_line, top_rule
from layerscope.views.sections import Lead

MEASURED = "measured"
# the kinds whose records hold a step or batch time (those advise reads, and profile --loop)
TIMED = ("train", "profile", "loop", "sweep", "scaling", "ablate")


def _dict(result) -> dict[str, Any]:
    return result.to_dict() if hasattr(result, "to_dict") else dict(result)


def duration(seconds: float) -> str:
    """'39.3 ms', '0.420 ms', '1.25 s': three significant figures."""
    if seconds >= 1:
        return f"{seconds:.3g} s"
    x = seconds * 1e3
    return f"{x:.0f} ms" if x >= 100 else f"{x:.1f} ms" if x >= 10 else f"{x:.2f} ms" \
        if x >= 1 else f"{x:.3f} ms"


# ---- the time, MFU and data clauses, per kind ---------------------------------------------
def _time(d: dict[str, Any]) -> str | None:
    kind = d["kind"]
    if kind == "train" and d.get("step_seconds"):
        return f"step {duration(median(d['step_seconds']))}"
    if kind == "loop" and (d.get("batch_time") or {}).get("median_s"):
        return f"batch {duration(d['batch_time']['median_s'])}"
    if kind == "profile" and (d.get("end_to_end") or {}).get("median_s"):
        s = d.get("settings") or {}
        what = "forward+backward" if s.get("backward") else "forward"
        batch = f" at batch {s['batch_size']}" if s.get("batch_size") else ""
        return f"{what} {duration(d['end_to_end']['median_s'])}{batch}"
    if kind == "ablate":
        base = next((v for v in d.get("variants") or [] if v.get("variant") == "baseline"
                     and v.get("step")), None)
        ok = [v for v in d.get("variants") or [] if v.get("step") and v.get("speedup")]
        best = max(ok, key=lambda v: v["speedup"], default=None)
        out = f"baseline step {duration(base['step']['median_s'])}" if base else None
        if best and best.get("variant") != "baseline":
            out = ", ".join(x for x in (out, f"fastest {best['variant']} "
                                             f"{best['speedup']:.2f}x") if x)
        return out
    if kind == "sweep":
        ok = [c for c in d.get("cells") or [] if c.get("status") == "ok"
              and c.get("throughput_per_s")]
        best = max(ok, key=lambda c: c["throughput_per_s"], default=None)
        if best is None:
            return None
        threads = f"{best['threads']} threads, " if best.get("threads") else ""
        return (f"fastest {best['throughput_per_s']:,.0f} samples/s ({best['backend']}, "
                f"{best['dtype']}, {threads}batch {best['batch_size']})")
    if kind == "scaling" and d.get("points"):
        p = d["points"][-1]
        return (f"{p['world_size']} processes: step {duration(p['step_s'])}, "
                f"scaling efficiency {percent(p['efficiency'])}")
    return None


def _efficiency(d: dict[str, Any]) -> dict[str, Any] | None:
    if d["kind"] == "scaling":
        return (d.get("points") or [{}])[-1].get("utilisation")
    return d.get("efficiency")


NOT_GIVEN = re.compile(r"^MFU against the (?P<peak>.+?) would be (?P<pct>\S+), above 100%, "
                       r"and is not given: (?P<why>.*)$")


def _why_no_mfu(d: dict[str, Any], e: dict[str, Any] | None) -> str:
    for note in (e or {}).get("notes") or []:
        m = NOT_GIVEN.match(note)
        if m:
            return f"{m['pct']} of the {m['peak']} is above 100% ({m['why']})"
    for note in d.get("notes") or []:
        if note.startswith("MFU not given: "):
            return note.removeprefix("MFU not given: ")
    kind = d["kind"]
    if kind in ("sweep", "ablate"):
        return f"{'a sweep' if kind == 'sweep' else 'an ablation'} does not measure it " \
               "(train, run and profile do)"
    if kind == "profile" and not d.get("roofline"):
        return "profiled without the roofline (--no-roofline), which measures the peak"
    if kind == "scaling":
        return "the runs did not count their FLOPs"
    if d.get("post_mortem") and not d.get("step_seconds"):
        return "the run ended out of memory before a step was measured"
    if kind == "train" and not d.get("step_seconds"):
        return "no step was measured"
    return "the result holds no efficiency section (saved by an earlier release)"


def _mfu(d: dict[str, Any]) -> str:
    e = _efficiency(d)
    if not e or e.get("mfu") is None:
        return f"MFU not given: {_why_no_mfu(d, e)}"
    out = f"MFU {percent(e['mfu'])} of " + ("this machine (measured peak)"
                                           if e["peak_source"] == MEASURED
                                           else f"the {e['peak_source']} peak")
    sheet = e.get("datasheet") or {}
    if sheet.get("mfu") is not None:
        out += f", {percent(sheet['mfu'])} of the {sheet['peak_source']}"
    if e.get("mbu") is not None:
        out += f", MBU {percent(e['mbu'])}"
    return out


def data_share(d: dict[str, Any]) -> float | None:
    """The data phase's share of a train or loop result's phases (as advise reads it)."""
    seconds = (d.get("breakdown") if d["kind"] == "train" else d.get("phases") or {}) or {}
    seconds = seconds.get("seconds") or {}
    total = sum(v for p, v in seconds.items() if p in PHASES and v)
    return (seconds.get("data") or 0.0) / total if total else None


def _data(d: dict[str, Any]) -> str | None:
    share = data_share(d) if d["kind"] in ("train", "loop") else None
    if share is None:
        return None
    return f"data loading {percent(share)} of the {'step' if d['kind'] == 'train' else 'batch'}"


def headline(result, advice=None) -> str:
    """One sentence: the result's step (batch) time, its MFU or why none is given, the
    data-loading share, and the advice rule with the largest predicted gain (``advice``: an
    ``AdviceReport`` of this result, e.g. verified; by default the rules are run on the
    record, for the kinds advise reads)."""
    d = _dict(result)
    if d["kind"] not in TIMED:
        raise ValueError(f"a headline is written for {', '.join(TIMED)} results, not "
                         f"{d['kind']!r}")
    if advice is None:
        advice = _advise(result, d["kind"])
    head = ", ".join(x for x in (_time(d), _mfu(d)) if x)
    head = "; ".join(x for x in (head, _data(d)) if x)
    tail = top_rule(_dict(advice)) if advice is not None else None
    return f"{head} — {tail}" if tail else head


def _advise(result, kind: str):
    """The advice of the pure rules on ``result``'s record, or None for a kind advise does
    not read."""
    from layerscope.advice import advise_result
    from layerscope.advice.facts import KINDS

    return advise_result(result) if kind in KINDS else None


# ---- the lead section -----------------------------------------------------------------------
def lead_section(result) -> Lead:
    """A timed result's lead: its headline and the rules that fired on its record."""
    report = _advise(result, result.kind)
    text = headline(result, report)
    if report is None:  # a kind advise does not read (profile --loop): the headline alone
        return Lead(text)
    items = sorted((a.to_dict() for a in report.advice),
                   key=lambda a: -a["predicted_gain"]["high"])  # the headline's rule first
    if not items:
        return Lead(text, note=report.notes[0] if report.notes else "no rule fired")
    return Lead(text, advice_table(report, commands=True), [rule_line(a) for a in items],
                note="gain: fraction of the step time saved (1 - new / old). `layerscope advise` "
                     "on the saved JSON writes each rule's arithmetic; --verify runs the commands "
                     "and measures the gains")
