"""layerscope.watch(): the phase breakdown of any training loop through torch's global hooks.

Invariants only (no timing asserts): the step count, which phases saw time, phases summing to
the step wall time exactly, and nothing left installed afterwards.
"""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn
from torch.nn.modules import module as M
from torch.optim import optimizer as O
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data import dataloader as D

import layerscope
from layerscope.training.phases import ALWAYS
from layerscope.training.watch import Watch, active

SAMPLES, BATCH = 32, 8  # 4 batches an epoch


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 6 * 6, 3))


def _loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(SAMPLES, 1, 6, 6, generator=g),
                         torch.randint(0, 3, (SAMPLES,), generator=g))
    return DataLoader(data, batch_size=BATCH)


def plain(model, loader, epochs=2):
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
        with torch.no_grad():  # validation: not a training step
            for x, _ in loader:
                model(x)


def _closure_loop(opt, model, loader):
    for x, y in loader:
        def step(x=x, y=y):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            return loss
        opt.step(step)  # forward and backward run inside optimizer.step


def closure(model, loader, epochs=1):
    _closure_loop(torch.optim.SGD(model.parameters(), 0.01), model, loader)


def lbfgs(model, loader, epochs=1):
    _closure_loop(torch.optim.LBFGS(model.parameters(), max_iter=3), model, loader)


def accumulate(model, loader, epochs=1):
    opt = torch.optim.SGD(model.parameters(), 0.01)
    for i, (x, y) in enumerate(loader):  # two batches per optimizer step
        (nn.functional.cross_entropy(model(x), y) / 2).backward()
        if i % 2 == 1:
            opt.step()
            opt.zero_grad()


def manual(model, loader, epochs=1, watch=None):
    for x, y in loader:  # no torch.optim: the loop marks its steps
        model.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.01 * p.grad
        watch.mark_step()


def autograd_grad(model, loader, epochs=1):
    opt = torch.optim.SGD(model.parameters(), 0.01)
    for x, y in loader:  # torch.autograd.grad goes through the same engine entry
        loss = nn.functional.cross_entropy(model(x), y)
        grads = torch.autograd.grad(loss, list(model.parameters()))
        for p, g in zip(model.parameters(), grads):
            p.grad = g
        opt.step()


# (id, loop, steps expected, phases that must have seen time)
LOOPS = [
    ("plain-adam-2-epochs", plain, 2 * SAMPLES // BATCH,
     ("data", "forward", "loss", "backward", "optimizer")),
    # the closure's own code (zero_grad, a functional loss) is the trainer phase
    ("closure-sgd", closure, SAMPLES // BATCH,
     ("data", "forward", "backward", "optimizer", "trainer")),
    ("lbfgs", lbfgs, SAMPLES // BATCH, ("data", "forward", "backward", "optimizer", "trainer")),
    ("grad-accumulation-2", accumulate, SAMPLES // BATCH // 2,
     ("data", "forward", "backward", "optimizer")),
    ("mark-step-no-optimizer", manual, SAMPLES // BATCH, ("data", "forward", "backward")),
    ("autograd-grad", autograd_grad, SAMPLES // BATCH, ("data", "forward", "backward")),
]


def _installed() -> tuple:
    """Everything the watch touches, as identities and sizes."""
    return (len(M._global_forward_pre_hooks), len(M._global_forward_hooks),
            len(M._global_forward_hooks_always_called), len(O._global_optimizer_pre_hooks),
            len(O._global_optimizer_post_hooks), torch.autograd._engine_run_backward,
            D._BaseDataLoaderIter.__dict__.get("__next__"), D.DataLoader.__dict__.get("__iter__"),
            torch.Tensor.__dict__.get("to"),
            torch.Tensor.__dict__.get("cuda"), active())


@pytest.mark.parametrize("loop,steps,busy", [row[1:] for row in LOOPS],
                         ids=[row[0] for row in LOOPS])
def test_steps_and_phases(loop, steps, busy):
    model, loader = _net(), _loader()
    with layerscope.watch() as w:
        loop(model, loader, watch=w) if loop is manual else loop(model, loader)
    b = w.report().breakdown
    assert w.steps == b["steps"] == steps
    # CPU tensors only: no host-to-device copy, and no such phase in the report; trainer only
    # where spent
    assert set(b["seconds"]) == (set(ALWAYS) - {"h2d"}) | set(busy)
    # other = wall - the rest: the phases sum to the steps' wall time by construction
    assert sum(b["seconds"].values()) == pytest.approx(b["wall_s"], rel=1e-9)
    for phase in busy:
        assert b["seconds"][phase] > 0, phase
    assert b["samples"] == (SAMPLES * 2 if loop is plain else SAMPLES)


def test_each_step_sums_and_epochs_split_at_the_loader_end():
    with Watch() as w:
        plain(_net(), _loader())
    r = w.report()
    assert len(w.step_phases) == len(r.step_seconds) == 8
    for phases, wall in zip(w.step_phases, r.step_seconds):
        assert sum(phases.values()) == pytest.approx(wall, rel=1e-9)
    # two epochs of 4 steps: a new pass over the training loader starts an epoch (the
    # no-grad passes over the same loader in between do not)
    assert [e["steps"] for e in r.epoch_breakdown] == [4, 4]
    assert any("evaluation" in n for n in r.notes)  # the no-grad passes were left out


def test_the_report_keeps_each_phase_per_step():
    """step_phases: each phase's seconds in every measured step (what layerscope diff ranks),
    the watch's per-step phases transposed."""
    with Watch(warmup_steps=1) as w:
        plain(_net(), _loader())
    r = w.report()
    assert set(r.step_phases) == set(r.breakdown["seconds"])
    for phase, xs in r.step_phases.items():
        assert xs == [round(s.get(phase, 0.0), 9) for s in w.step_phases]
    assert len(r.to_dict()["step_phases"]["forward"]) == len(r.step_seconds) == 7


def test_warmup_steps_are_left_out():
    with Watch(warmup_steps=3) as w:
        plain(_net(), _loader())
    r = w.report()
    assert w.steps == 8 and r.breakdown["steps"] == 5 and len(r.step_seconds) == 5
    assert r.config["warmup_steps"] == 3


def test_restricted_to_the_given_model_and_optimizer():
    model, other = _net(), _net()
    opt = torch.optim.SGD(model.parameters(), 0.01)
    other_opt = torch.optim.SGD(other.parameters(), 0.01)
    x, y = torch.randn(4, 1, 6, 6), torch.tensor([0, 1, 2, 0])
    with Watch(model, opt) as w:
        for _ in range(3):
            nn.functional.cross_entropy(other(x), y).backward()
            other_opt.step()  # not the watched optimizer: no step boundary
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    assert w.steps == 3


@pytest.mark.parametrize("limit,on_stop", [(2, False), (3, True)], ids=["raises", "on-stop"])
def test_step_limit(limit, on_stop):
    stopped = []
    w = Watch(steps=limit, on_stop=stopped.append if on_stop else None)
    model, loader = _net(), _loader()
    if on_stop:
        with w:
            closure(model, loader)
        assert stopped == [w] * (SAMPLES // BATCH - limit + 1)  # every step from the limit on
    else:
        left_at_the_limit = True
        with w:  # StepLimit ends the block; its exit swallows it
            try:
                plain(model, loader)
            except Exception:  # the script's own handler cannot swallow the stop
                pytest.fail("StepLimit caught as an Exception")
            left_at_the_limit = False
        assert left_at_the_limit and w.steps == limit
    assert w.report().breakdown["steps"] >= limit


@pytest.mark.parametrize("fail", [None, ValueError, KeyboardInterrupt],
                         ids=["clean", "exception", "keyboard-interrupt"])
def test_nothing_stays_installed(fail):
    before = _installed()
    model = _net()
    params = {k: v.clone() for k, v in model.state_dict().items()}
    w = Watch(model, layers=True, memory=True)
    with pytest.raises(fail) if fail else _nullcontext():
        with w:
            x = torch.randn(2, 1, 6, 6)
            model(x).sum().backward()
            if fail:
                raise fail("in the loop")
    assert _installed() == before
    # the user's model: same values, no hooks of ours, still runs
    assert all(torch.equal(params[k], v) for k, v in model.state_dict().items())
    assert all(not m._forward_hooks and not m._forward_pre_hooks and not m._backward_hooks
               for m in model.modules())
    assert model(torch.randn(1, 1, 6, 6)).shape == (1, 3)


def test_one_watch_at_a_time():
    with Watch():
        with pytest.raises(RuntimeError, match="already measuring"):
            Watch().start()
    with Watch():  # the first one's stop freed the hooks
        pass


def test_layers_and_memory():
    model = _net()
    with Watch(model, layers=True, memory=True) as w:
        plain(model, _loader(), epochs=1)
    r = w.report()
    names = {row["name"]: row for row in r.layers}
    # the given model names its modules: the root by its class, children by their path
    assert {"Sequential", "0", "1", "2", "3"} <= set(names)
    assert names["0"]["calls"] == 4  # four training batches; the no-grad ones are evaluation
    assert names["Sequential"]["forward_s"] >= names["0"]["forward_s"]  # inclusive times
    # each measured step's forward seconds (what diff ranks): they add up to the total
    assert all(len(row["forward_samples_s"]) == len(r.step_seconds) == 4 for row in r.layers)
    for row in r.layers:
        assert sum(row["forward_samples_s"]) == pytest.approx(row["forward_s"], abs=1e-8)
    assert {"data", "forward", "backward", "optimizer"} <= set(r.phase_memory)
    assert all(m["peak_rss_bytes"] > 0 for m in r.phase_memory.values())


def test_report_is_a_train_report_that_renders_again():
    from layerscope.core.results import load_result
    from layerscope.renderers import render

    for layers in (False, True):
        with Watch(name="mine.py", argv=["--epochs", "2"], layers=layers, memory=layers) as w:
            plain(_net(), _loader(), epochs=1)
        r = w.report()
        assert r.kind == "train" and r.script == {"name": "mine.py", "argv": ["--epochs", "2"]}
        d = json.loads(json.dumps(r.to_dict()))
        assert {"breakdown", "step_seconds", "epoch_breakdown"} <= set(d)
        assert "rank" not in d and ("layers" in d) is layers  # omitted while None
        again = load_result(d)  # validated against the schema
        text = render(again, "table", width=160)
        assert "mine.py --epochs 2 — training" in text and "Forward" in text
        assert ("Time per layer" in text) is layers and ("Peak memory" in text) is layers
        assert "mine.py --epochs 2" in render(again, "html")
        assert render(again, "csv")


def test_chrome_trace_has_every_step():
    with Watch(trace=True) as w:
        plain(_net(), _loader(), epochs=1)
    events = w.chrome_trace()["traceEvents"]
    steps = [e for e in events if e.get("tid") == 0 and e["ph"] == "X"]
    phases = {e["name"] for e in events if e.get("tid") == 1 and e["ph"] == "X"}
    assert len(steps) == 4
    assert {"data", "forward", "backward", "optimizer"} <= phases


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# (id, Tensor.to arguments, whether they name a device other than the CPU)
TO_ARGS = [
    ("dtype", ((torch.float16,), {}), False),
    ("cpu-string", (("cpu",), {}), False),
    ("cuda-string", (("cuda:0",), {}), True),
    ("device-kw", ((), {"device": torch.device("cuda")}), True),
    ("index", ((0,), {}), True),
    ("cpu-tensor", ((torch.zeros(1),), {}), False),
    ("nothing", ((), {"non_blocking": True}), False),
]


@pytest.mark.parametrize("args,kwargs,moves", [r[1] + (r[2],) for r in TO_ARGS],
                         ids=[r[0] for r in TO_ARGS])
def test_which_to_calls_are_host_to_device_copies(args, kwargs, moves):
    from layerscope.training.watch import _to_device

    assert _to_device(args, kwargs) is moves


def test_copies_are_wrapped_only_where_cuda_is_and_restored(monkeypatch):
    before = _installed()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    model = _net()
    opt = torch.optim.SGD(model.parameters(), 0.01)
    with Watch() as w:
        assert "to" in torch.Tensor.__dict__ and "cuda" in torch.Tensor.__dict__
        for _ in range(2):
            x = torch.randn(2, 1, 6, 6).to(torch.float32)  # a cast, not a copy
            model(x).sum().backward()
            opt.step()
    assert w.steps == 2 and w.totals.seconds["h2d"] == 0.0
    assert _installed() == before


def test_mark_step_inside_nested_phases_counts_each_second_once():
    # a step ended from inside a forward that runs inside optimizer.step (a closure): the open
    # phases are split at the boundary, nothing counted twice; on the CPU the phases are
    # disjoint pieces of the step, so "other" (the rest) is never negative
    class Marks(nn.Module):
        def __init__(self, watch_box):
            super().__init__()
            self.inner, self.box = nn.Linear(2, 2), watch_box

        def forward(self, x):
            y = self.inner(x)
            self.box[0].mark_step()
            return self.inner(y)

    box: list = []
    model = Marks(box)
    opt = torch.optim.SGD(model.parameters(), 0.01)

    def closure():
        loss = model(torch.randn(1, 2)).sum()
        loss.backward()
        return loss

    with Watch() as w:
        box.append(w)
        for _ in range(4):
            opt.step(closure)
    assert w.steps == 4 + 4  # one ended by each mark_step, one by each optimizer step
    for phases, wall in zip(w.step_phases, w.step_seconds):
        assert sum(phases.values()) == pytest.approx(wall, rel=1e-9)
        assert min(phases.values()) >= -1e-9, phases


class _Ahead:
    """A loader that fetches one batch ahead, as accelerate's DataLoaderShard does: the
    underlying iterator ends while the epoch's last batch is still to be trained on."""

    def __init__(self, loader):
        self.loader = loader

    def __iter__(self):
        it = iter(self.loader)
        current = next(it)
        for batch in it:
            yield current
            current = batch
        yield current


def test_epochs_of_a_loader_that_fetches_ahead():
    model = _net()
    opt = torch.optim.SGD(model.parameters(), 0.01)
    loader = _loader()
    with Watch() as w:
        for _ in range(2):
            for x, y in _Ahead(loader):
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
    assert [e["steps"] for e in w.report().epoch_breakdown] == [4, 4]


def test_environment_names_the_threads_the_steps_ran_with():
    """A what-if --threads (or the script's own set_num_threads) is undone before the report
    is made: the environment's torch_threads is what the steps ran with, not what was left."""
    from layerscope.training.whatif import WhatIf

    before = torch.get_num_threads()
    steps = 1 if before > 1 else 2
    with Watch(what_if=WhatIf(threads=steps)) as w:
        plain(_net(), _loader(), epochs=1)
    assert torch.get_num_threads() == before  # undone
    r = w.report()
    assert r.environment["torch_threads"] == steps
    assert r.config["threads"] == steps
    from layerscope.core.environment import environment

    # the process's environment (probed once, cached) is not the report's to change
    assert environment()["torch_threads"] == before


def test_the_report_keeps_the_load_when_the_run_started(monkeypatch):
    """run and train results have no noise section: the environment keeps the load averages
    read when the watch started (diff names two runs' loads apart), rounded to 0.01."""
    monkeypatch.setattr("os.getloadavg", lambda: (1.234, 0.5, 0.25))
    with Watch() as w:
        plain(_net(), _loader(), epochs=1)
    assert w.report().environment["loadavg"] == [1.23, 0.5, 0.25]
