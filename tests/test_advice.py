"""layerscope advise: each rule on hand-made facts (fires or not, the predicted range derived by
hand), the facts read from saved results, bad input (one line, exit 2) and --verify on a tiny
CPU training run (verdicts and measured gains consistent with the ablation it ran; never a
wall-clock threshold)."""
from __future__ import annotations

import importlib
import json
import pkgutil
import re
from pathlib import Path

import pytest

from layerscope.advice import advise_result, rules
from layerscope.advice.facts import facts_of
from layerscope.advice.rule import CannotJudge, Finding
from layerscope.advice.rules import RULES
from layerscope.core.records.advice import VERDICTS
from layerscope.core.results import load_result, read_result
from tests.helpers import run_cli

DATA = Path(__file__).parent / "data"
BY_NAME = {r.name: r for r in RULES}

# a training loader that fed the steps 50 batches: what the workers rule needs to judge
FED = {"training_loaders": 1, "loader_batches": 50}
# (id, rule, facts, expected: None = does not fire, (CANNOT, words) = says it cannot judge,
# why, else (low, high, variant or threads))
CANNOT = "cannot judge"
CASES = [
    # data share 22% with 0 workers, 2 cores: workers=2 hide half to all of it:
    # low = 0.22 x 0.5 = 0.11, high = 0.22
    ("workers-data-stall", "workers", {"data_share": 0.22, "workers": 0, "cores": 2,
                                       "device": "cpu", **FED}, (0.11, 0.22, "workers=2")),
    ("workers-small-share", "workers", {"data_share": 0.03, "workers": 0, "cores": 2, **FED},
     None),
    ("workers-already-enough", "workers", {"data_share": 0.3, "workers": 4, "cores": 8, **FED},
     None),
    # CUDA, h2d 10% unpinned: hidden = 0.2 + 0.1/2 = 0.25; low 0.125
    ("workers-and-pinning-on-cuda", "workers",
     {"data_share": 0.2, "h2d_share": 0.1, "workers": 0, "cores": 8, "device": "cuda", **FED},
     (0.125, 0.25, "workers=4+pin-memory")),
    ("workers-loader-verdict", "workers",
     {"data_share": 0.01, "data_verdict": "io_bound", "workers": 0, "cores": 2, **FED},
     (0.005, 0.01, "workers=2")),
    # waiting (I/O, sleeps) needs no core per worker: the loader's count (8), capped at 4;
    # d = 0.8: 0.4 .. 0.8
    ("workers-io-bound-takes-the-loaders-count", "workers",
     {"data_share": 0.8, "data_verdict": "io_bound", "data_suggested_workers": 8, "workers": 0,
      "cores": 2, **FED}, (0.4, 0.8, "workers=4")),
    # CPU-bound transforms: a worker per core whatever the loader's count
    # the loader measured that one worker keeps up (I/O-bound): one, not one per core, so the
    # rule and the data loader's verdict name the same count
    ("workers-takes-the-loaders-smaller-count", "workers",
     {"data_share": 0.33, "data_verdict": "io_bound", "data_suggested_workers": 1, "workers": 0,
      "cores": 2, **FED}, (0.165, 0.33, "workers=1")),
    ("workers-cpu-bound-one-per-core", "workers",
     {"data_share": 0.8, "data_verdict": "cpu_bound", "data_suggested_workers": 8, "workers": 0,
      "cores": 2, **FED}, (0.4, 0.8, "workers=2")),
    # the data loader measured that the loading keeps up ("fine"): workers would hide nothing,
    # even with a data share above 5% (the share is the main process's own fetch)
    ("workers-loader-keeps-up", "workers",
     {"data_share": 0.085, "data_verdict": "fine", "workers": 0, "cores": 2, **FED}, None),
    # a verdict more workers do not remove (start-up each epoch) and a small share: no advice
    # the data loader's verdict from a loader iterated once, for one batch: io_bound, "set
    # num_workers=8" (before: workers=4, 0.25 .. 0.5)
    ("workers-loader-fed-one-batch", "workers",
     {"data_share": 0.5, "data_verdict": "io_bound", "data_suggested_workers": 8, "workers": 0,
      "cores": 2, "training_loaders": 1, "loader_batches": 1}, (CANNOT, "fed 1 batch(es)")),
    # the only loader measured is a validation loader (batches with gradients off): the step
    # did not wait on it (before: workers=2 from its figures)
    ("workers-validation-loader-only", "workers",
     {"data_share": 0.3, "workers": 0, "cores": 2, "training_loaders": 0},
     (CANNOT, "no data loader fed the training steps")),
    # a script's result without the data_loading section: which loader, how many batches?
    ("workers-loaders-not-recorded", "workers",
     {"data_share": 0.3, "workers": 0, "cores": 2, "script": {"name": "s.py"}},
     (CANNOT, "does not record its data loaders")),
    ("workers-startup-verdict", "workers",
     {"data_share": 0.01, "data_verdict": "worker_startup", "workers": 0, "cores": 2, **FED},
     None),
    # conv share 0.5 on CPU, s = 1..1.3: high = 0.5 x (1 - 1/1.3) = 0.5 x 0.230769 = 0.115385
    ("channels-last-cpu", "channels-last", {"conv_layers": 2, "conv_share": 0.5,
                                            "device": "cpu"}, (0.0, 0.115385, "channels-last")),
    # CUDA s = 1.1..1.5: 0.5 x (1 - 1/1.1) = 0.045455, 0.5 x (1 - 1/1.5) = 0.166667
    ("channels-last-cuda", "channels-last", {"conv_layers": 20, "conv_share": 0.5,
                                             "device": "cuda"},
     (0.045455, 0.166667, "channels-last")),
    # a train result has no conv share: forward+backward bounds it (0.9 x 0.230769)
    ("channels-last-bound-by-compute", "channels-last",
     {"conv_layers": 2, "compute_share": 0.9, "device": "cpu"}, (0.0, 0.207692, "channels-last")),
    ("channels-last-no-conv", "channels-last", {"conv_layers": 0, "conv_share": 0.0}, None),
    ("channels-last-already", "channels-last", {"conv_layers": 2, "conv_share": 0.5,
                                                "channels_last": True}, None),
    # matmul share 0.6 on CUDA, s = 1.5..3: 0.6 x 1/3 = 0.2, 0.6 x 2/3 = 0.4
    ("amp-cuda", "amp", {"matmul_share": 0.6, "device": "cuda", "dtype": "float32"},
     (0.2, 0.4, "amp")),
    ("amp-small-share", "amp", {"matmul_share": 0.1, "device": "cuda"}, None),
    ("amp-already-bf16", "amp", {"matmul_share": 0.6, "dtype": "bfloat16"}, None),
    ("amp-already-on", "amp", {"matmul_share": 0.6, "amp": True}, None),
    # a conv net's training step (a recipe: 2 conv + 2 linear layers, MFU 23%): forward+
    # backward 0.8 bounds the contractions, s = 1..1.6: 0 .. 0.8 x 0.375 = 0.3
    ("amp-conv-net", "amp", {"contraction_layers": 4, "conv_layers": 2, "mfu": 0.23,
                             "compute_share": 0.8, "device": "cpu", "kind": "train"},
     (0.0, 0.3, "amp")),
    # the layer table times the contractions: 0.5 of the step, s = 1.5..3 on CUDA: 1/6 .. 1/3
    ("amp-layer-table", "amp", {"contraction_share": 0.5, "contraction_layers": 3,
                                "compute_share": 0.9, "device": "cuda"},
     (0.166667, 0.333333, "amp")),
    # an elementwise polynomial fit (no module, no matmul): backward 37% of the step, nothing
    # counts a contraction (no model forward, so no FLOPs; no layer table): it cannot judge
    # (before: "predicted up to -14%" from the backward's share)
    ("amp-elementwise-only-loop", "amp",
     {"compute_share": 0.373, "amp": False, "device": "cpu", "kind": "train",
      "script": {"name": "poly.py"}}, (CANNOT, "counts no contraction")),
    # the layer table has contraction rows, 5% of the step: the rest is not theirs
    ("amp-contractions-a-small-share", "amp",
     {"contraction_share": 0.05, "contraction_layers": 1, "compute_share": 0.9}, None),
    # DDP on Linear(20, 1) with gloo: backward (the all-reduce) 82% of the step, MFU 0.0019%
    # (2666 FLOPs a step): the FLOPs are not what the step waits for (before: "up to -33%")
    ("amp-ddp-tiny-model", "amp",
     {"compute_share": 0.881, "mfu": 1.9e-5, "model_flops_per_step": 2666.0,
      "device": "cpu", "kind": "train"}, None),
    # the same step with the all-reduce left out of backward (facts.py: backward at most twice
    # the forward, 0.062 + 0.124 = 0.186) and an MFU that passes: under 0.2, nothing to read
    ("amp-ddp-communication-left-out", "amp",
     {"compute_share": 0.186, "communication_in_backward": True, "mfu": 0.05,
      "device": "cpu", "kind": "train"}, None),
    # torch.compile: step 1 took 167 s (compilation), 99% of forward+backward, and the result
    # keeps no per-phase times of it to take out (before: "up to -37%" from it)
    ("amp-compiled-first-step", "amp",
     {"compute_share": 0.99, "mfu": 0.3, "contraction_layers": 12, "transient_steps": [1],
      "transient_s": 167.0, "transients_unseparated": True, "device": "cpu"},
     (CANNOT, "step(s) 1 took 167 s")),
    # the same once the transient was taken out (facts.py): the steady steps' share, 0.5:
    # 0 .. 0.5 x 0.375 = 0.1875
    ("amp-compiled-steady-steps", "amp",
     {"compute_share": 0.5, "mfu": 0.3, "contraction_layers": 12, "transient_steps": [1],
      "transient_s": 167.0, "device": "cpu"}, (0.0, 0.1875, "amp")),
    # 30 layers, median 20 µs, non-contraction share 0.4, s = 1..2: 0 .. 0.2
    ("compile-small-layers", "compile", {"layers": 30, "median_layer_s": 20e-6,
                                         "elementwise_share": 0.4}, (0.0, 0.2, "compile")),
    ("compile-few-layers", "compile", {"layers": 10, "elementwise_share": 0.4}, None),
    ("compile-large-layers", "compile", {"layers": 30, "median_layer_s": 1e-3,
                                         "elementwise_share": 0.4}, None),
    # 2 threads, 2 CPUs, 4 kept busy: 1 idle CPU; p10 8 ms, median 10 ms over 30 steps, the
    # model's ops 0.9 of the step: high = 0.9 x (1 - 0.8) = 0.18
    ("threads-oversubscribed", "threads",
     {"oversubscribed": True, "threads": 2, "cpus_available": 2, "busy_cpus": 4,
      "step_p10_s": 0.008, "step_median_s": 0.010, "step_samples": 30, "parallel_share": 0.9,
      "device": "cpu"}, (0.0, 0.18, 1)),
    # load 22 on 2 CPUs: the fastest tenth 1 ms, the median 200 ms; the model's ops 0.6 of
    # the step: 0.6 x (1 - 0.005) = 0.597, never the whole step (before: 1 - 0.005 = 0.995,
    # "threads=1 predicted up to -100%")
    ("threads-high-load", "threads",
     {"oversubscribed": True, "threads": 2, "cpus_available": 2, "busy_cpus": 21,
      "step_p10_s": 0.001, "step_median_s": 0.2, "step_samples": 30, "parallel_share": 0.6,
      "device": "cpu"}, (0.0, 0.597, 1)),
    # 3 timed runs: their p10 is their fastest, a quiet moment of the machine
    ("threads-three-runs", "threads",
     {"oversubscribed": True, "threads": 2, "cpus_available": 2, "busy_cpus": 4,
      "step_p10_s": 0.073, "step_median_s": 0.111, "step_samples": 3, "parallel_share": 1.0,
      "device": "cpu"}, (CANNOT, "3 timed step(s) or run(s), fewer than 10")),
    ("threads-not-oversubscribed", "threads",
     {"oversubscribed": False, "threads": 2, "cpus_available": 2, "step_p10_s": 0.008,
      "step_median_s": 0.010}, None),
    ("threads-one-thread", "threads",
     {"oversubscribed": True, "threads": 1, "cpus_available": 2, "busy_cpus": 4,
      "step_p10_s": 0.008, "step_median_s": 0.010}, None),
    # launch-bound share 0.6 on CUDA: 0 .. 0.6 / 2
    ("batch-size-launch-bound", "batch-size",
     {"device": "cuda", "launch_bound_share": 0.6, "batch_size": 8, "subject": "m"},
     (0.0, 0.3, None)),
    ("batch-size-cpu", "batch-size", {"device": "cpu", "launch_bound_share": 0.6}, None),
    # a CUDA training step at MFU 4%: forward+backward 0.8 bounds it: 0 .. 0.4
    ("batch-size-low-mfu", "batch-size",
     {"device": "cuda", "mfu": 0.04, "compute_share": 0.8, "batch_size": 64, "subject": "r"},
     (0.0, 0.4, None)),
    ("batch-size-high-mfu", "batch-size",
     {"device": "cuda", "mfu": 0.4, "compute_share": 0.8, "batch_size": 64}, None),
    # exposed 0.36: 0 .. 0.36 x 3/4 = 0.27
    ("bucket-size-exposed", "bucket-size",
     {"exposed_share": 0.36, "buckets": 1, "bytes_per_step": 2**20, "world_size": 2,
      "subject": "r"}, (0.0, 0.27, None)),
    ("bucket-size-hidden", "bucket-size", {"exposed_share": 0.02, "buckets": 4}, None),
    # peak 90% of memory; o = 0.2, f = 0.3: 0.1 - 0.3 = -0.2 .. 0.1 - 0.1 = 0.0
    ("recompute-memory-full", "recompute",
     {"peak_cuda_bytes": 90, "gpu_memory_bytes": 100, "forward_share": 0.3,
      "fixed_share": 0.2}, (-0.2, 0.0, None)),
    ("recompute-memory-free", "recompute",
     {"peak_cuda_bytes": 50, "gpu_memory_bytes": 100, "forward_share": 0.3}, None),
]


@pytest.mark.parametrize("rule,facts,expected", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_rule_on_hand_made_facts(rule, facts, expected):
    found = BY_NAME[rule].apply(facts)
    if expected is None:
        assert found is None
        return
    if expected[0] == CANNOT:  # it says why, with the facts it read
        assert isinstance(found, CannotJudge), found
        assert expected[1] in found.reason
        assert found.facts and set(found.facts) <= set(BY_NAME[rule].read())
        return
    low, high, test = expected
    assert isinstance(found, Finding), found
    # the facts it read, every one the case holds, are named in its finding
    read = set(BY_NAME[rule].read())
    assert {k for k in facts if k in read} <= set(found.facts), found.facts
    assert found.low == pytest.approx(low, abs=1e-6)
    assert found.high == pytest.approx(high, abs=1e-6)
    assert found.low <= found.high
    if isinstance(test, int):
        assert found.threads == test
    else:
        assert found.variant == test
    # the arithmetic is written with the numbers in it, ending on the range
    assert f"{high:.3f}" in found.derivation
    assert found.cause and found.change


def test_every_rule_module_is_registered_once():
    modules = {m.name for m in pkgutil.iter_modules(rules.__path__)}
    declared = {importlib.import_module(f"layerscope.advice.rules.{m}").RULE.name
                for m in modules}
    assert declared == set(BY_NAME) and len(RULES) == len(modules)
    for rule in RULES:  # every rule has a test above, both ways
        assert {c[1] for c in CASES if c[1] == rule.name and c[3] is None}
        assert {c[1] for c in CASES if c[1] == rule.name and c[3] is not None}


def test_train_facts_shares_sum_to_one_and_count_the_recipe_layers():
    d = json.loads((DATA / "train_0.4.json").read_text())
    facts = facts_of(d)
    assert sum(facts["shares"].values()) == pytest.approx(1.0, abs=1e-3)
    seconds = d["breakdown"]["seconds"]
    assert facts["data_share"] == pytest.approx(seconds["data"] / sum(seconds.values()))
    assert facts["conv_layers"] == 2 and facts["layers"] >= facts["conv_layers"]
    assert facts["workers"] == 0 and facts["recipe"] == "digits-cnn"
    assert "mfu" not in facts
    # a result that carries an efficiency section (MFU): the batch-size rule may read it
    assert facts_of({**d, "efficiency": {"mfu": 0.04}})["mfu"] == 0.04


def _loader(training: bool, batches: int, workers: int = 0) -> dict:
    """A LoaderStats record as run and train write it (the figures advise reads)."""
    return {"dataset": "MNIST", "collate": "default_collate", "training": training,
            "num_workers": workers, "persistent_workers": False, "pin_memory": False,
            "epochs": 1, "batches": batches, "wait_s": 0.5, "first_wait_s": 0.01,
            "span_s": 1.0, "fetch_s": 0.5, "collate_s": 0.0, "cpu_s": 0.05}


VERDICT = [{"kind": "io_bound", "message": "...", "knob": "num_workers", "value": 8},
           {"kind": "worker_startup", "message": "...", "knob": "persistent_workers",
            "value": True}]


def test_train_facts_read_the_data_loaders_verdict():
    # the data_loading section run/train write: its first finding is the verdict on the
    # training loaders; a test loader beside them is not one of them
    d = json.loads((DATA / "train_0.4.json").read_text())
    loading = {"loaders": [_loader(True, 40), _loader(False, 10, workers=2)],
               "findings": VERDICT}
    facts = facts_of({**d, "data_loading": loading})
    assert facts["data_verdict"] == "io_bound" and facts["data_suggested_workers"] == 8
    assert (facts["training_loaders"], facts["loader_batches"]) == (1, 40)
    assert "data_verdict" not in facts_of(d)
    # a recipe's result that predates the section: its one loader fed every measured step
    assert (facts_of(d)["training_loaders"], facts_of(d)["loader_batches"]) == (1, 3)


def test_a_validation_loader_is_not_a_training_loader():
    # a script's run whose only loader measured gave its batches with gradients off (a
    # validation loop): its verdict and settings are not the training step's, and the workers
    # rule cannot judge (before: the loader was taken for the training one, workers=4)
    script = {"name": "s.py", "argv": [], "path": "s.py", "cwd": "/x"}
    d = {"kind": "train", "recipe": "s.py", "config": {"device": "cpu"}, "script": script,
         "breakdown": {"seconds": {"data": 0.5, "forward": 0.3, "backward": 0.2}, "steps": 40},
         "step_seconds": [0.025] * 40, "environment": {"cores": 2},
         "data_loading": {"loaders": [_loader(False, 40, workers=2)], "findings": VERDICT}}
    facts = facts_of(d)
    assert facts["training_loaders"] == 0
    assert "data_verdict" not in facts and "loader_batches" not in facts
    assert facts["workers"] == 0  # the validation loader's 2 workers are not the step's
    report = advise_result(d)
    assert "workers" not in [a.rule for a in report.advice]
    assert any(n.startswith("workers: cannot judge: no data loader fed the training steps")
               for n in report.notes), report.notes


# one compiling step (10 s: data 0, forward 6.0, backward 3.9, optimizer 0.05, other 0.05)
# and 9 steady ones of 0.1 s (data 0.05, forward 0.02, backward 0.02, optimizer 0.005,
# other 0.005)
FIRST = {"data": 0.0, "forward": 6.0, "backward": 3.9, "optimizer": 0.05, "other": 0.05}
STEADY = {"data": 0.05, "forward": 0.02, "backward": 0.02, "optimizer": 0.005, "other": 0.005}


def _compiled_run(n: int, kept: int, transient_at: int) -> dict:
    """A watched script's run of ``n`` steps, step ``transient_at`` (0-based) compiling; its
    step_phases keep ``kept`` evenly spaced steps (sample j is step j x n // kept)."""
    rows = [FIRST if i == transient_at else STEADY for i in range(n)]
    samples = [rows[j * n // kept] for j in range(kept)]
    return {"kind": "train", "recipe": "c.py", "config": {"device": "cpu"},
            "script": {"name": "c.py", "argv": []}, "efficiency": {"mfu": 0.3},
            "breakdown": {"seconds": {p: sum(r[p] for r in rows) for p in STEADY}, "steps": n},
            "step_seconds": [sum(r.values()) for r in rows],
            "step_phases": {p: [r[p] for r in samples] for p in STEADY},
            "environment": {"cores": 2}}


def test_a_compilation_step_is_taken_out_of_the_shares():
    # 10.0 s > 5 x the lower median step 0.1 s: step 1 is a transient; the steady 9 steps:
    # data 0.45 of 0.9 s = 0.5, forward+backward 0.36 / 0.9 = 0.4 (with step 1:
    # (6.18 + 4.08) / 10.9 = 0.941, what AMP read before)
    facts = facts_of(_compiled_run(10, 10, 0))
    assert facts["transient_steps"] == [1] and facts["transient_s"] == pytest.approx(10.0)
    assert "transients_unseparated" not in facts
    assert facts["data_share"] == pytest.approx(0.5)
    assert facts["compute_share"] == pytest.approx(0.4)
    # AMP on the steady share: 0 .. 0.4 x 0.375 = 0.15
    amp = next(a for a in advise_result(_compiled_run(10, 10, 0)).advice if a.rule == "amp")
    assert amp.predicted_gain.high == pytest.approx(0.15)
    assert amp.facts["transient_steps"] == [1]
    # 300 steps, 100 kept (steps 1, 4, 7, ...): the first step is always kept
    assert facts_of(_compiled_run(300, 100, 0))["compute_share"] == pytest.approx(0.4)


def test_a_transient_the_result_kept_no_phases_of_makes_amp_say_it_cannot_judge():
    # the last of 300 steps takes 10 s (a profiler's stop, say), and step_phases kept steps
    # 1, 4, 7, ..., 298: it cannot be taken out of the shares
    d = _compiled_run(300, 100, 299)
    facts = facts_of(d)
    assert facts["transient_steps"] == [300] and facts["transients_unseparated"] is True
    report = advise_result(d)
    assert "amp" not in [a.rule for a in report.advice]
    assert any(n.startswith("amp: cannot judge: step(s) 300 took 10 s") for n in report.notes)


@pytest.mark.parametrize("steps,expected", [
    ([10, 1, 1, 1, 8, 1, 1, 9], [0, 7]),  # the first and the last; the slow 5th stays
    ([10, 10, 1, 1, 1, 1], [0, 1]),  # two compiling steps
    ([10, 1], [0]),  # of two steps, the lower median is the shorter
    ([1, 4, 1, 1], []),  # 4 is not over 5 x 1
    ([5, 5, 5], []),
], ids=["first-and-last", "two-first", "two-steps", "under-5x", "even"])
def test_transient_steps_are_those_at_the_edges_far_above_the_median(steps, expected):
    from layerscope.advice.facts import transients

    assert transients(steps) == expected


def test_a_data_parallel_scripts_backward_is_not_read_as_compute():
    # a watched script in a process group of 2: backward holds the untimed all-reduce. data
    # 0.1, forward 0.1, backward 0.7, optimizer 0.05, other 0.05 of 1 s: backward's compute
    # at most 2 x forward: forward+backward = 0.1 + 0.2 = 0.3 (before: 0.8); the model's ops
    # 0.1 + 0.2 + 0.05 = 0.35
    d = {"kind": "train", "recipe": "ddp.py", "config": {"device": "cpu"},
         "script": {"name": "ddp.py", "argv": []}, "world_size": 2,
         "process_group": {"rank": 0, "world_size": 2, "backend": "gloo"},
         "breakdown": {"seconds": {"data": 0.1, "forward": 0.1, "backward": 0.7,
                                   "optimizer": 0.05, "other": 0.05}, "steps": 10},
         "step_seconds": [0.1] * 10, "environment": {"cores": 2}}
    facts = facts_of(d)
    assert facts["communication_in_backward"] is True
    assert facts["compute_share"] == pytest.approx(0.3)
    assert facts["parallel_share"] == pytest.approx(0.35)
    # a recipe's data-parallel run times its exposed communication apart: backward as it is
    recipe = {**d, "script": None, "process_group": None, "breakdown": {"seconds": {
        "forward": 0.1, "backward": 0.5, "exposed_communication": 0.2, "other": 0.2}}}
    assert "communication_in_backward" not in facts_of(recipe)
    assert facts_of(recipe)["compute_share"] == pytest.approx(0.6)


def _profile_with_runs(n: int) -> dict:
    d = json.loads((DATA / "profile_0.4.json").read_text())
    d["end_to_end"] = {**d["end_to_end"], "n": n}
    return d


def test_profile_facts_read_type_shares_and_noise():
    d = json.loads((DATA / "profile_0.4.json").read_text())
    facts = facts_of(d)
    rows = [r for r in d["layers"] if r.get("share") is not None]
    assert facts["layers"] == len(rows)
    assert facts["conv_share"] == pytest.approx(sum(r["share"] for r in rows
                                                    if r["type"].startswith("Conv")))
    assert facts["oversubscribed"] is True  # the saved noise section says so
    # the contractions' share of the counted FLOPs: 2 x MACs / FLOPs
    totals = d["totals"]
    assert facts["contraction_flop_share"] == pytest.approx(2 * totals["macs"] / totals["flops"])
    assert facts["parallel_share"] == pytest.approx(d["coverage"])
    # 2 threads, 2 CPUs with 4 busy, but 3 timed runs: their p10 is their fastest
    report = advise_result(read_result(str(DATA / "profile_0.4.json")), "p.json")
    assert "threads" not in [a.rule for a in report.advice]
    assert any(n.startswith("threads: cannot judge: 3 timed step(s) or run(s)")
               for n in report.notes), report.notes
    # with 30 runs the threads rule fires: f x (1 - p10/median), f the layers' coverage
    report = advise_result(load_result(_profile_with_runs(30)), "p.json")
    threads = next(a for a in report.advice if a.rule == "threads")
    end = d["end_to_end"]
    assert threads.predicted_gain.high == pytest.approx(
        round(d["coverage"] * (1 - end["p10_s"] / end["median_s"]), 4))
    # the setting the profile ran with first: the sweep's speed-up is against it
    assert threads.threads == 1
    assert threads.command == "layerscope sweep mnist-cnn --threads 2,1 --batch-sizes 1 --runs 20"


def test_an_onnx_profile_names_its_threads_in_words():
    # onnxruntime profiles record threads as "onnxruntime default": no count, so the noise
    # section's count stands (the threads rule then compares numbers, never a text)
    d = json.loads((DATA / "profile_0.4.json").read_text())
    d["settings"] = {**d["settings"], "threads": "onnxruntime default", "backend": "onnxruntime"}
    facts = facts_of(d)
    assert facts["threads"] == d["noise"]["threads"]
    report = advise_result(load_result(d), "p.json")
    assert [a.rule for a in report.advice]  # the rules ran over it


def test_scaling_result_gets_the_bucket_rule():
    report = advise_result(read_result(str(DATA / "scaling_0.4.json")), "s.json")
    bucket = next(a for a in report.advice if a.rule == "bucket-size")
    assert bucket.predicted_gain.high == pytest.approx(
        round(0.36427925368215297 * 0.75, 4))
    assert bucket.verdict == "not-run"


@pytest.mark.parametrize("name,content,words", [
    ("notes.txt", "not json at all", "not JSON"),
    ("analyze.json", None, "advise reads"),
], ids=["not-a-result", "kind-advise-cannot-read"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, name, content, words):
    path = tmp_path / name
    if content is None:
        path.write_text((DATA / "analyze_0.4.json").read_text())
    else:
        path.write_text(content)
    code, out, err = run_cli("advise", str(path))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and words in err


def test_verify_needs_a_recipe_or_a_model(tmp_path):
    code, out, err = run_cli("advise", str(DATA / "scaling_0.4.json"), "--verify")
    assert code == 2 and "--verify" in err and len(err.strip().splitlines()) == 1


@pytest.mark.integration
def test_verify_on_a_profile_runs_the_sweep_it_names(tmp_path):
    out, profile = tmp_path / "advice.json", tmp_path / "profile.json"
    profile.write_text(json.dumps(_profile_with_runs(30)))
    code, _, err = run_cli("advise", str(profile), "--verify", "--steps", "2",
                           "--format", "json", "-o", str(out))
    assert code == 0, err
    d = json.loads(out.read_text())
    item = next(a for a in d["advice"] if a["rule"] == "threads")
    assert item["command"].endswith("--threads 2,1 --batch-sizes 1 --runs 2")
    assert item["verdict"] in VERDICTS and item["verdict"] != "not-run", item
    # the measured gain is the sweep's speed-up of its second cell: 1 - 1/speedup
    speedup = d["verify"]["speedups"]["threads"]
    assert item["measured_gain"] == pytest.approx(1 - 1 / speedup, abs=1e-4)


# a profile of a model given by name: the rules sweep has an axis for are tested by that sweep
# (its second cell against the first, at the profile's threads and batch size)
PROFILE_SWEEPS = [
    ("amp", {"matmul_share": 0.6, "dtype": "float32"},
     "layerscope sweep mnist-cnn --dtypes float32,bfloat16 --threads 2 --batch-sizes 1 "
     "--runs 20"),
    ("compile", {"layers": 40, "median_layer_s": 1e-5, "compute_share": 0.9},
     "layerscope sweep mnist-cnn --backends eager,compile --threads 2 --batch-sizes 1 "
     "--runs 20"),
]


@pytest.mark.parametrize("rule,extra,command", PROFILE_SWEEPS, ids=[p[0] for p in PROFILE_SWEEPS])
def test_a_profiles_rule_is_tested_by_the_sweep_axis_it_names(rule, extra, command,
                                                              monkeypatch):
    import layerscope.advice as advice

    d = json.loads((DATA / "profile_0.4.json").read_text())
    facts = {**facts_of(d), **extra}
    monkeypatch.setattr(advice, "facts_of", lambda _d: dict(facts))
    report = advise_result(d, "p.json")
    item = next(a for a in report.advice if a.rule == rule)
    assert item.command == command


def test_the_heading_names_what_verified_the_advice():
    from layerscope.views.advice import heading

    report = advise_result(read_result(str(DATA / "profile_0.4.json")), "p.json")
    assert "predicted (not verified" in heading(report)[1]
    report.verify = {"runs": 5, "speedups": {}}
    assert heading(report)[1].endswith("verified: sweep, 5 runs per cell")
    report.verify = {"steps": 20, "repeats": 1, "seed": 0, "warmup_steps": 5}
    assert heading(report)[1].endswith("verified: ablate, 20 steps, seed 0")
    report.verify = {"steps": 12, "repeats": 1, "cwd": "/x", "speedups": {}}
    assert heading(report)[1].endswith("verified: layerscope run, 12 steps per run")


def test_the_threads_rule_says_why_a_gain_beat_its_bound():
    from layerscope.advice.rule import Outcome

    facts = {"threads": 2, "busy_cpus": 3, "cpus_available": 2}
    text = BY_NAME["threads"].why(Outcome(facts, 0.0, 0.285, 0.616, {}, {}, None, 1))
    assert "0.616 is above f x (1 - p10/median) = 0.285" in text
    assert "even those steps waited for a busy core; with 1 thread(s) none did" in text


# f = 0.621 (the contractions' share), predicted 0 .. 0.233 (s = 1 .. 1.6)
AMP_WHY = [
    # 0.483 < f: s = 1 / (1 - 0.483 / 0.621) = 4.50, above the range
    ("above-range", 0.483, ["ran 4.50x faster", "above the assumed speed-up range",
                            "roofline --dtype bfloat16"]),
    # 0.7 >= f: more than the whole share
    ("above-share", 0.7, ["above the contractions' whole share f = 0.621", "halves the bytes"]),
    # -0.1: slower; Amdahl's fallback names the assumption
    ("slower", -0.1, ["Amdahl"]),
]


@pytest.mark.parametrize("gain,words", [a[1:] for a in AMP_WHY], ids=[a[0] for a in AMP_WHY])
def test_the_amp_rule_says_why_a_gain_left_its_range(gain, words):
    from layerscope.advice.rule import Outcome

    text = BY_NAME["amp"].why(Outcome({"matmul_share": 0.621}, 0.0, 0.233, gain, {}, {},
                                      "amp"))
    for w in words:
        assert w in text, text


def test_amp_on_a_profile_is_the_model_in_bfloat16():
    # inference casts the model (what sweep --dtypes measures), a training step autocasts
    d = json.loads((DATA / "profile_0.4.json").read_text())
    facts = {**facts_of(d), "matmul_share": 0.6, "dtype": "float32"}
    found = BY_NAME["amp"].check(facts)
    assert found.change == "run the model and its inputs in bfloat16 (model.to(torch.bfloat16))"
    train = {**facts, "kind": "train"}
    assert BY_NAME["amp"].check(train).change == "run them in bfloat16 autocast (train --amp)"


@pytest.mark.integration
def test_verify_runs_the_ablation_and_marks_each_rule(tmp_path):
    out = tmp_path / "advice.json"
    code, _, err = run_cli("advise", str(DATA / "train_0.4.json"), "--verify", "--steps", "2",
                           "--quiet", "--format", "json", "-o", str(out))
    assert code == 0, err
    d = json.loads(out.read_text())
    assert d["kind"] == "advice" and d["advice"]
    speedups = d["verify"]["speedups"]
    for item in d["advice"]:
        assert item["verdict"] in VERDICTS
        assert item["predicted_gain"]["low"] <= item["predicted_gain"]["high"]
        assert "--steps 2" in item["command"] and "--seed 0" in item["command"]
        if item["verdict"] == "unverifiable":  # the baseline did not reproduce the result
            assert item.get("measured_gain") is None and not d["verify"]["baseline_reproduced"]
            assert "unverifiable on this machine now" in item["verify_note"]
        elif item.get("variant") and item["verdict"] != "not-run":
            # the measured gain is the ablation's speed-up: 1 - 1/speedup
            gain = item["measured_gain"]
            assert isinstance(gain, float)
            assert gain == pytest.approx(1 - 1 / speedups[item["variant"]], abs=1e-4)
            assert (item["verdict"] == "confirmed") == (
                item["verdict"] != "within-noise" and gain > 0)
    assert read_result(str(out)).kind == "advice"


def test_the_api_takes_a_path_and_names_its_own_arguments():
    import layerscope
    from layerscope.core.errors import UserError

    report = layerscope.advise(DATA / "train_0.4.json")
    assert report.kind == "advice" and report.source_kind == "train"
    assert [a.verdict for a in report.advice] == ["not-run"] * len(report.advice)
    with pytest.raises(UserError, match="verify runs ablate") as caught:
        layerscope.advise(str(DATA / "scaling_0.4.json"), verify=True)
    assert "--verify" not in str(caught.value)


def test_the_docs_rule_table_names_every_fact_each_rule_reads():
    # docs/advise.md's table: one row per rule, its facts in backticks, its judged
    # preconditions marked; declared once in the rule, checked here
    text = (Path(__file__).parents[1] / "docs" / "advise.md").read_text()
    rows = {line.split("|")[1].strip().strip("`"): line for line in text.splitlines()
            if line.startswith("| `")}
    assert set(rows) == set(BY_NAME)
    for rule in RULES:
        cells = rows[rule.name].split(" | ")
        assert set(re.findall(r"`([a-z0-9_]+)`", cells[2])) >= set(rule.read()), rule.name
        judged = sum(n.judge for n in rule.needs)
        assert cells[1].count("**(cannot judge)**") == judged, rule.name
