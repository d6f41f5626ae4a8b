"""The facts the advice rules' preconditions read come out of real small results, one check per
source of facts: a recipe's model and the efficiency section (train), the layer table (run
--layers), the kernels window (train --kernels), the loaders (run: a loader iterated for one
batch, a validation loader beside the training one) and a data-parallel script's process
group (run --nproc-per-node). Each asserts only what load cannot flip: which facts exist and
what the structure of the run fixes (layer counts, batches fed, the process group), and the
rule outcomes those fix; never a share or a time against a threshold. The rules themselves
are tested on hand-made facts in test_advice.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import run_cli

from layerscope.advice import advise_result
from layerscope.advice.facts import facts_of
from layerscope.advice.rules.amp import MIN_MFU, MIN_SHARE

ROOT = Path(__file__).resolve().parents[1]


def _run(tmp_path: Path, name: str, script: str, *flags: str) -> dict:
    """``layerscope run`` of ``script`` (written to tmp_path/name): its result."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(script))
    out = tmp_path / f"{name}.json"
    code, _, err = run_cli("run", *flags, "--format", "json", "-o", str(out), "--", str(path))
    assert code == 0, err
    return json.loads(out.read_text())


def _train(tmp_path: Path, *flags: str) -> dict:
    """``layerscope train digits-cnn`` on synthetic data with ``flags``: its result."""
    out = tmp_path / "train.json"
    code, _, err = run_cli("train", "digits-cnn", "--synthetic", "--no-eval", *flags, "--out",
                           str(tmp_path / "run"), "--format", "json", "-o", str(out), "--quiet")
    assert code == 0, err
    return json.loads(out.read_text())


def _rules(d: dict) -> tuple[list[str], list[str]]:
    report = advise_result(d)
    return [a.rule for a in report.advice], report.notes


# an elementwise polynomial fit (PyTorch's polynomial tutorial): no module, no matmul
POLY = """\
    import math
    import torch

    x = torch.linspace(-math.pi, math.pi, 100_000)
    y = torch.sin(x)
    a, b, c, d = (torch.randn((), requires_grad=True) for _ in range(4))
    opt = torch.optim.SGD([a, b, c, d], lr=1e-6)
    for t in range(40):
        loss = (a + b * x + c * x ** 2 + d * x ** 3 - y).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_an_elementwise_training_loop_gets_no_amp_advice(tmp_path):
    d = _run(tmp_path, "poly.py", POLY)
    facts = facts_of(d)
    # nothing counts a contraction: no model forward (no FLOPs, no MFU), no layer table
    assert not {"mfu", "contraction_share", "contraction_layers"} & set(facts)
    rules, notes = _rules(d)
    assert "amp" not in rules
    if facts.get("compute_share", 0.0) >= MIN_SHARE:  # the share it would have read
        assert any(n.startswith("amp: cannot judge: the result counts no contraction")
                   for n in notes), notes


def test_a_conv_nets_training_step_counts_its_contractions(tmp_path):
    d = _train(tmp_path, "--steps", "10")
    facts = facts_of(d)
    # the recipe's model (2 convolutions, 2 linear layers), its FLOPs, its one loader
    assert (facts["conv_layers"], facts["contraction_layers"]) == (2, 4)
    assert facts["mfu"] > 0 and facts["model_flops_per_step"] > 0
    assert (facts["training_loaders"], facts["loader_batches"]) == (1, 10)
    assert 0 < facts["compute_share"] <= 1 and facts["step_samples"] == 10
    rules, _ = _rules(d)
    if facts["mfu"] >= MIN_MFU and facts["compute_share"] >= MIN_SHARE:
        assert "amp" in rules  # the conv net still gets AMP advice
        amp = next(a for a in advise_result(d).advice if a.rule == "amp")
        assert {"contraction_layers", "mfu", "compute_share"} <= set(amp.facts)


# a small MLP trained on 12 batches of one loader, validated on 5 of another under no_grad
MLP = """\
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    train = DataLoader(TensorDataset(torch.randn(96, 32), torch.randint(0, 4, (96,))),
                       batch_size=8)
    val = DataLoader(TensorDataset(torch.randn(40, 32), torch.randint(0, 4, (40,))),
                     batch_size=8)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in train:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        for x, y in val:
            model(x)
"""


def test_the_layer_table_times_the_contractions_and_a_validation_loader_is_not_training(
        tmp_path):
    d = _run(tmp_path, "mlp.py", MLP, "--layers")
    facts = facts_of(d)
    assert facts["contraction_source"] == "layer table"
    assert facts["contraction_layers"] == 2 and 0 < facts["contraction_share"] <= 1
    # two loaders measured; the validation one (gradients off) is not the training one
    assert len(d["data_loading"]["loaders"]) == 2
    assert (facts["training_loaders"], facts["loader_batches"]) == (1, 12)


@pytest.mark.integration
def test_the_kernels_window_times_the_contractions(tmp_path):
    facts = facts_of(_train(tmp_path, "--steps", "5", "--kernels"))
    assert facts["contraction_source"] == "kernels window"
    assert facts["contraction_layers"] == 4 and 0 < facts["contraction_share"] <= 1


# a training loader iterated once, for one batch of slow reads, then trained on 20 times
ONE_BATCH = """\
    import time
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            time.sleep(0.002)
            return torch.randn(16), i % 4

    loader = DataLoader(Slow(), batch_size=16)
    x, y = next(iter(loader))
    model = nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(20):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_a_loader_iterated_for_one_batch_gets_no_worker_advice(tmp_path):
    d = _run(tmp_path, "one_batch.py", ONE_BATCH)
    facts = facts_of(d)
    assert (facts["training_loaders"], facts["loader_batches"]) == (1, 1)
    rules, notes = _rules(d)
    assert "workers" not in rules
    if any(n.startswith("workers: ") for n in notes):  # when the wait pointed at workers
        assert any("fed 1 batch(es), fewer than 8" in n for n in notes), notes


# the DDP tutorial's shape: Linear(20, 1) on gloo, the backward its gradient all-reduce
DDP = """\
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(20, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for _ in range(12):
        x, y = torch.rand(32, 20), torch.rand(32, 1)
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_data_parallel_script_on_a_tiny_model_gets_no_amp_advice(tmp_path):
    (tmp_path / "ddp.py").write_text(textwrap.dedent(DDP))
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "layerscope", "run", "--nproc-per-node", "2",
                        "-o", "out.json", "ddp.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    d = json.loads((tmp_path / "out.json").read_text())
    facts = facts_of(d)
    # backward holds the untimed all-reduce: its compute counts as at most twice the forward
    assert facts["communication_in_backward"] is True
    assert facts["compute_share"] <= 3 * facts["forward_share"] + 1e-9
    # 2 x 20 x 32 x 3 FLOPs a step cannot keep a processor 1% busy: load only lowers MFU
    assert facts["mfu"] < MIN_MFU
    assert "amp" not in _rules(d)[0]
