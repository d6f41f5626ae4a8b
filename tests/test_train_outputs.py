"""What a training report counts and how it is written out: samples and tokens of loops without a
DataLoader and of loaders that fetch ahead, the CSV of ``run`` and ``train``, ``print`` of a
watched report, the script's warnings under ``run``, and a CPU run without CUDA rows."""
from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import layerscope
from layerscope.training.watch import Watch
from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parent.parent

# nanoGPT's train.py in small: batches made by get_batch() (no DataLoader), token ids [B, T],
# gradient accumulation. 4 optimizer steps x 2 micro-steps x B=3 -> 24 samples, x T=5 -> 120
# tokens.
NANOGPT = textwrap.dedent("""\
    import torch
    import torch.nn as nn
    from torch.nn import functional as F

    torch.manual_seed(0)
    block_size, batch_size, vocab, accumulation = 5, 3, 11, 2
    data = torch.randint(0, vocab, (200,))

    def get_batch():
        ix = torch.randint(len(data) - block_size, (batch_size,))
        x = torch.stack([data[i:i + block_size] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
        return x, y

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, 8)
            self.lm_head = nn.Linear(8, vocab)

        def forward(self, idx, targets=None):
            logits = self.lm_head(self.wte(idx))
            return logits, F.cross_entropy(logits.view(-1, vocab), targets.view(-1))

    model = GPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    X, Y = get_batch()
    for it in range(4):
        for micro_step in range(accumulation):
            logits, loss = model(X, Y)
            X, Y = get_batch()  # prefetch the next batch, as nanoGPT does
            (loss / accumulation).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    """)

# pytorch/examples regression/main.py in small: a polynomial fitted with batches from
# get_batch(), a manual update (no torch.optim: steps end at backward passes). 5 steps of 32.
REGRESSION = textwrap.dedent("""\
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    POLY_DEGREE = 4
    W_target = torch.randn(POLY_DEGREE, 1) * 5

    def make_features(x):
        x = x.unsqueeze(1)
        return torch.cat([x ** i for i in range(1, POLY_DEGREE + 1)], 1)

    def get_batch(batch_size=32):
        x = make_features(torch.randn(batch_size))
        return x, x.mm(W_target)

    fc = torch.nn.Linear(W_target.size(0), 1)
    for batch_idx in range(5):
        batch_x, batch_y = get_batch()
        fc.zero_grad()
        output = F.smooth_l1_loss(fc(batch_x), batch_y)
        output.backward()
        for param in fc.parameters():
            param.data.add_(-0.01 * param.grad)
    """)

# (id, script, steps, samples, tokens or None)
SCRIPTS = [
    ("nanogpt-get-batch", NANOGPT, 4, 4 * 2 * 3, 4 * 2 * 3 * 5),
    ("regression-manual-update", REGRESSION, 5, 5 * 32, None),
]


def _run(tmp_path, text: str, *options: str) -> tuple[dict, str]:
    script = tmp_path / "train.py"
    script.write_text(text)
    out = tmp_path / "r.json"
    code, _, err = run_cli("run", "-o", str(out), *options, str(script))
    assert code == 0, err
    return json.loads(out.read_text()), err


@pytest.mark.parametrize("text,steps,samples,tokens", [s[1:] for s in SCRIPTS],
                         ids=[s[0] for s in SCRIPTS])
def test_samples_without_a_dataloader_come_from_the_forward(tmp_path, text, steps, samples,
                                                            tokens):
    report, _ = _run(tmp_path, text)
    b = report["breakdown"]
    assert (b["steps"], b["samples"], b.get("tokens")) == (steps, samples, tokens)
    assert b["throughput_per_s"] > 0
    assert (b.get("tokens_per_s") or 0) > 0 if tokens else "tokens_per_s" not in b
    assert any("no DataLoader batch seen" in n for n in report["notes"]), report["notes"]


def _loader(n=32, batch=8) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(n, 4, generator=g),
                                    torch.randint(0, 3, (n,), generator=g)), batch_size=batch)


class FetchAhead:
    """accelerate's DataLoaderShard.__iter__ in small: fetch one batch ahead to know which
    is the last (so every step but the last fetches the batch after its own)."""

    def __init__(self, loader):
        self.loader = loader

    def __iter__(self):
        it = iter(self.loader)
        try:
            current = next(it)
        except StopIteration:
            return
        while True:
            try:
                nxt = next(it)
                yield current
                current = nxt
            except StopIteration:
                yield current
                break


def _train(loader, steps=None):
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    done = 0
    for x, y in loader:
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        done += 1
        if done == steps:  # max_steps reached: the batch fetched ahead is never trained on
            break


# (id, loader, steps the loop stops after, steps, samples): 4 batches of 8
AHEAD = [
    ("plain-whole-epoch", _loader, None, 4, 32),
    ("ahead-whole-epoch", lambda: FetchAhead(_loader()), None, 4, 32),
    ("ahead-stopped-after-2", lambda: FetchAhead(_loader()), 2, 2, 16),
    ("plain-stopped-after-2", _loader, 2, 2, 16),
]


@pytest.mark.parametrize("make,stop,steps,samples", [a[1:] for a in AHEAD],
                         ids=[a[0] for a in AHEAD])
def test_only_batches_a_step_trained_on_are_counted(make, stop, steps, samples):
    with Watch() as w:
        _train(make(), stop)
    b = w.report().breakdown
    assert (b["steps"], b["samples"]) == (steps, samples)
    assert w.step_samples == [8] * steps  # each step its own batch, the first one too


@pytest.mark.integration
def test_hf_trainer_counts_the_batches_of_its_steps(tmp_path):
    """A Hugging Face Trainer (accelerate fetches one batch ahead): 3 optimizer steps x 2
    accumulated batches of 4 sequences of 16 tokens = 24 samples, 384 tokens (not one batch
    more)."""
    pytest.importorskip("transformers")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    env.pop("RANK", None)
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "layerscope", "run", "-o", str(out),
         str(ROOT / "tests" / "trainer_scripts" / "hf_gpt2.py"), "--output-dir",
         str(tmp_path / "hf"), "--steps", "3", "--accumulate", "2"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    b = json.loads(out.read_text())["breakdown"]
    assert (b["steps"], b["samples"], b["tokens"]) == (3, 3 * 2 * 4, 3 * 2 * 4 * 16)


def _csv_rows(text: str) -> list[dict]:
    assert not text.lstrip().startswith("{"), text[:200]
    return list(csv.DictReader(io.StringIO(text)))


def test_run_writes_csv_one_row_per_phase(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(REGRESSION)
    out = tmp_path / "r.csv"
    code, _, err = run_cli("run", "-o", str(out), str(script))  # the extension picks CSV
    assert code == 0, err
    rows = _csv_rows(out.read_text())
    assert list(rows[0]) == ["scope", "phase", "seconds", "share", "ms_per_step", "steps",
                             "samples", "tokens"]
    run = [r for r in rows if r["scope"] == "run"]
    assert [r["phase"] for r in run] == ["data", "forward", "loss", "backward", "optimizer",
                                         "other", "total"]
    assert {(r["steps"], r["samples"], r["tokens"]) for r in run} == {("5", "160", "")}
    total = float(run[-1]["seconds"])
    assert sum(float(r["seconds"]) for r in run[:-1]) == pytest.approx(total, rel=1e-6)
    assert {r["scope"] for r in rows} == {"run", "epoch 1"}


def test_train_writes_csv(tmp_path):
    out = tmp_path / "r.csv"
    code, _, err = run_cli("train", "digits-cnn", "--dry-run", "--no-eval", "--quiet",
                           "--out", str(tmp_path / "run"), "--format", "csv", "-o", str(out))
    assert code == 0, err
    rows = _csv_rows(out.read_text())
    assert {r["scope"] for r in rows} == {"run", "epoch 1"}
    assert [r["phase"] for r in rows if r["scope"] == "run"][-1] == "total"


def test_print_of_a_watched_report_shows_its_tables():
    with layerscope.watch() as w:
        _train(_loader())
    report = w.report()
    text = str(report)
    assert "Time per phase" in text and "4 measured steps, 32 samples" in text, text
    assert "TrainReport(" not in text and not text.endswith("\n")
    short = repr(report)
    assert "\n" not in short and len(short) < 120 and short.startswith("TrainReport("), short


@pytest.mark.integration
def test_the_scripts_and_libraries_warnings_keep_their_origin(tmp_path):
    """A third-party module's warning and the script's own are printed as Python prints them
    (file:line: Category: message); only a layerscope warning carries layerscope's label."""
    (tmp_path / "thirdparty").mkdir()
    (tmp_path / "thirdparty" / "__init__.py").write_text(textwrap.dedent("""\
        import warnings

        def old():
            warnings.warn("old() is deprecated", FutureWarning, stacklevel=2)
            warnings.warn("a library warning")
        """))
    (tmp_path / "s.py").write_text(textwrap.dedent("""\
        import warnings
        import thirdparty
        from layerscope.errors import LayerscopeWarning
        thirdparty.old()
        warnings.warn("the script's own")
        warnings.warn("a layerscope warning", LayerscopeWarning)
        """))
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "layerscope", "run", "s.py"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    err = proc.stderr
    assert f"{tmp_path / 's.py'}:4: FutureWarning: old() is deprecated" in err, err
    assert (f"{tmp_path / 'thirdparty' / '__init__.py'}:5: UserWarning: a library warning"
            in err), err
    assert f"{tmp_path / 's.py'}:5: UserWarning: the script's own" in err, err
    assert "layerscope: warning: a layerscope warning" in err, err
    assert err.count("layerscope: warning:") == 1, err


def test_a_cpu_run_has_no_host_to_device_and_no_cuda_rows(tmp_path):
    report, err = _run(tmp_path, REGRESSION, "--memory")
    assert "h2d" not in report["breakdown"]["seconds"]
    assert all("h2d" not in e["seconds"] for e in report["epoch_breakdown"])
    assert report["peak_cuda_bytes"] is None
    assert report["phase_memory"] and all("peak_cuda_bytes" not in m
                                          for m in report["phase_memory"].values())
    text = str(layerscope.load(tmp_path / "r.json"))
    assert "Peak RSS" in text
    assert "Host-to-device" not in text and "CUDA" not in text, text


def test_a_cuda_run_keeps_its_host_to_device_and_cuda_rows():
    """The rows a CPU run leaves out stay where CUDA was used (the report of a CUDA run as the
    Watch writes it: an h2d phase, CUDA peaks per phase)."""
    from tests.sample_results import train_report

    report = train_report()  # its breakdown has an h2d phase
    report.config["device"] = "cuda"
    report.peak_cuda_bytes = 68_000_000
    report.script = {"name": "g.py", "argv": []}
    report.phase_memory = {"h2d": {"peak_rss_bytes": 1_000_000, "peak_cuda_bytes": 2_000_000},
                           "forward": {"peak_rss_bytes": 1_000_000,
                                       "peak_cuda_bytes": 3_000_000}}
    text = str(report)
    assert "Host-to-device" in text and "peak CUDA 68.00MB" in text and "Peak CUDA" in text
    assert "3.00MB" in text, text
