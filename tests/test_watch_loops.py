"""``layerscope run`` / ``watch()`` on the loops public scripts really write: manual updates
with no ``torch.optim`` (PyTorch examples' regression), two optimizers a step (DCGAN), a script
that fails before its first step, training in child processes (hogwild), transforms that are
modules (torchvision ``Normalize`` in a Dataset), and closures with work of their own
(Lightning). Each script is written here in the shape of the public example.

Invariants only: step counts equal the script's own iterations, phases sum to the step, the
script's standard output is unchanged; no timing asserts.
"""
from __future__ import annotations

import json
import os
import subprocess
import textwrap

import pytest
import torch
import torch.nn as nn

import layerscope
from layerscope.core.errors import UserError
from layerscope.renderers import render
from tests.warm_start import python_command

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# PyTorch examples' regression/main.py: a polynomial fitted by a Linear layer, updated by hand
REGRESSION = textwrap.dedent("""\
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    POLY_DEGREE = 4
    W_target = torch.randn(POLY_DEGREE, 1) * 5
    b_target = torch.randn(1) * 5

    def make_features(x):
        x = x.unsqueeze(1)
        return torch.cat([x ** i for i in range(1, POLY_DEGREE + 1)], 1)

    def get_batch(batch_size=32):
        x = make_features(torch.randn(batch_size))
        return x, x.mm(W_target) + b_target.item()

    fc = torch.nn.Linear(W_target.size(0), 1)
    for batch_idx in range(1, 11):
        batch_x, batch_y = get_batch()
        fc.zero_grad()
        output = F.smooth_l1_loss(fc(batch_x), batch_y)
        loss = output.item()
        output.backward()
        for param in fc.parameters():
            param.data.add_(-0.01 * param.grad)
        print(f"batch {batch_idx} loss {loss:.6f}")
    """)
ITERATIONS = 10


def _python(tmp_path, *argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    env.pop("RANK", None)
    command, env = python_command(argv, env)
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)


def _run(tmp_path, source: str, *options: str):
    """(plain python's result, layerscope run's result, its report or None)."""
    script = tmp_path / "script.py"
    script.write_text(source)
    bare = _python(tmp_path, str(script))
    out = tmp_path / "r.json"
    if out.exists():
        out.unlink()
    run = _python(tmp_path, "-m", "layerscope", "run", "-o", str(out), *options, str(script))
    return bare, run, json.loads(out.read_text()) if out.exists() else None


def _sums(b: dict) -> None:
    assert sum(b["seconds"].values()) == pytest.approx(b["wall_s"], rel=1e-9)


# (id, options, steps in the report, iterations printed, a note that must be there)
MANUAL = [
    ("fallback-to-backward", [], ITERATIONS, ITERATIONS, "each step ends where a backward()"),
    ("steps-cannot-act-without-optimizer", ["--steps", "3"], ITERATIONS, ITERATIONS,
     "the step limit (3) did not act"),
    ("step-on-backward", ["--step-on", "backward"], ITERATIONS, ITERATIONS, None),
    ("step-on-backward-stops", ["--step-on", "backward", "--steps", "3"], 3, 2, None),
]


@pytest.mark.integration
@pytest.mark.parametrize("options,steps,printed,note", [c[1:] for c in MANUAL],
                         ids=[c[0] for c in MANUAL])
def test_manual_sgd_without_torch_optim(tmp_path, options, steps, printed, note):
    bare, run, d = _run(tmp_path, REGRESSION, *options)
    assert run.returncode == bare.returncode == 0, run.stderr
    # the third backward ends step 3: the script stops before printing its third line
    assert run.stdout == "".join(bare.stdout.splitlines(True)[:printed])
    b = d["breakdown"]
    assert b["steps"] == steps
    _sums(b)
    for phase in ("forward", "backward"):
        assert b["seconds"][phase] > 0, phase
    if note:
        assert any(note in n for n in d["notes"]), d["notes"]
    else:
        assert not any("backward()" in n for n in d["notes"]), d["notes"]


@pytest.mark.integration
@pytest.mark.parametrize("options,steps,step_on", [
    ([], ITERATIONS, "backward"),  # the default: optimizer steps, else backward passes
    (["--step-on", "optimizer"], 0, "optimizer"),  # optimizer steps only: none ran
], ids=["auto", "optimizer"])
def test_step_on_optimizer_counts_optimizer_steps_only(tmp_path, options, steps, step_on):
    """Before: --step-on optimizer counted a backward-only loop's backward passes as steps
    (the default's fallback) and recorded step_on optimizer; now the fallback is the default's
    alone, and the result records what ended its steps."""
    bare, run, d = _run(tmp_path, REGRESSION, *options)
    assert run.returncode == bare.returncode == 0, run.stderr
    assert run.stdout == bare.stdout
    assert d["breakdown"]["steps"] == len(d["step_seconds"]) == steps
    assert d["config"]["step_on"] == step_on
    if not steps:
        assert any(n.startswith("no training step seen: --step-on optimizer ends steps only "
                                f"at optimizer.step(), and none ran ({ITERATIONS} backward()")
                   for n in d["notes"]), d["notes"]


def test_a_watch_inside_a_watch_of_the_script_is_refused():
    """One Watch measures a process: a second watch() the script starts inside its own is
    refused at its start (it joined the first, silently, before); under layerscope run the
    script's own watch() joins the run's (test_run_hostile)."""
    with layerscope.watch():
        inner = layerscope.watch()
        with pytest.raises(RuntimeError, match="already measuring this process"):
            with inner:
                pass
    with layerscope.watch():  # the first one's stop freed the hooks
        pass


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))


def test_step_on_backward_in_process_and_accumulation_merged():
    """Gradient accumulation (4 backward passes, 1 optimizer step, twice): the default makes 2
    steps; step_on='backward' makes 8, and the optimizer's time is still its phase."""
    model = _net()
    opt = torch.optim.SGD(model.parameters(), 0.01)
    x = torch.randn(8, 4)
    for step_on, steps in (("optimizer", 2), ("backward", 8)):
        with layerscope.watch(step_on=step_on) as w:
            for i in range(8):
                model(x).pow(2).mean().backward()
                if i % 4 == 3:
                    opt.step()
                    opt.zero_grad()
        b = w.report().breakdown
        assert w.steps == b["steps"] == steps, step_on
        _sums(b)
        assert b["seconds"]["optimizer"] > 0
        assert not any("backward()" in n for n in w.report().notes)


def test_autograd_grad_ends_no_step():
    """torch.autograd.grad returns gradients (a penalty term, a Hessian product): no step."""
    model = _net()
    x = torch.randn(8, 4, requires_grad=True)
    with layerscope.watch(step_on="backward") as w:
        for _ in range(3):
            torch.autograd.grad(model(x).sum(), x, create_graph=True)
            model(x).pow(2).mean().backward()
    assert w.steps == 3


def test_step_on_is_checked():
    with pytest.raises(UserError, match="step_on"):
        layerscope.watch(step_on="epoch")


# PyTorch examples' dcgan/main.py: per batch, D on real and fake, optimizerD.step(), then G,
# optimizerG.step(); two epochs of 4 batches
DCGAN = textwrap.dedent("""\
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    nz = 4
    netG = nn.Sequential(nn.Linear(nz, 16), nn.ReLU(), nn.Linear(16, 8), nn.Tanh())
    netD = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1), nn.Sigmoid())
    criterion = nn.BCELoss()
    optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    dataloader = DataLoader(TensorDataset(torch.randn(32, 8)), batch_size=8)
    for epoch in range(2):
        for i, (real,) in enumerate(dataloader):
            netD.zero_grad()
            label = torch.full((real.size(0), 1), 1.0)
            errD_real = criterion(netD(real), label)
            errD_real.backward()
            fake = netG(torch.randn(real.size(0), nz))
            errD_fake = criterion(netD(fake.detach()), label.fill_(0.0))
            errD_fake.backward()
            optimizerD.step()
            netG.zero_grad()
            errG = criterion(netD(fake), label.fill_(1.0))
            errG.backward()
            optimizerG.step()
            print(f"[{epoch}][{i}] Loss_D {(errD_real + errD_fake).item():.4f} "
                  f"Loss_G {errG.item():.4f}")
    """)


@pytest.mark.integration
@pytest.mark.parametrize("options,steps", [([], 8), (["--steps", "3"], 3)],
                         ids=["all", "steps-3"])
def test_dcgan_two_optimizers_one_step_per_iteration(tmp_path, options, steps):
    bare, run, d = _run(tmp_path, DCGAN, *options)
    assert run.returncode == bare.returncode == 0, run.stderr
    # stopped at the third iteration's optimizerG.step(): before its print
    assert run.stdout == "".join(bare.stdout.splitlines(True)[:steps - 1 if options else 8])
    b = d["breakdown"]
    assert b["steps"] == steps
    _sums(b)
    assert [len(e) and e["steps"] for e in d["epoch_breakdown"]] == ([4, 4] if steps == 8 else [3])
    note = [n for n in d["notes"] if "optimizers stepped" in n]
    assert len(note) == 1, d["notes"]
    assert note[0].startswith("2 optimizers stepped (optimizerD (Adam), optimizerG (Adam)): a "
                              "step is one iteration, ending where optimizerG (Adam) steps")


def test_optimizers_without_a_name_and_a_third_that_joins_later():
    """Optimizers held in a list are named by class and first-step order; one that first
    steps after the cycle is known (a scheduler-like extra every other iteration) ends no
    step; the per-optimizer seconds sum to the optimizer phase."""
    nets = [_net() for _ in range(3)]
    opts = [torch.optim.Adam(n.parameters()) for n in nets[:2]] + [
        torch.optim.SGD(nets[2].parameters(), 0.1)]
    x = torch.randn(8, 4)
    with layerscope.watch() as w:
        for it in range(5):
            for k, (net, opt) in enumerate(zip(nets, opts)):
                if k == 2 and it % 2 == 0:
                    continue
                net(x).pow(2).mean().backward()
                opt.step()
    r = w.report()
    assert w.steps == r.breakdown["steps"] == 5
    _sums(r.breakdown)
    note = next(n for n in r.notes if "optimizers stepped" in n)
    assert note.startswith("3 optimizers stepped (Adam #1, Adam #2, SGD #3): a step is one "
                           "iteration, ending where Adam #2 steps")
    by_opt = [float(part.rsplit(" ", 2)[1]) for part in note.split(": ")[-1].split(", ")]
    assert sum(by_opt) == pytest.approx(r.breakdown["seconds"]["optimizer"], abs=0.002)


CRASH = textwrap.dedent("""\
    import torch
    import torch.nn as nn

    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    print("starting")
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(4, 7)).sum().backward()  # the wrong input width: fails at once
        opt.step()
    """)


@pytest.mark.integration
@pytest.mark.parametrize("tail,ended", [
    ("", "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x7 and 8x2)"),
    ("import sys; sys.exit(3)\n", "exit code 3")], ids=["raises", "exits-3"])
def test_a_script_that_fails_before_its_first_step_gets_one_line(tmp_path, tail, ended):
    source = CRASH if not tail else CRASH.replace("for _ in range(3):", tail + "for _ in range(3):")
    bare, run, d = _run(tmp_path, source)
    assert run.returncode == bare.returncode != 0
    assert run.stdout == bare.stdout == "starting\n"
    assert d is None  # no report written
    # python's traceback (torch's frames inside it differ while the hooks are in), then one line
    tail = bare.stderr.splitlines(True)[-1:]  # its last line, or nothing
    assert run.stderr.endswith(
        "".join(tail) + f"layerscope: no training step was completed before the script ended "
        f"with {ended}: no report\n")


# PyTorch examples' mnist_hogwild: the model in shared memory, train() in child processes
HOGWILD = textwrap.dedent("""\
    import torch
    import torch.multiprocessing as mp
    import torch.nn as nn

    def train(rank, model):
        torch.manual_seed(rank)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
            opt.step()

    if __name__ == "__main__":
        model = nn.Linear(4, 1)
        model.share_memory()
        processes = []
        for rank in range(2):
            p = mp.Process(target=train, args=(rank, model))
            p.start()
            processes.append(p)
        for p in processes:
            p.join()
        mp.start_processes(train, args=(model,), nprocs=1, start_method="fork")
        print("exit codes", [p.exitcode for p in processes])
    """)


@pytest.mark.integration
@pytest.mark.parametrize("options", [[], ["--steps", "1"]], ids=["plain", "steps-1"])
def test_training_in_child_processes_is_named(tmp_path, options):
    """The children run with the hooks off: a step limit does not stop them."""
    bare, run, d = _run(tmp_path, HOGWILD, *options)
    assert run.returncode == bare.returncode == 0, run.stderr
    assert run.stdout == bare.stdout == "exit codes [0, 0]\n"
    assert d["breakdown"]["steps"] == 0
    assert d["notes"] == ["training ran in 3 child processes, which are not measured"]


@pytest.mark.integration
def test_dataloader_workers_are_not_children_and_start_is_restored():
    import multiprocessing.process as mpp

    from torch.utils.data import DataLoader, TensorDataset

    start = mpp.BaseProcess.__dict__["start"]
    model = _net()
    opt = torch.optim.SGD(model.parameters(), 0.01)
    loader = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=8, num_workers=1)
    with layerscope.watch() as w:
        for (x,) in loader:
            model(x).sum().backward()
            opt.step()
    assert w.children == 0 and w.steps == 2
    assert not any("child" in n for n in w.report().notes)
    assert mpp.BaseProcess.__dict__["start"] is start


class NormalizedImages(torch.utils.data.Dataset):
    """A Dataset in the torchvision shape: each sample through transforms that are modules."""

    def __init__(self, transform):
        g = torch.Generator().manual_seed(0)
        self.x = torch.rand(16, 1, 6, 6, generator=g)
        self.y = torch.randint(0, 3, (16,), generator=g)
        self.transform = transform

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.transform(self.x[i]), self.y[i]


@pytest.mark.parametrize("v2", [False, True], ids=["transforms", "transforms-v2"])
def test_transforms_that_are_modules_are_data_not_layers(v2):
    tv = pytest.importorskip("torchvision.transforms.v2" if v2 else "torchvision.transforms")
    transform = tv.Compose([tv.Normalize([0.5], [0.25]), tv.RandomHorizontalFlip(0.5)])
    loader = torch.utils.data.DataLoader(NormalizedImages(transform), batch_size=4)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(36, 3))
    opt = torch.optim.SGD(model.parameters(), 0.1)
    with layerscope.watch(layers=True, trace=True) as w:
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    b = w.report().breakdown
    assert w.steps == b["steps"] == 4
    _sums(b)
    assert {r["type"] for r in w.layer_rows()} == {"Sequential", "Flatten", "Linear"}
    assert all(r["calls"] == 4 for r in w.layer_rows())
    data = [(a, z) for phase, a, z in w.intervals if phase == "data"]
    forward = [(a, z) for phase, a, z in w.intervals if phase == "forward"]
    assert len(forward) == 4  # one model call a step, none inside a batch's loading
    assert not any(a <= f0 < z for f0, _ in forward for a, z in data)


class Clock:
    """A clock that moves only when the test moves it: the phases are exact sums."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize("as_kwarg", [False, True], ids=["step(closure)", "step(closure=...)"])
def test_closure_work_is_the_trainer_phase(as_kwarg):
    """Lightning's shape: optimizer.step(closure=...) whose closure runs forward and backward
    and its own bookkeeping. 3 s of bookkeeping, 1 s of forward, 2 s in the optimizer's own
    update, per step: the optimizer phase is the update's 2 s, the bookkeeping is the trainer
    phase, and nothing is left for other."""
    clock = Clock()
    model = _net()
    opt = torch.optim.SGD(model.parameters(), 0.01)
    opt.register_step_post_hook(lambda *a: setattr(clock, "t", clock.t + 2))  # the update

    def closure():
        clock.t += 3  # the trainer's own work (logging, hooks, precision plugins)
        opt.zero_grad()
        out = model(torch.randn(8, 4))
        loss = out.pow(2).mean()
        loss.backward()
        return loss

    model.register_forward_pre_hook(lambda *a: setattr(clock, "t", clock.t + 1))
    with layerscope.watch(clock=clock) as w:
        for _ in range(4):
            opt.step(closure=closure) if as_kwarg else opt.step(closure)
    r = w.report()
    b = r.breakdown
    assert w.steps == b["steps"] == 4
    _sums(b)
    assert b["seconds"]["forward"] == 4 * 1
    assert b["seconds"]["optimizer"] == 4 * 2
    assert b["seconds"]["trainer"] == 4 * 3  # 12.000 s, 50% of the steps
    assert b["seconds"]["other"] == 0
    assert b["wall_s"] == 4 * 6
    assert all(step["trainer"] == 3 for step in w.step_phases)
    assert not [n for n in r.notes if "closure" in n]  # the phase says it; no note


def test_trainer_phase_only_when_spent(tmp_path):
    """A loop without a closure has no trainer phase in its breakdown, its JSON or its table;
    a report saved before the phase existed (no trainer key) loads and renders as before."""
    clock = Clock()
    model = _net()
    opt = torch.optim.SGD(model.parameters(), 0.01)
    model.register_forward_pre_hook(lambda *a: setattr(clock, "t", clock.t + 1))
    with layerscope.watch(clock=clock) as w:
        for _ in range(2):
            opt.zero_grad()
            model(torch.randn(8, 4)).sum().backward()
            opt.step()
    r = w.report()
    assert "trainer" not in r.breakdown["seconds"]
    assert all("trainer" not in e["seconds"] for e in r.epoch_breakdown)
    _sums(r.breakdown)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(r.to_dict()))
    loaded = layerscope.load(str(path))
    assert "trainer" not in loaded.breakdown["seconds"]
    for fmt in ("table", "html"):
        assert "Trainer" not in render(loaded, fmt, width=120)


def test_trainer_phase_in_every_output(tmp_path):
    """Where a closure spent time, the trainer phase is in the JSON (valid against the schema),
    the phase table and the stacked chart, between optimizer and other."""
    from layerscope.schema import errors

    clock = Clock()
    model = _net()
    opt = torch.optim.SGD(model.parameters(), 0.01)

    def closure():
        clock.t += 3
        opt.zero_grad()
        model(torch.randn(8, 4)).sum().backward()

    with layerscope.watch(clock=clock) as w:
        for _ in range(2):
            opt.step(closure)
    d = w.report().to_dict()
    assert d["breakdown"]["seconds"]["trainer"] == 6
    assert list(d["breakdown"]["seconds"])[-2:] == ["trainer", "other"]
    assert errors(d) == []
    text = render(w.report(), "table", width=120)
    assert "Trainer" in text
    assert "Trainer" in render(w.report(), "html")


class Accelerating:
    """A clock that moves one tick more at every read than at the read before: time passes
    between any two hooks, the more the later (as when the process is descheduled there)."""

    def __init__(self):
        self.n = 0

    def __call__(self) -> float:
        self.n += 1
        return float(self.n * self.n)


def test_layer_time_is_within_its_phase():
    """--layers: a module's forward time is read inside its forward phase (the phase starts
    before the layer and ends after it), so no layer takes more than 100% of the forward phase
    and the layers' own times add up to at most the phase, however time passes between the
    hooks. (The layer's end was read after the phase's, and the outermost module came out
    above 100% of forward on a loaded machine.)"""
    model = _net()
    opt = torch.optim.SGD(model.parameters(), 0.01)
    with layerscope.watch(layers=True, clock=Accelerating()) as w:
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(8, 4)).sum().backward()
            opt.step()
    forward = w.report().breakdown["seconds"]["forward"]
    rows = w.layer_rows()
    assert [r["name"] for r in rows][0] == "Sequential"
    assert all(0 < r["forward_s"] <= forward for r in rows)
    assert sum(r["own_s"] for r in rows) <= forward
