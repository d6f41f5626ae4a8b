"""The step ledger of a watched run (``training.step_ledger``), driven without torch: each case
records steps timed on the fake clock, merges, drops, settles and closes epochs as the Watch's
hooks would, and checks the steps counted, the measured ones and their totals by hand."""
from __future__ import annotations

import subprocess
import sys

import pytest

from layerscope.training.step_ledger import StepLedger, optimizer_groups, transient_text
from tests.helpers import FakeClock


class Follower:
    """Stands for the per-step figures kept beside the ledger (the model's inputs seen)."""

    def __init__(self):
        self.calls = []

    def merge_last(self, k):
        self.calls.append(("merge", k))

    def drop_last(self, k):
        self.calls.append(("drop", k))


def drive(ops, warmup=0):
    """Run ``ops`` on a ledger: ("step", forward_s, backward_s, samples[, compile_s]) times a
    step on the fake clock (its wall time: the two phases and 0.5 s of other) and records it;
    ("provisional",) / ("pending", i) leave the last step waiting; ("end",) ends the parts;
    ("settle",), ("epoch",), ("opt_seen",) as the Watch does."""
    clock, follower = FakeClock(), Follower()
    ledger = StepLedger(warmup, trace=True, follower=follower)
    for op in ops:
        if op[0] == "step":
            _, fwd, bwd, samples, *compile_s = op
            t0 = clock()
            clock.advance(fwd + bwd + 0.5)
            ledger.record(clock() - t0, {"forward": fwd, "backward": bwd, "other": 0.5},
                          samples, 0, compile_s=compile_s[0] if compile_s else 0.0,
                          span=(t0, clock()))
        elif op[0] == "provisional":
            ledger.provisional += 1
        elif op[0] == "pending":
            ledger.pending.append(op[1])
        elif op[0] == "end":
            ledger.end_parts()
        elif op[0] == "settle":
            ledger.settle()
        elif op[0] == "epoch":
            ledger.close_epoch()
        elif op[0] == "opt_seen":
            ledger.opt_seen = True
    return ledger, follower


CASES = {
    # 1.5, 2.5, 3.5 s steps; the first is warm-up
    "warm-up left out": (
        [("step", 1, 0, 8), ("step", 1, 1, 8), ("step", 2, 1, 8)], 1,
        3, [1, 2], [2.5, 3.5], 16, []),
    # gradient accumulation: two backward passes before the step that ends them, one step
    "parts merged into one step": (
        [("step", 1, 1, 4), ("provisional",), ("step", 1, 1, 4), ("provisional",),
         ("step", 0, 0, 0), ("provisional",), ("end",)], 0,
        1, [0], [5.5], 8, [("merge", 3)]),
    # the run stopped inside a step whose backward passes closed parts: they are dropped
    "parts of an unended step dropped": (
        [("opt_seen",), ("step", 1, 0, 2), ("step", 1, 0, 2), ("provisional",),
         ("step", 1, 0, 2), ("provisional",), ("settle",)], 0,
        1, [0], [1.5], 2, [("drop", 2)]),
    # two optimizers' parts wait for the iteration's last one when the run stops: one step
    "pending parts settle into one step": (
        [("step", 1, 0, 2), ("step", 1, 0, 0), ("pending", 0), ("step", 0, 1, 0),
         ("pending", 1), ("settle",)], 0,
        2, [0, 1], [1.5, 3.0], 2, [("merge", 2)]),
    # a step in which dynamo compiled is a one-time cost, kept out of the measured steps
    "compile step left out": (
        [("step", 1, 0, 4, 0.0), ("step", 9, 0, 4, 7.0), ("step", 1, 0, 4, 0.0)], 0,
        3, [0, 2], [1.5, 1.5], 8, []),
}


@pytest.mark.parametrize("ops, warmup, steps, measured, seconds, samples, follower",
                         CASES.values(), ids=CASES.keys())
def test_the_ledger_counts_measures_and_merges(ops, warmup, steps, measured, seconds,
                                               samples, follower):
    ledger, seen = drive(ops, warmup)
    assert ledger.steps == steps
    assert ledger.measured() == measured
    totals = ledger.sum(ledger.measured())
    assert [ledger.seconds[i] for i in measured] == pytest.approx(seconds)
    assert totals.wall == pytest.approx(sum(seconds))
    assert totals.samples == samples
    # the phases of every step sum to its wall time, merged steps included
    for phases, wall in zip(ledger.phases, ledger.seconds):
        assert sum(phases.values()) == pytest.approx(wall)
    assert seen.calls == follower
    assert [span[0] for span in ledger.step_spans] == list(range(1, len(ledger.seconds) + 1))


def test_a_merged_step_spans_its_parts_on_the_clock():
    ledger, _ = drive([("step", 1, 0, 1), ("provisional",), ("step", 2, 0, 1),
                       ("provisional",), ("end",)])
    assert ledger.step_spans == [(1, 0.0, 4.0)]  # 1.5 s then 2.5 s, from 0


EPOCHS = {
    # 4 steps, the loader's second pass after step 2; step 1 is warm-up
    "two epochs": ([("step", 1, 0, 1), ("step", 1, 0, 1), ("epoch",), ("step", 1, 0, 1),
                    ("step", 1, 0, 1)], 1, [1, 2]),
    # an epoch all warm-up is left out
    "warm-up epoch": ([("step", 1, 0, 1), ("epoch",), ("step", 1, 0, 1)], 1, [1]),
    # a second epoch end with no step since the last one closes nothing
    "no empty epoch": ([("step", 1, 0, 1), ("epoch",), ("epoch",), ("step", 1, 0, 1)], 0,
                       [1, 1]),
}


@pytest.mark.parametrize("ops, warmup, steps", EPOCHS.values(), ids=EPOCHS.keys())
def test_epochs_hold_their_measured_steps(ops, warmup, steps):
    ledger, _ = drive(ops, warmup)
    assert [t.steps for t in ledger.epoch_totals()] == steps


def test_one_time_costs_are_named_with_their_step():
    ledger, _ = drive([("step", 1, 0, 4, 2.0), ("step", 1, 0, 4, 0.0), ("step", 9, 0, 4, 7.0),
                       ("step", 1, 0, 4, 0.0)], warmup=1)
    ledger.profiler_rows.append({"what": "profiler start", "seconds": 0.25, "step": 2})
    assert ledger.transient_rows() == [
        {"kind": "compile", "step": 1, "seconds": 1.5, "compile_s": 2.0, "warmup": True},
        {"kind": "compile", "step": 3, "seconds": 9.5, "compile_s": 7.0},
        {"kind": "profiler start", "step": 2, "seconds": 0.25}]
    assert transient_text(ledger.transient_rows()[1]) == \
        "compile 9.5 s in step 3 (7 s of it compiling)"


@pytest.mark.parametrize("steps, groups", [
    ([(0,), (0,), (0,)], [((0,), 3)]),
    ([(0, 1), (0, 1), (1,)], [((0, 1), 2), ((1,), 1)]),
    ([(1, 0, 1), ()], [((1, 0), 1)]),  # each once, in first-step order; a step of none
], ids=["one optimizer", "an iteration of two, then one", "repeats and empty"])
def test_optimizer_groups(steps, groups):
    assert optimizer_groups(steps) == groups


@pytest.mark.integration
def test_the_ledger_imports_no_torch():
    code = ("import sys, layerscope.training.step_ledger; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
