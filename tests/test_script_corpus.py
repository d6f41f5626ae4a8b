"""Scripts in the shapes people really run (tests/script_corpus/), run bare and under
``layerscope run --layers``, unchanged.

- ``lightning_classifier.py``: Lightning's basic examples (a LightningModule around a backbone,
  a LightningDataModule, ``Trainer(max_steps=...)``, automatic optimisation);
- ``hf_clm.py``: transformers' run_clm.py (``HfArgumentParser``, a GPT-2 from a config,
  blocks of tokens, ``Trainer(...).train()``);
- ``ddp_torchrun.py``: PyTorch's DDP examples (process group from torchrun's environment,
  DistributedDataParallel, DistributedSampler), two processes: bare under torchrun, measured
  under ``layerscope run --nproc-per-node 2``.

Each is checked for: the step count is the script's own (its max_steps, and what it counted and
printed); the phases sum to the steps' wall time (by construction: ``other`` is the rest, so the
only tolerance is float rounding, relative 1e-9); no layer's forward time is above 100% of the
forward phase and the layers' own times add up to at most it, and their backward times to at
most the backward phase; the standard output is byte for byte the bare run's (the scripts print
only what does not depend on timing, their final loss included, so measuring changed nothing of
the training); the exit code is the bare run's. Each script is run once each way per session.
Every run imports torch and a trainer in new processes (a minute or more on a busy machine):
``slow``, run with ``-m slow``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).parent / "script_corpus"
ROOT = Path(__file__).resolve().parent.parent
ROUNDING = 1e-9  # relative: the phases sum to the wall time up to float rounding


@dataclass(frozen=True)
class Case:
    script: str
    argv: tuple[str, ...]
    steps: int  # the script's max_steps (or what its loops make)
    printed: str  # the label of the step count the script prints
    samples_per_step: int  # samples in one optimizer step (per process)
    code: int = 0  # the script's own exit code
    nproc: int = 0  # processes (torchrun); 0: one, plain python
    trainer: bool = False  # its trainer runs forward and backward in optimizer.step(closure)


CASES = {
    # 80 samples in batches of 8 with validation every 5 batches; it exits 3 on purpose
    "lightning": Case("lightning_classifier.py", ("--max-steps", "12", "--exit-code", "3"), 12,
                      "global steps", 8, code=3, trainer=True),
    # 6 optimizer steps of 2 micro-batches of 4 blocks
    "hf-trainer": Case("hf_clm.py", ("--output_dir", "out", "--max_steps", "6",
                                     "--per_device_train_batch_size", "4",
                                     "--gradient_accumulation_steps", "2", "--report_to", "none",
                                     "--save_strategy", "no", "--use_cpu", "--logging_steps", "2",
                                     "--disable_tqdm", "True"),
                       6, "optimizer steps", 8),
    # 64 samples over 2 ranks in batches of 8: 4 steps per epoch per rank, 2 epochs
    "ddp": Case("ddp_torchrun.py", ("--epochs", "2", "--batch-size", "8"), 8, "steps on rank 0",
                8, nproc=2),
}


@dataclass
class Runs:
    bare: subprocess.CompletedProcess
    measured: subprocess.CompletedProcess
    report: dict


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    # the same threads both ways (torchrun would set 1), never a download
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=_env(), capture_output=True,
                          timeout=900)


def _both(case: Case, folder: Path) -> Runs:
    script = str(SCRIPTS / case.script)
    launcher = (["-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                 str(case.nproc)] if case.nproc else [])
    bare = _run([*launcher, script, *case.argv], folder)
    report = folder / "report.json"
    nproc = ["--nproc-per-node", str(case.nproc)] if case.nproc else []
    measured = _run(["-m", "layerscope", "run", *nproc, "--layers", "-o", str(report), script,
                     *case.argv], folder)
    assert report.exists(), measured.stderr.decode()[-2000:]
    return Runs(bare, measured, json.loads(report.read_text()))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    done: dict[str, Runs] = {}

    def get(name: str) -> Runs:
        if name not in done:
            done[name] = _both(CASES[name], tmp_path_factory.mktemp(name))
        return done[name]
    return get


def _printed(stdout: bytes, label: str) -> int:
    line = next(ln for ln in stdout.decode().splitlines() if ln.startswith(label + ":"))
    return int(line.split(":")[1])


@pytest.mark.parametrize("name", CASES)
def test_output_and_exit_code_are_the_scripts_own(name, runs):
    case, r = CASES[name], runs(name)
    assert r.bare.returncode == case.code, r.bare.stderr.decode()[-2000:]
    assert r.measured.returncode == r.bare.returncode, r.measured.stderr.decode()[-2000:]
    assert r.measured.stdout == r.bare.stdout  # byte for byte, the final loss included


@pytest.mark.parametrize("name", CASES)
def test_steps_are_the_scripts_own(name, runs):
    case, r = CASES[name], runs(name)
    assert _printed(r.bare.stdout, case.printed) == case.steps
    assert r.report["breakdown"]["steps"] == case.steps == len(r.report["step_seconds"])
    assert r.report.get("world_size") == (case.nproc or None)


@pytest.mark.parametrize("name", CASES)
def test_phases_sum_to_the_steps(name, runs):
    case, r = CASES[name], runs(name)
    for b in [r.report["breakdown"], *r.report["epoch_breakdown"]]:
        assert sum(b["seconds"].values()) == pytest.approx(b["wall_s"], rel=ROUNDING)
    b = r.report["breakdown"]
    assert sum(r.report["step_seconds"]) == pytest.approx(b["wall_s"], rel=ROUNDING)
    for phase in ("data", "forward", "backward", "optimizer"):
        assert b["seconds"][phase] > 0, phase
    # Lightning's automatic optimisation: training_step's own code runs in the closure
    assert ("trainer" in b["seconds"]) == case.trainer
    for rank in r.report.get("ranks") or []:
        additive = sum(v for p, v in rank["phases"].items() if p != "communication")
        assert additive == pytest.approx(rank["step_s"], rel=ROUNDING)


@pytest.mark.parametrize("name", CASES)
def test_layer_shares_at_most_100_percent(name, runs):
    r = runs(name)
    seconds = r.report["breakdown"]["seconds"]
    forward = seconds["forward"] + seconds["loss"]
    backward = seconds["backward"] + seconds.get("exposed_communication", 0.0)
    rows = r.report["layers"]
    assert rows
    for row in rows:
        assert row["forward_s"] / forward <= 1 + ROUNDING, row
    assert sum(row["own_s"] for row in rows) / forward <= 1 + ROUNDING
    assert sum(row["backward_s"] for row in rows) / backward <= 1 + ROUNDING


@pytest.mark.parametrize("name", ["lightning", "hf-trainer", "ddp"])
def test_samples_are_the_steps_batches(name, runs):
    """Samples are those the steps trained on (the Hugging Face Trainer's loader, accelerate's,
    fetches one batch ahead: that batch, fetched in the last step, is not one of them)."""
    case, r = CASES[name], runs(name)
    assert r.report["breakdown"]["samples"] == case.steps * case.samples_per_step
