"""The trainers' callbacks (layerscope.integrations) against the real Lightning and Hugging Face
Trainer, on tiny models and synthetic data, CPU.

The acceptance: a script's breakdown through its trainer's callback is the one
``layerscope run`` gives for the same script: the same step count (the trainer's own count of
optimizer steps), the same phases present, and in each the phases sum to the measured wall time.
The scripts (tests/trainer_scripts/) are plain trainer scripts; ``--layerscope OUT`` is the one
switch that adds the callback. Both ways run in this process (``runpy``, as ``layerscope run``
itself does), so the trainers are imported once.
"""
from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.helpers import run_cli

SCRIPTS = Path(__file__).parent / "trainer_scripts"
ROOT = Path(__file__).resolve().parent.parent
# phases that must have taken time in every step's sum on any machine: a CPU run has no h2d copy
# and these scripts' losses are functional (F.cross_entropy, GPT-2's own), so no loss module
MEASURED = ("data", "forward", "backward", "optimizer")


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # tests never download
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def _hooks_state() -> dict:
    """Every global hook table and patched attribute a Watch touches, by identity."""
    import torch
    from torch.nn.modules import module
    from torch.optim import optimizer
    from torch.utils.data import dataloader

    from layerscope.training.watch import active

    return {"opt_pre": dict(optimizer._global_optimizer_pre_hooks),
            "opt_post": dict(optimizer._global_optimizer_post_hooks),
            "fwd_pre": dict(module._global_forward_pre_hooks),
            "fwd": dict(module._global_forward_hooks),
            "backward": torch.autograd._engine_run_backward,
            "next": vars(dataloader._BaseDataLoaderIter).get("__next__"),
            "to": vars(torch.Tensor).get("to"), "active": active()}


def _run_script(script: str, *argv: str) -> tuple[dict, str]:
    """Run a trainer script in this process as ``python script argv`` would; returns its
    globals and what it printed."""
    import contextlib
    import io

    saved = sys.argv
    sys.argv = [str(SCRIPTS / script), *argv]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            scope = runpy.run_path(str(SCRIPTS / script), run_name="__main__")
    finally:
        sys.argv = saved
    return scope, out.getvalue()


def _printed(text: str, label: str) -> int:
    """A number the script printed: ``label: N``."""
    line = next(ln for ln in text.splitlines() if ln.startswith(label + ":"))
    return int(line.split(":")[1])


def _check_breakdown(report: dict, steps: int) -> None:
    b = report["breakdown"]
    assert b["steps"] == steps
    assert report["kind"] == "train"
    assert all(b["seconds"][p] > 0 for p in MEASURED), b["seconds"]
    # other = wall - the named phases, per step: the sum is the wall time up to rounding
    assert sum(b["seconds"].values()) == pytest.approx(b["wall_s"], rel=1e-9)


def _present(report: dict) -> set[str]:
    return {p for p, s in report["breakdown"]["seconds"].items() if s > 0}


LIGHTNING_CASES = {
    "automatic": [],  # forward and backward run inside optimizer.step(closure)
    "manual": ["--manual"],
    "accumulate-2": ["--accumulate", "2", "--batches", "6"],  # 3 optimizer steps an epoch
    "validation": ["--val"],  # the sanity check and validation epochs are no training step
}
HF_CASES = {
    "accumulate-2": ["--accumulate", "2"],  # 2 forward+backward per optimizer step
    "no-accumulation": ["--accumulate", "1", "--steps", "3"],
}


def _callback_and_run(tmp_path, script: str, argv: list[str]) -> tuple[dict, dict, str, str]:
    """The script with the callback, then as it is under ``layerscope run``: both reports and
    both outputs. No hook is left installed by either."""
    before = _hooks_state()
    scope, printed_cb = _run_script(script, *argv, "--layerscope", str(tmp_path / "cb.json"))
    assert _hooks_state() == before
    callback = scope["callbacks"][0]
    via_callback = json.loads((tmp_path / "cb.json").read_text())
    assert callback.report.to_dict()["breakdown"] == via_callback["breakdown"]
    code, printed_run, err = run_cli("run", "-o", str(tmp_path / "run.json"),
                                     str(SCRIPTS / script), *argv)
    assert code == 0, err
    assert _hooks_state() == before
    return via_callback, json.loads((tmp_path / "run.json").read_text()), printed_cb, printed_run


@pytest.mark.integration
@pytest.mark.parametrize("argv", LIGHTNING_CASES.values(), ids=LIGHTNING_CASES.keys())
def test_lightning_callback_gives_the_breakdown_of_layerscope_run(tmp_path, argv):
    pytest.importorskip("lightning")
    via_callback, via_run, printed_cb, printed_run = _callback_and_run(
        tmp_path, "lightning_mlp.py", argv)
    steps = _printed(printed_cb, "optimizer steps")
    # 2 epochs x 5 batches, or x 6 batches / 2 accumulated
    assert steps == (6 if "--accumulate" in argv else 10)
    assert _printed(printed_run, "optimizer steps") == steps
    _check_breakdown(via_callback, steps)
    _check_breakdown(via_run, steps)
    assert _present(via_callback) == _present(via_run)
    # 2 epochs of limit_train_batches: a new pass over the loader starts an epoch
    assert len(via_callback["epoch_breakdown"]) == len(via_run["epoch_breakdown"]) == 2
    assert via_callback["script"] == {"name": "lightning_mlp.py",
                                      "argv": [*argv, "--layerscope", str(tmp_path / "cb.json")]}
    assert via_run["script"] == {"name": "lightning_mlp.py", "argv": argv,
                                 "path": str(SCRIPTS / "lightning_mlp.py"), "module": False,
                                 "cwd": os.getcwd()}
    # MFU's numerator, the same both ways: the MLP on a batch of 16, forward 66,560 (32->64 and
    # its bias) + 1,024 (ReLU) + 8,256 (64->4 and bias) = 75,840; backward 66,560 (weight and
    # bias gradients; the input needs none) + 1,024 (ReLU) + 16,448 (input, weight, bias) =
    # 84,032; per optimizer step x the batches it accumulates, + Adam 13 x 2,372 parameters
    batches = 2 if "--accumulate" in argv else 1
    expected = batches * (75_840 + 84_032) + 13 * 2_372
    assert via_callback["efficiency"]["model_flops_per_step"] == expected
    assert via_run["efficiency"]["model_flops_per_step"] == expected


@pytest.mark.integration
@pytest.mark.parametrize("argv", HF_CASES.values(), ids=HF_CASES.keys())
def test_hf_trainer_callback_gives_the_breakdown_of_layerscope_run(tmp_path, argv):
    pytest.importorskip("transformers")
    argv = [*argv, "--output-dir", str(tmp_path / "trainer")]
    via_callback, via_run, printed_cb, printed_run = _callback_and_run(
        tmp_path, "hf_gpt2.py", argv)
    steps = _printed(printed_cb, "optimizer steps")
    assert steps == (3 if "--steps" in argv else 4)  # max_steps counts optimizer steps
    assert _printed(printed_run, "optimizer steps") == steps
    _check_breakdown(via_callback, steps)
    _check_breakdown(via_run, steps)
    assert _present(via_callback) == _present(via_run)
    # 8 micro-batches of the 16 in an epoch at most: one epoch
    assert len(via_callback["epoch_breakdown"]) == len(via_run["epoch_breakdown"]) == 1
    # the Trainer's own logging is untouched: one entry per step (logging_steps=1) + the summary
    assert _printed(printed_cb, "log entries") == _printed(printed_run, "log entries") == steps + 1
    # the Trainer calls model(**batch): its keyword arguments are read at its second call, and
    # both ways count the same step (the accumulated micro-batches x one forward + backward)
    counted = [r["efficiency"]["model_flops_per_step"] for r in (via_callback, via_run)]
    assert counted[0] == counted[1] > 0


@pytest.mark.integration
@pytest.mark.parametrize("script,argv,steps", [
    ("lightning_mlp.py", ["--steps", "3"], 3),
    ("lightning_mlp.py", ["--steps", "3", "--manual"], 3),
    ("hf_gpt2.py", ["--callback-steps", "2"], 2),
], ids=["lightning-automatic", "lightning-manual", "hf-trainer"])
def test_callback_steps_stops_the_trainer_after_that_many_optimizer_steps(tmp_path, script, argv,
                                                                          steps):
    pytest.importorskip("lightning" if script.startswith("lightning") else "transformers")
    if script == "hf_gpt2.py":
        argv = [*argv, "--output-dir", str(tmp_path / "trainer")]
    scope, printed = _run_script(script, *argv, "--layerscope", str(tmp_path / "cb.json"))
    assert _printed(printed, "optimizer steps") == steps  # the trainer's own count
    assert scope["callbacks"][0].report.breakdown["steps"] == steps


def test_lightning_failed_fit_keeps_the_steps_done_and_removes_every_hook(tmp_path):
    pytest.importorskip("lightning")
    before = _hooks_state()
    with pytest.raises(RuntimeError, match="failed at step 3"):
        _run_script("lightning_mlp.py", "--fail-at", "3", "--layerscope",
                    str(tmp_path / "cb.json"))
    assert _hooks_state() == before
    # on_exception wrote the report of the 3 optimizer steps done before the failure
    assert json.loads((tmp_path / "cb.json").read_text())["breakdown"]["steps"] == 3


@pytest.mark.integration
@pytest.mark.parametrize("script,argv", [
    ("lightning_mlp.py", []),
    ("hf_gpt2.py", ["--output-dir", "TMP"]),
], ids=["lightning", "hf-trainer"])
def test_callback_under_layerscope_run_reports_from_the_run_s_watch(tmp_path, script, argv):
    """One Watch measures a process: under ``layerscope run`` the callback reports from the
    run's Watch rather than failing to start a second one."""
    pytest.importorskip("lightning" if script.startswith("lightning") else "transformers")
    argv = [str(tmp_path / "trainer") if a == "TMP" else a for a in argv]
    code, printed, err = run_cli("run", "-o", str(tmp_path / "run.json"), str(SCRIPTS / script),
                                 *argv, "--layerscope", str(tmp_path / "cb.json"))
    assert code == 0, err
    via_run = json.loads((tmp_path / "run.json").read_text())
    via_callback = json.loads((tmp_path / "cb.json").read_text())
    assert via_callback["breakdown"]["steps"] == via_run["breakdown"]["steps"] \
        == _printed(printed, "optimizer steps")


# ---- callbacks driven by hand: rank 0 writes, every rank measures ------------------------

def _tiny_steps(n: int):
    """``n`` optimizer steps of a plain loop (the trainer's part, without a trainer)."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(8 * n, 4), torch.randint(0, 2, (8 * n,))),
                        batch_size=8)
    return model, opt, lambda: [(opt.zero_grad(), torch.nn.functional.cross_entropy(
        model(x), y).backward(), opt.step()) for x, y in loader]


def _drive_lightning(tmp_path, rank0: bool, **options):
    from layerscope.integrations.lightning import LayerscopeCallback

    model, opt, loop = _tiny_steps(3)
    cb = LayerscopeCallback(out=str(tmp_path / "r.json"), html=str(tmp_path / "r.html"),
                            **options)
    trainer = SimpleNamespace(optimizers=[opt], is_global_zero=rank0, should_stop=False)
    cb.on_train_start(trainer, model)
    loop()
    cb.on_train_end(trainer, model)
    cb.teardown(trainer, model, "fit")  # after on_train_end: nothing more
    return cb


def _drive_hf(tmp_path, rank0: bool, **options):
    from layerscope.integrations.transformers import LayerscopeCallback

    model, opt, loop = _tiny_steps(3)
    cb = LayerscopeCallback(out=str(tmp_path / "r.json"), html=str(tmp_path / "r.html"),
                            **options)
    state, control = SimpleNamespace(is_world_process_zero=rank0), SimpleNamespace()
    # the Trainer hands over accelerate's wrapper; the step hooks fire on the optimizer inside
    cb.on_train_begin(None, state, control, model=model, optimizer=SimpleNamespace(optimizer=opt))
    loop()
    cb.on_train_end(None, state, control, model=model)
    return cb


@pytest.mark.parametrize("drive,package", [(_drive_lightning, "lightning"),
                                           (_drive_hf, "transformers")],
                         ids=["lightning", "hf-trainer"])
@pytest.mark.parametrize("rank0", [True, False], ids=["rank-0", "other-rank"])
def test_only_rank_0_writes_every_rank_measures(tmp_path, drive, package, rank0):
    pytest.importorskip(package)
    before = _hooks_state()
    cb = drive(tmp_path, rank0)
    assert _hooks_state() == before
    assert cb.report.breakdown["steps"] == 3
    assert (tmp_path / "r.json").exists() == (tmp_path / "r.html").exists() == rank0
    if rank0:  # the saved report renders again, as every report does
        code, _, err = run_cli("render", str(tmp_path / "r.json"), "-o", str(tmp_path / "a.html"))
        assert code == 0, err
        assert "<html" in (tmp_path / "a.html").read_text()


@pytest.mark.parametrize("drive,package", [(_drive_lightning, "lightning"),
                                           (_drive_hf, "transformers")],
                         ids=["lightning", "hf-trainer"])
def test_callback_options_reach_the_watch(tmp_path, drive, package):
    pytest.importorskip(package)
    cb = drive(tmp_path, True, warmup_steps=1, layers=True, memory=True)
    report = cb.report
    assert report.breakdown["steps"] == 2  # 3 steps, the first one warm-up
    assert report.config["warmup_steps"] == 1
    assert [row["name"] for row in report.layers] == ["Linear"]  # the model itself
    assert report.phase_memory and all(r["peak_rss_bytes"] > 0
                                       for r in report.phase_memory.values())


def test_hf_callback_close_after_a_failed_train_removes_every_hook(tmp_path):
    """The Trainer calls no callback when train() raises: close() stops the Watch."""
    pytest.importorskip("transformers")
    from layerscope.integrations.transformers import LayerscopeCallback

    before = _hooks_state()
    model, opt, loop = _tiny_steps(2)
    cb = LayerscopeCallback(out=str(tmp_path / "r.json"))
    cb.on_train_begin(None, SimpleNamespace(is_world_process_zero=True), SimpleNamespace(),
                      model=model, optimizer=opt)
    loop()  # ... and train() raises here: no on_train_end
    assert _hooks_state() != before
    cb.close()
    assert _hooks_state() == before
    assert cb.report.breakdown["steps"] == 2
    assert not (tmp_path / "r.json").exists()  # a failed run's report is kept, not written


@pytest.mark.parametrize("kwargs,message", [
    ({"out": "MISSING/r.json"}, "no such directory"),
    ({"html": "TMP"}, "is a directory"),
    ({"steps": 0}, "steps"),
    ({"warmup_steps": -1}, "warmup_steps"),
    ({"format": "xml"}, "unknown format 'xml'"),
], ids=["out-in-missing-folder", "html-is-a-folder", "zero-steps", "negative-warmup", "format"])
@pytest.mark.parametrize("module,package", [("lightning", "lightning"),
                                            ("transformers", "transformers")])
def test_bad_options_stop_before_training(tmp_path, kwargs, message, module, package):
    pytest.importorskip(package)
    import importlib

    from layerscope.core.errors import UserError

    callback = importlib.import_module(f"layerscope.integrations.{module}").LayerscopeCallback
    kwargs = {k: (str(tmp_path / v) if v in ("MISSING/r.json",) else
                  str(tmp_path) if v == "TMP" else v) for k, v in kwargs.items()}
    with pytest.raises(UserError, match=message):
        callback(**kwargs)


# ---- without the trainers --------------------------------------------------------------

def _python(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.integration
@pytest.mark.parametrize("module,blocked,line", [
    ("lightning", ("lightning", "pytorch_lightning"),
     "Lightning is not installed: pip install layerscope[lightning]"),
    ("transformers", ("transformers",),
     "transformers is not installed: pip install layerscope[hf]"),
])
def test_a_callback_without_its_trainer_says_what_to_install(module, blocked, line):
    # sys.modules[name] = None makes `import name` fail as if it were not installed
    done = _python(
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        f"from layerscope.integrations.{module} import LayerscopeCallback\n"
        "from layerscope.core.errors import UserError\n"
        "try:\n    LayerscopeCallback()\n"
        "except UserError as exc:\n    print(exc)\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == line


@pytest.mark.integration
def test_importing_layerscope_and_its_integrations_package_imports_no_trainer():
    done = _python("import sys, layerscope, layerscope.integrations\n"
                   "print(sorted(m for m in ('lightning', 'pytorch_lightning', 'transformers', "
                   "'accelerate') if m in sys.modules))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
