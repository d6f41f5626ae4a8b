"""A watched run's figures say what they are of: the model is the module that owns the stepping
optimizer's parameters (or there is no MFU, with the reason); every optimizer's steps are
counted, however they interleave; one-time costs (compilation, the profiler's start and stop) are
kept out of the measured steps and named; and the smaller statements (samples not seen, the step
an out-of-memory error fell in, why MFU is missing) hold their cause.

Verdicts are fed injected facts (a compile clock, a profiler that "takes" 100 s on a shifted
clock, per-step seconds); end-to-end checks assert only counts and invariants no load can flip.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch
import torch.nn as nn

import layerscope
from layerscope.renderers import render
from layerscope.training import watch as watch_mod
from layerscope.training.inference_loop import uncovered_cause
from layerscope.training.phases import transient_steps
from layerscope.views.lead import headline
from layerscope.views.training import train_tables

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _sums(b: dict) -> None:
    assert sum(b["seconds"].values()) == pytest.approx(b["wall_s"], rel=1e-9)


def _note(report, start: str) -> str:
    found = [n for n in report.notes if n.startswith(start)]
    assert len(found) == 1, report.notes
    return found[0]


# ---- the model owns the optimizer's parameters -------------------------------------------
class FFLayer(nn.Linear):
    """pytorch/examples mnist_forward_forward's Layer: trains itself with its own Adam, calling
    ``self.forward(x)`` directly (no module call: only its ReLU is one)."""

    def __init__(self, n_in: int, n_out: int, epochs: int):
        super().__init__(n_in, n_out)
        self.relu = nn.ReLU()
        self.opt = torch.optim.Adam(self.parameters(), lr=0.03)
        self.epochs = epochs

    def forward(self, x):
        x = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(torch.mm(x, self.weight.T) + self.bias.unsqueeze(0))

    def train(self, x_pos, x_neg):  # the example overrides Module.train
        for _ in range(self.epochs):
            g_pos = self.forward(x_pos).pow(2).mean(1)
            g_neg = self.forward(x_neg).pow(2).mean(1)
            loss = torch.log(1 + torch.exp(torch.cat([-g_pos + 2.0, g_neg - 2.0]))).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


def _forward_forward(epochs: int = 3):
    torch.manual_seed(0)
    layers = [FFLayer(12, 16, epochs), FFLayer(16, 16, epochs)]  # a plain list, as there
    x_pos, x_neg = torch.randn(8, 12), torch.randn(8, 12)
    with layerscope.watch(layers=True) as w:
        h_pos, h_neg = x_pos, x_neg
        for layer in layers:  # layer 0's Adam steps `epochs` times, then layer 1's
            h_pos, h_neg = layer.train(h_pos, h_neg)
    return w


def test_self_forward_gives_no_mfu_and_says_where_the_forward_went():
    """Only the layers' ReLUs are module calls: before, the ReLU was "the model" (MFU of a
    ReLU, ~500x too low, no note). Now: no MFU, and the note names the module that owns the
    optimizer's parameters and where its forward's time is."""
    w = _forward_forward()
    r = w.report()
    assert r.efficiency is None
    note = _note(r, "MFU not given: ")
    assert "the modules called (ReLU) hold none of the parameters the optimizer steps" in note
    assert "they belong to FFLayer (208 parameters)" in note  # 12 x 16 + 16
    assert "self.forward(x)" in note and "that time is in Other, " in note
    # the headline gives that reason, not "saved by an earlier release"
    assert "MFU not given: the modules called (ReLU) hold none" in headline(r)
    # the batch is the first tensor argument of layer 0's ReLU (the first module called):
    # layer 1's steps took none but its first, where layer 0 ran on the batch once more
    _note(r, "2 of 6 measured steps took no batch")


@pytest.mark.parametrize("first", [nn.Dropout(0.0), nn.Identity()], ids=["dropout", "identity"])
def test_the_model_is_the_module_holding_the_parameters_not_the_first_called(first):
    """A module without parameters called outermost before the model (a preprocessing step)
    was taken for the model. Invariant: the FLOPs counted are those of the same loop without
    it; a note says which module was chosen."""
    def run(pre):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 3))
        opt = torch.optim.SGD(model.parameters(), 0.1)
        x = torch.randn(4, 6)
        with layerscope.watch() as w:
            for _ in range(3):
                opt.zero_grad()
                model(pre(x) if pre is not None else x).pow(2).mean().backward()
                opt.step()
        return w.report()

    plain, with_pre = run(None), run(first)
    assert with_pre.efficiency is not None
    assert (with_pre.efficiency.model_flops_per_step
            == plain.efficiency.model_flops_per_step > 0)
    assert any(n.startswith("the model is Sequential, the module called that holds the "
                            f"parameters the optimizer steps; {type(first).__name__}, called "
                            "first") for n in with_pre.efficiency.notes)


def test_no_module_forward_says_so_instead_of_an_earlier_release():
    """A functional loop (no module: a polynomial fitted with plain tensors) had no MFU and no
    reason; the headline then blamed an earlier release."""
    torch.manual_seed(0)
    coef = torch.zeros(4, requires_grad=True)
    opt = torch.optim.SGD([coef], 0.01)
    x = torch.randn(32, 4)
    with layerscope.watch() as w:
        for _ in range(3):
            opt.zero_grad()
            (x @ coef - 1.0).pow(2).mean().backward()
            opt.step()
    r = w.report()
    assert r.efficiency is None
    note = _note(r, "MFU not given: no module's training forward was seen")
    assert "that time is in Other, " in note
    assert "earlier release" not in headline(r)
    assert "no module's training forward was seen" in headline(r)


def test_no_measured_step_says_so_instead_of_an_earlier_release():
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    with layerscope.watch(warmup_steps=5) as w:
        for _ in range(2):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
    assert "MFU not given: no step was measured" in headline(w.report())


# ---- every optimizer's steps are counted ---------------------------------------------------
def _stepped(pattern: str, steps: int | None = None):
    """Run the optimizer steps of ``pattern`` (one letter per optimizer step: A, B, ...), each
    after a forward and backward of that optimizer's own module."""
    torch.manual_seed(0)
    names = sorted(set(pattern))
    nets = {k: nn.Linear(3, 1) for k in names}
    opts = {k: torch.optim.Adam(nets[k].parameters()) for k in names}
    x = torch.randn(2, 3)
    with layerscope.watch(steps=steps) as w:
        for k in pattern:
            opts[k].zero_grad()
            nets[k](x).sum().backward()
            opts[k].step()
    return w


# (id, optimizer steps in order, expected steps as the optimizers in each)
GROUPINGS = [
    ("one-optimizer", "AAAA", ["A", "A", "A", "A"]),
    ("gan-interleaved", "DGDGDG", ["DG", "DG", "DG"]),
    ("one-after-another", "AAAABBBB", ["A"] * 4 + ["B"] * 4),
    ("three-one-after-another", "AABBCC", ["A", "A", "B", "B", "C", "C"]),
    ("back-to-the-first", "AAABBBAAA", ["A"] * 3 + ["B"] * 3 + ["A"] * 3),
    ("critic-twice", "DDGDDG", ["D", "D", "GD", "D", "G"]),
]


@pytest.mark.parametrize("pattern,expected", [c[1:] for c in GROUPINGS],
                         ids=[c[0] for c in GROUPINGS])
def test_every_optimizer_step_is_in_exactly_one_step(pattern, expected):
    """Before, optimizers that stepped one after another left the later ones' whole training
    in no step ("4 measured steps" for 8, "Adam #2 0.000 s"); interleaved ones stay one step
    per iteration."""
    w = _stepped(pattern)
    r = w.report()
    assert r.breakdown["steps"] == len(expected)
    _sums(r.breakdown)
    order = list(dict.fromkeys(pattern))
    got = ["".join(order[i - 1] for i in step) for step in w.step_optimizers]
    assert got == expected
    assert sorted("".join(got)) == sorted(pattern)  # every optimizer step counted once
    if len(order) > 1:
        note = _note(r, f"{len(order)} optimizers stepped")
        assert " 0.000 s" not in note and " 0 s" not in note
        seconds = [float(part.rsplit(" ", 2)[1]) for part in note.split("by optimizer: ")[-1]
                   .split(", ")]
        assert all(s > 0 for s in seconds)
        assert sum(seconds) == pytest.approx(r.breakdown["seconds"]["optimizer"], rel=0.01)


def test_one_after_another_says_how_steps_were_grouped():
    r = _stepped("AAABBB").report()
    note = _note(r, "2 optimizers stepped (Adam #1, Adam #2): they stepped one after another")
    assert "each optimizer step is a step (Adam #1: 3 steps; Adam #2: 3 steps)" in note


def test_step_limit_counts_the_later_optimizers_steps():
    """--steps 5 over AAAABBBB: stops inside B's second step (B's first is step 5)."""
    w = _stepped("AAAABBBB", steps=5)
    assert w.steps == 5 and w.report().breakdown["steps"] == 5
    assert sum(w._opt_counts) == 6  # B's second step ran: the limit stops the loop there


# ---- one-time costs: compilation and the profiler ----------------------------------------
# (id, compile seconds per step, forward+backward seconds per step, first measured index,
#  steps left out)
TRANSIENTS = [
    ("compile-step-1", [3.0, 0, 0, 0], [3.1, 0.1, 0.1, 0.1], 0, {0: "compile"}),
    ("recompile-step-3", [3.0, 0, 0.5, 0, 0], [3.1, 0.1, 0.6, 0.1, 0.1], 0,
     {0: "compile", 2: "compile"}),
    ("compile-in-warm-up-only", [3.0, 0, 0, 0], [3.1, 0.1, 0.1, 0.1], 1, {}),
    ("every-step-compiles", [1.0, 1.0, 1.0], [1.1, 1.1, 1.1], 0, {}),
    ("first-step-far-above", [0, 0, 0, 0], [12.0, 0.1, 0.1, 0.1], 0, {0: "first step"}),
    ("first-step-10x-but-under-1s-more", [0, 0, 0, 0], [0.5, 0.01, 0.01, 0.01], 0, {}),
    ("first-step-only-5x", [0, 0, 0, 0], [5.0, 1.0, 1.0, 1.0], 0, {}),
    ("too-few-others", [0, 0, 0], [12.0, 0.1, 0.1], 0, {}),
    ("after-the-warm-up", [0, 0, 0, 0, 0], [9.0, 12.0, 0.1, 0.1, 0.1], 1, {1: "first step"}),
]


@pytest.mark.parametrize("compile_s,compute_s,first,expected", [c[1:] for c in TRANSIENTS],
                         ids=[c[0] for c in TRANSIENTS])
def test_transient_steps_from_facts(compile_s, compute_s, first, expected):
    assert transient_steps(compile_s, compute_s, first) == expected


class FakeCompiler:
    """A compile clock the test moves: ``compile(s)`` adds s seconds of "compilation"."""

    def __init__(self) -> None:
        self.total = 0.0

    def __call__(self) -> float:
        return self.total


def _compiled_loop(compile_at: set[int], steps: int = 4):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), 0.1)
    x = torch.randn(4, 4)
    fake = FakeCompiler()
    with layerscope.watch(compile_clock=fake) as w:
        for i in range(steps):
            opt.zero_grad()
            out = model(x)
            if i in compile_at:  # as dynamo does inside the step's first call
                fake.total += 3.0
            out.pow(2).mean().backward()
            opt.step()
    return w


def test_a_compilation_step_is_left_out_and_shown_apart():
    """Before, step 1's compilation filled the phase table (forward+backward 99%) with no
    note. Now it is left out of the phases and MFU, and shown as its own row."""
    w = _compiled_loop({0})
    r = w.report()
    assert w.steps == 4 and r.breakdown["steps"] == 3 and w.measured_steps == [2, 3, 4]
    assert r.breakdown["wall_s"] == pytest.approx(sum(w._seconds[1:]), rel=1e-12)
    assert len(r.step_seconds) == 3 and len(r.efficiency.mfu_per_step) == 3
    assert [t.to_dict() for t in r.transients] == [
        {"kind": "compile", "step": 1, "seconds": w._seconds[0], "compile_s": 3.0}]
    _note(r, "one-time costs kept out of the measured steps (their phases, MFU and advice): "
             "compile ")
    phases, left_out = train_tables(r)[:2]
    assert phases.title == "Time per phase (1 one-time cost left out)"
    assert [[c.text for c in row] for row in left_out.rows] == [
        ["Compile step", f"{w._seconds[0]:.3f}", "step 1", "3.000"]]
    assert "Compile step" in render(r, "text", width=160)


def test_every_step_compiling_leaves_nothing_out():
    w = _compiled_loop({0, 1, 2, 3})
    r = w.report()
    assert r.breakdown["steps"] == 4 and not r.transients


def test_the_profilers_start_and_stop_are_in_no_step(monkeypatch):
    """run --kernels put the profiler's stop (its export) into the step after the window:
    Other 90%. Here the profiler's start "takes" 50 s and its stop 100 s on the watch's
    clock: neither is in any step; both are rows of their own."""
    from layerscope.analysis.kernels import BoundaryWindow

    shift = [0.0]
    real = BoundaryWindow.boundary

    def boundary(self, ended, model):
        was_open, done = self.window is not None, self.done
        real(self, ended, model)
        if self.window is not None and not was_open:
            shift[0] += 50.0
        elif self.done == self.steps and done < self.steps:
            shift[0] += 100.0

    monkeypatch.setattr(BoundaryWindow, "boundary", boundary)
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    x = torch.randn(2, 4)
    with layerscope.watch(kernels=True, clock=lambda: time.perf_counter() + shift[0]) as w:
        for _ in range(6):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
    r = w.report()
    assert r.breakdown["steps"] == 6
    assert max(r.step_seconds) < 50.0
    rows = [t.to_dict() for t in r.transients]
    assert [(t["kind"], t["step"]) for t in rows] == [("profiler start", 1),
                                                      ("profiler stop", 4)]
    assert rows[0]["seconds"] >= 50.0 and rows[1]["seconds"] >= 100.0
    assert "Profiler stop and export" in render(r, "text", width=160)


COMPILED = textwrap.dedent("""\
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    compiled = torch.compile(model, backend="eager")
    opt = torch.optim.SGD(model.parameters(), 0.1)
    x = torch.randn(4, 4)
    for step in range(4):
        opt.zero_grad()
        compiled(x).pow(2).mean().backward()
        opt.step()
    print("done")
    """)


@pytest.mark.integration
def test_run_of_a_compiled_model_reads_dynamos_counters(tmp_path):
    """A real torch.compile (the eager backend: dynamo only, fast): step 1 compiles, read from
    dynamo's own counters; the other steps are measured; the FLOPs are the wrapped model's."""
    script = tmp_path / "compiled.py"
    script.write_text(COMPILED)
    out = tmp_path / "r.json"
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-m", "layerscope", "run", "-o", str(out),
                          str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "done\n"
    d = json.loads(out.read_text())
    assert d["breakdown"]["steps"] == 3
    assert [(t["kind"], t["step"]) for t in d["transients"]] == [("compile", 1)]
    assert d["transients"][0]["compile_s"] > 0
    # forward FLOPs of the model itself, not 0 for torch.compile's wrapper: more than the
    # optimizer's 2 per parameter (SGD) alone
    params = 4 * 8 + 8 + 8 * 2 + 2
    assert d["efficiency"]["model_flops_per_step"] > 2 * params


# ---- smaller statements, at their cause --------------------------------------------------
class OOMOnFirstStep(torch.optim.SGD):
    def step(self, closure=None):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def test_out_of_memory_in_the_first_optimizer_step_is_step_1():
    """Before: "step 2", and "no optimizer.step() seen" (the backward had closed a
    provisional step)."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = OOMOnFirstStep(model.parameters(), 0.1)
    w = layerscope.watch()
    with pytest.raises(torch.OutOfMemoryError):
        with w:
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
    assert w.post_mortem is not None and w.post_mortem["step"] == 1
    r = w.report()
    assert r.breakdown["steps"] == 0
    assert not any("no optimizer.step() seen" in n for n in r.notes), r.notes
    _note(r, "no training step completed: the run ended inside the first step")


class KeywordModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, *, features):
        return self.fc(features)


def test_samples_not_seen_instead_of_zero_throughput():
    torch.manual_seed(0)
    model = KeywordModel()
    opt = torch.optim.SGD(model.parameters(), 0.1)
    with layerscope.watch() as w:
        for _ in range(3):
            opt.zero_grad()
            model(features=torch.randn(2, 4)).sum().backward()
            opt.step()
    r = w.report()
    assert r.breakdown["samples"] == 0 and r.breakdown["throughput_per_s"] is None
    _note(r, "samples not seen: ")
    text = render(r, "text", width=160)
    assert "samples not seen (no throughput)" in text
    assert "throughput 0.0" not in text and "0 samples" not in text


# ---- profile --loop: what the layers do not cover ----------------------------------------
# (id, forward CPU cores per wall second, load, cores, the cause named)
UNCOVERED = [
    ("cuda-or-old-result", None, 12.0, 2, "the model's own code between layers"),
    ("waiting-for-a-core", 0.4, 12.0, 2,
     "the model's own code between layers and waiting for a core: the forwards ran on the "
     "CPU 40% of their wall time, load 12.0 on 2 cores"),
    ("computing", 1.0, 0.5, 2,
     "the model's own code between layers (the forwards kept 1.00 cores busy: not waiting)"),
]


@pytest.mark.parametrize("cores,load,cpus,cause", [c[1:] for c in UNCOVERED],
                         ids=[c[0] for c in UNCOVERED])
def test_loop_coverage_rest_from_facts(cores, load, cpus, cause):
    assert uncovered_cause(cores, load, cpus) == cause


def test_dynamo_compile_seconds_without_dynamo_is_zero(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch._dynamo.utils", raising=False)
    assert watch_mod.dynamo_compile_seconds() == 0.0
