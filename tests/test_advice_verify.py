"""advise --verify's verdicts on injected step times (advice/verdict.py): the re-run baseline
must reproduce the result's steps before a change is credited; when it does not, the rounds go
on interleaved (A B A B ..., 3 in all), and a baseline that still does not reproduce makes the
rule unverifiable, with both figures and no causal story. No wall-clock time is measured here:
every step time is made up, so no machine load can flip these verdicts."""
from __future__ import annotations

import pytest

from layerscope.advice import Round, _conclude, _rounds
from layerscope.advice.verdict import ROUNDS, judge_variant, reproduces
from layerscope.core.records.advice import Advice, AdviceReport, Gain


def steps(level_ms: float, n: int = 20, wobble: float = 0.01) -> list[float]:
    """``n`` step times around ``level_ms`` (seconds), a deterministic +-``wobble`` pattern."""
    pattern = [0.0, 1.0, -1.0, 0.5, -0.5]
    return [level_ms / 1e3 * (1 + wobble * pattern[i % len(pattern)]) for i in range(n)]


@pytest.mark.parametrize("result_ms,rerun_ms,reproduced", [
    (62.0, 62.0, True),   # the same level
    (62.0, 62.6, True),   # 1% apart: under the 3% any verdict needs
    (62.0, 177.0, False),  # the vae case: 62 ms then, 177 ms now (2.8x)
    (62.0, 40.0, False),  # quieter now than then: as unfair the other way
], ids=["same", "one-percent", "busier-now", "quieter-now"])
def test_the_baseline_must_reproduce_the_results_steps(result_ms, rerun_ms, reproduced):
    check = reproduces(steps(result_ms, 30), [steps(rerun_ms, 15)])
    assert check.reproduced is reproduced
    assert check.result_s == pytest.approx(result_ms / 1e3)
    assert check.rerun_s == pytest.approx(rerun_ms / 1e3)


@pytest.mark.parametrize("base_rounds,new_rounds,verdict", [
    ([steps(50)], [steps(35)], "confirmed"),  # 30% faster, beyond the noise
    ([steps(50)], [steps(65)], "refuted"),  # 30% slower
    ([steps(50)], [steps(50.5)], "within-noise"),  # 1%: under the 3% floor
    # three rounds: the baseline's own rounds at 45, 50 and 60 ms; the variant at 52 ms lies
    # inside the range of the baseline rounds' medians, however many samples say it differs
    ([steps(45), steps(50), steps(60)], [steps(52)] * 3, "within-noise"),
    # and a variant outside that range in every round is confirmed
    ([steps(45), steps(50), steps(60)], [steps(30), steps(32), steps(34)], "confirmed"),
], ids=["faster", "slower", "one-percent", "inside-the-rounds-drift", "beyond-the-rounds"])
def test_a_variant_is_judged_with_diffs_rule(base_rounds, new_rounds, verdict):
    judged = judge_variant(base_rounds, new_rounds)
    assert judged.verdict == verdict
    base = sorted(x for r in base_rounds for x in r)
    new = sorted(x for r in new_rounds for x in r)
    median = lambda xs: (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2  # noqa: E731
    assert judged.gain == pytest.approx(1 - median(new) / median(base))
    assert judged.measured.startswith(f"step {median(new) * 1e3:.2f} ms against the "
                                      f"baseline's {median(base) * 1e3:.2f} ms")


def _fake_rounds(baseline_ms: list[float], variant_ms: list[float]):
    """A run_round that measures, in round r, the baseline at baseline_ms[r] and the
    variant at variant_ms[r]; it records how many rounds ran."""
    calls = []

    def run_round(r: int) -> dict[str, Round]:
        calls.append(r)
        return {"baseline": Round(steps(baseline_ms[r], 12), {"forward": baseline_ms[r]}),
                "amp": Round(steps(variant_ms[r], 12), {"forward": variant_ms[r] / 2})}
    return run_round, calls


def _report() -> AdviceReport:
    item = Advice("amp", "68% of the time runs in float32", "run in bfloat16 autocast",
                  "layerscope ablate digits-cnn --variants baseline,amp", Gain(0.0, 0.3),
                  "d = 0.68", variant="amp")
    return AdviceReport("r.json", "train", "digits-cnn", "cpu", [item], checked=["amp"])


def test_a_reproduced_baseline_takes_one_round_and_the_variant_is_judged():
    run_round, calls = _fake_rounds([62.0] * 3, [45.0] * 3)
    measured, check = _rounds(run_round, steps(62.0, 30), repeats=1)
    assert calls == [0] and check.reproduced
    report = _report()
    _conclude(report, measured, check, {}, {}, "ablate", lambda item: item.variant)
    (item,) = report.advice
    assert item.verdict == "confirmed" and item.measured_gain == pytest.approx(1 - 45 / 62,
                                                                               abs=1e-4)
    assert report.verify["baseline_reproduced"] is True and report.verify["rounds"] == 1
    assert report.verify["speedups"]["amp"] == pytest.approx(62 / 45)


def test_a_baseline_that_reproduces_only_when_interleaved_is_judged_on_every_round():
    # round 1 ran while the machine was busy (the baseline at 120 ms); rounds 2 and 3 measure
    # what the result measured, and the pooled baseline reproduces it
    run_round, calls = _fake_rounds([120.0, 62.0, 62.0], [90.0, 45.0, 45.0])
    measured, check = _rounds(run_round, steps(62.0, 30), repeats=1)
    assert calls == list(range(ROUNDS)) == [0, 1, 2]
    assert len(measured["baseline"]) == len(measured["amp"]) == 3


def test_a_baseline_that_never_reproduces_makes_the_rule_unverifiable():
    # the vae case: the result measured 62 ms a step, the machine now measures 177 ms, and
    # the variant 57 ms in one round: no causal story, both figures
    run_round, calls = _fake_rounds([177.0, 170.0, 181.0], [57.0, 150.0, 160.0])
    measured, check = _rounds(run_round, steps(62.0, 30), repeats=1)
    assert calls == [0, 1, 2] and not check.reproduced
    report = _report()
    _conclude(report, measured, check, {}, {"loadavg": [1.2, 1.0, 0.9]}, "ablate",
              lambda item: item.variant)
    (item,) = report.advice
    assert item.verdict == "unverifiable" and item.measured_gain is None
    note = item.verify_note
    assert note.startswith("ablate amp: unverifiable on this machine now: the baseline re-ran "
                           "at 177.00 ms a step (rounds: 177.00 ms, 170.00 ms, 181.00 ms) "
                           "where the result measured 62.00 ms; load 1.2 then, ")
    assert "fell short" not in note and "exceeded" not in note  # no story of why
    assert report.verify["baseline_reproduced"] is False
    assert report.verify["result_step_s"] == pytest.approx(0.062)


def test_a_result_without_step_times_is_judged_and_says_the_check_was_not_made():
    run_round, calls = _fake_rounds([62.0] * 3, [45.0] * 3)
    measured, check = _rounds(run_round, None, repeats=2)
    assert calls == [0, 1] and check is None
    report = _report()
    _conclude(report, measured, check, {}, {}, "ablate", lambda item: item.variant)
    assert report.advice[0].verdict == "confirmed"
    assert any("kept no step times" in n for n in report.notes)


def test_a_variant_that_failed_is_not_run_with_its_reason():
    measured = {"baseline": [Round(steps(62.0), {})]}
    report = _report()
    _conclude(report, measured, None, {"amp": "RuntimeError: no bfloat16 here"}, {}, "ablate",
              lambda item: item.variant)
    (item,) = report.advice
    assert (item.verdict, item.verify_note) == ("not-run",
                                                "ablate amp: RuntimeError: no bfloat16 here")
