"""The answer first: a timed result's headline (one sentence from its record's fields, table-
driven over hand-made records with hand-written expectations) and the lead section its report
opens with (HTML: before everything else in the result's section; terminal: the last lines),
present with the rules that fired, saying so when none fired, absent for untimed kinds."""
from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

from layerscope.core.results import read_result
from layerscope.renderers.html import render_html
from layerscope.renderers.terminal import to_text
from layerscope.views import view_for
from layerscope.views.lead import headline
from tests import sample_results as S
from tests.helpers import run_cli

DATA = Path(__file__).parent / "data"
M = "\u2212"  # the minus sign of a shorter time


def _train(step_s=0.038, data=0.22, efficiency=None, notes=()):
    """A train record's JSON: phases of one step, data ``data`` of it; 10 steps of step_s."""
    rest = 1.0 - data
    seconds = {"data": data, "forward": rest * 0.4, "backward": rest * 0.5,
               "optimizer": rest * 0.1}
    return {"kind": "train", "step_seconds": [step_s] * 10, "breakdown": {"seconds": seconds},
            "efficiency": efficiency, "notes": list(notes)}


def _eff(mfu, source="measured", **extra):
    return {"mfu": mfu, "peak_source": source, "step_s": 0.038, **extra}


def _rule(rule, low, high, variant=None, threads=None, gain=None, verdict="not-run"):
    return {"rule": rule, "variant": variant, "threads": threads,
            "predicted_gain": {"low": low, "high": high}, "measured_gain": gain,
            "verdict": verdict}


WORKERS = _rule("workers", 0.11, 0.22, variant="workers=4")
STALL = "step 38.0 ms, MFU 41% of this machine (measured peak); data loading 22% of the step"

# (id, result JSON, advice JSON (None: no advice part), expected headline)
CASES = [
    ("data-stall", _train(efficiency=_eff(0.41)), {"advice": [WORKERS]},
     f"{STALL} — workers=4 predicted {M}11%..{M}22%"),
    ("verified", _train(efficiency=_eff(0.41)),
     {"advice": [_rule("workers", 0.11, 0.22, "workers=4", gain=0.17, verdict="confirmed")]},
     f"{STALL} — workers=4 predicted {M}11%..{M}22%, measured {M}17% (confirmed)"),
    ("refuted-slower", _train(efficiency=_eff(0.41)),
     {"advice": [_rule("workers", 0.11, 0.22, "workers=4", gain=-0.05, verdict="refuted")]},
     f"{STALL} — workers=4 predicted {M}11%..{M}22%, measured +5.0% (refuted)"),
    # the largest predicted gain leads; the others are counted
    ("several-rules", _train(efficiency=_eff(0.41)),
     {"advice": [WORKERS, _rule("amp", 0.0, 0.3, variant="amp"),
                 _rule("threads", 0.0, 0.1, threads=1)]},
     f"{STALL} — amp predicted up to {M}30%; 2 more rules"),
    # once verified, the confirmed rule leads (the largest measured gain), not the largest
    # prediction that the measurement did not bear out
    ("verified-confirmed-leads", _train(efficiency=_eff(0.41)),
     {"advice": [_rule("amp", 0.0, 0.3, "amp", gain=0.001, verdict="within-noise"),
                 _rule("channels-last", 0.0, 0.18, "channels-last", gain=0.096,
                       verdict="confirmed"),
                 _rule("workers", 0.04, 0.09, "workers=2", gain=-0.16, verdict="refuted")]},
     f"{STALL} — channels-last predicted up to {M}18%, measured {M}9.6% (confirmed); "
     "2 more rules"),
    ("threads-label", _train(efficiency=_eff(0.41)),
     {"advice": [_rule("threads", 0.0, 0.1, threads=1)]},
     f"{STALL} — threads=1 predicted up to {M}10%"),
    ("none-fired", _train(efficiency=_eff(0.41)), {"advice": []},
     f"{STALL} — no advice rule fired"),
    # MFU absent: the record's own reason
    ("mfu-not-counted", _train(notes=["MFU not given: the step's FLOPs could not be counted "
                                      "(RuntimeError: x)"]), {"advice": []},
     "step 38.0 ms, MFU not given: the step's FLOPs could not be counted (RuntimeError: x); "
     "data loading 22% of the step — no advice rule fired"),
    ("mfu-above-peak", _train(efficiency=_eff(None, notes=[
        "MFU against the measured peak would be 120%, above 100%, and is not given: the "
        "measured peak looks stale"])), {"advice": []},
     "step 38.0 ms, MFU not given: 120% of the measured peak is above 100% (the measured peak "
     "looks stale); data loading 22% of the step — no advice rule fired"),
    ("mfu-old-result", _train(data=0.0), {"advice": []},
     "step 38.0 ms, MFU not given: the result holds no efficiency section (saved by an "
     "earlier release); data loading 0% of the step — no advice rule fired"),
    ("mfu-out-of-memory-first-step", {**_train(data=0.0), "step_seconds": [],
                                      "post_mortem": {"error": "MemoryError"}}, {"advice": []},
     "MFU not given: the run ended out of memory before a step was measured; "
     "data loading 0% of the step — no advice rule fired"),
    # a GPU: the measured peak and the datasheet's
    ("datasheet", _train(step_s=0.0042, data=0.05, efficiency=_eff(
        0.052, datasheet={"mfu": 0.031, "peak_source": "H100 SXM datasheet (bf16, dense)"})),
     {"advice": []},
     "step 4.20 ms, MFU 5.2% of this machine (measured peak), 3.1% of the H100 SXM datasheet "
     "(bf16, dense); data loading 5.0% of the step — no advice rule fired"),
    # inference: forward time at its batch, MFU and MBU; no data phase
    ("profile", {"kind": "profile", "end_to_end": {"median_s": 0.00042},
                 "settings": {"batch_size": 1, "backward": False},
                 "efficiency": _eff(0.031, mbu=0.12), "roofline": {}}, {"advice": []},
     "forward 0.420 ms at batch 1, MFU 3.1% of this machine (measured peak), MBU 12% — no "
     "advice rule fired"),
    ("profile-no-roofline", {"kind": "profile", "end_to_end": {"median_s": 0.0125},
                             "settings": {"batch_size": 8, "backward": True}}, {"advice": []},
     "forward+backward 12.5 ms at batch 8, MFU not given: profiled without the roofline "
     "(--no-roofline), which measures the peak — no advice rule fired"),
    # profile --loop: advise does not read it, so no advice part
    ("loop", {"kind": "loop", "batch_time": {"median_s": 0.008},
              "phases": {"seconds": {"data": 1.5, "h2d": 0.5, "forward": 6.0, "other": 2.0}},
              "efficiency": _eff(0.0042)}, None,
     "batch 8.00 ms, MFU 0.42% of this machine (measured peak); data loading 15% of the batch"),
    ("sweep", {"kind": "sweep", "cells": [
        {"status": "ok", "throughput_per_s": 1000.0, "backend": "eager", "dtype": "float32",
         "threads": 1, "batch_size": 1},
        {"status": "ok", "throughput_per_s": 12190.4, "backend": "eager", "dtype": "float32",
         "threads": 2, "batch_size": 16},
        {"status": "error", "backend": "onnxruntime", "dtype": "float32", "batch_size": 1}]},
     {"advice": [_rule("threads", 0.0, 0.1, threads=1)]},
     "fastest 12,190 samples/s (eager, float32, 2 threads, batch 16), MFU not given: a sweep "
     f"does not measure it (train, run and profile do) — threads=1 predicted up to {M}10%"),
    ("scaling", {"kind": "scaling", "points": [
        {"world_size": 1, "step_s": 0.02, "efficiency": 1.0},
        {"world_size": 4, "step_s": 0.05, "efficiency": 0.4, "utilisation": _eff(0.08)}]},
     {"advice": []},
     "4 processes: step 50.0 ms, scaling efficiency 40%, MFU 8.0% of this machine (measured "
     "peak) — no advice rule fired"),
    ("ablate", {"kind": "ablate", "variants": [
        {"variant": "baseline", "step": {"median_s": 0.0215}, "speedup": 1.0},
        {"variant": "pin-memory", "step": None, "speedup": None},
        {"variant": "channels-last", "step": {"median_s": 0.0172}, "speedup": 1.25}]},
     {"advice": []},
     "baseline step 21.5 ms, fastest channels-last 1.25x, MFU not given: an ablation does not "
     "measure it (train, run and profile do) — no advice rule fired"),
]


@pytest.mark.parametrize("result,advice,expected", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_headline_of_hand_made_records(result, advice, expected):
    assert headline(result, advice) == expected


def test_headline_refuses_an_untimed_result():
    with pytest.raises(ValueError, match="not 'analyze'"):
        headline(S.analyze_report())


def test_headline_runs_the_rules_on_the_record():
    """Without advice given, the rules run on the record itself: the sample train run (data
    1.5 of 21.5 ms = 7.0%) gets the rule with the largest predicted gain of advise's own."""
    from layerscope.advice import advise_result

    r = S.train_report()
    top = max(advise_result(r).advice, key=lambda a: a.predicted_gain.high)
    text = headline(r)
    assert text.startswith("step 21.5 ms, MFU not given: ")
    assert "; data loading 7.0% of the step — " in text
    assert text.split(" — ")[1].startswith(f"{top.variant} predicted up to ")


# ---- the lead section in the reports --------------------------------------------------------
def _quiet_train():
    """The sample train run with every change the rules suggest made already: none fires."""
    r = S.train_report()
    r.config.update(amp=True, channels_last=True, compile=True, num_workers=4)
    return r


@pytest.mark.parametrize("make", [S.train_report, S.profile_report],
                         ids=["train", "profile"])
def test_html_opens_with_the_lead(make):
    r = make()
    page = render_html(r)
    lead = page.index('class="ls-lead"')
    # before everything else of the result: warnings, environment, key figures, charts, tables
    assert lead < page.index('class="ls-facts"') < page.index('class="ls-charts"')
    assert lead > page.index("<h2>")
    block = page[lead:page.index('class="ls-facts"')]
    assert f"<strong>Answer:</strong> {html.escape(headline(r))}</p>" in block
    for a in view_for(r).lead(r).table.rows:  # every rule that fired, with its command
        assert a[0].text in block and a[-1].text in block


def test_html_lead_says_when_no_rule_fired():
    page = render_html(_quiet_train())
    lead = page[page.index('class="ls-lead"'):page.index('class="ls-facts"')]
    assert "no advice rule fired" in lead and "no rule fired" in lead
    assert "<table" not in lead


@pytest.mark.parametrize("make", [S.analyze_report, S.ops_table, S.compare_result],
                         ids=["analyze", "ops", "compare"])
def test_untimed_results_have_no_lead(make):
    r = make()
    assert view_for(r).lead(r) is None
    assert 'class="ls-lead"' not in render_html(r)
    assert "Answer:" not in to_text(r)


def test_terminal_ends_with_the_headline_and_one_line_per_rule():
    r = S.train_report()
    lines = to_text(r, width=400).rstrip("\n").splitlines()
    fired = view_for(r).lead(r).table.rows
    answer = len(lines) - 1 - len(fired)
    assert lines[answer] == f"Answer: {headline(r)}"
    assert sorted(line.split(":")[0].strip() for line in lines[answer + 1:]) == \
        sorted(row[0].text for row in fired)


def test_notebook_html_has_the_lead():
    r = S.train_report()
    assert 'class="ls-lead"' in r._repr_html_()


def test_advise_writes_the_headline_of_the_result_it_read(tmp_path):
    out = tmp_path / "advice.json"
    code, _, err = run_cli("advise", str(DATA / "train_0.4.json"), "--format", "json",
                           "-o", str(out))
    assert code == 0, err
    d = json.loads(out.read_text())
    source = read_result(str(DATA / "train_0.4.json"))
    assert d["headline"] == headline(source, read_result(str(out)))
    # its own report's lead is that headline
    assert f"Answer: {d['headline']}" in " ".join(to_text(read_result(str(out)),
                                                          width=400).split())


def test_lead_table_shows_measured_gains_only_once_one_was_run():
    """A timed result's lead: predicted gain and command (nothing was run for it); the advice
    table of a verified advice result keeps its measured gain and verdict."""
    from layerscope.views.advice import advice_table

    r = S.train_report()
    labels = [c.label for c in view_for(r).lead(r).table.columns]
    assert labels == ["Rule", "Cause", "Change", "Predicted gain", "Command (tests it)"]
    verified = S.advice_report()
    verified.advice[0].measured_gain, verified.advice[0].verdict = 0.17, "confirmed"
    labels = [c.label for c in advice_table(verified, commands=True).columns]
    assert labels[4:] == ["Measured", "Verdict", "Command (tests it)"]
