"""What fits a memory budget: ``layerscope memory --fit`` (the largest batch size, the longest
sequence) and ``layerscope plan --fit`` (each strategy's largest micro-batch). Expected sizes are
derived by hand from the bytes each step holds (float32: 4 bytes) or checked against the
command's own figures one size either side."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import layerscope
from layerscope.analysis.memory_fit import AFFINE, BISECTION, largest_batch, largest_seq
from layerscope.core.errors import UserError
from tests.helpers import run_cli


# ---- the solver on peaks given as functions -----------------------------------------------
def _line(a, b):
    return lambda n: a + b * n


def _kinked(n):  # a resident phase peaks up to n = 10, then activations: max of two lines
    return max(1000 + 1 * n, 900 + 11 * n)


SOLVER_CASES = [  # (peak, budget, expected size, method)
    (_line(100, 10), 100 + 10 * 7, 7, AFFINE),
    (_line(100, 10), 100 + 10 * 7 - 1, 6, AFFINE),
    (_line(100, 10), 110, 1, AFFINE),
    (_kinked, 900 + 11 * 50, 50, BISECTION),
    (_kinked, 900 + 11 * 50 - 1, 49, BISECTION),
    (lambda n: 5, 5, 2 ** 40, BISECTION),  # does not grow: the search stops at its cap
    (_line(100, 10), 10 ** 18, 2 ** 40, AFFINE),  # the line reaches past the cap: stops there
]


@pytest.mark.parametrize("peak,budget,size,method", SOLVER_CASES,
                         ids=["line", "line-1", "line-one", "kink", "kink-1", "flat", "past-cap"])
def test_largest_batch(peak, budget, size, method):
    solved = largest_batch(peak, budget)
    assert (solved.size, solved.method) == (size, method)
    assert solved.bytes_at_max == peak(size) <= budget
    if solved.bytes_at_next is not None:
        assert solved.bytes_at_next == peak(size + 1) > budget
    else:
        assert size == 2 ** 40 and "2**40" in solved.notes[0]


def test_largest_seq_quadratic_up_to_the_cap():
    def quadratic(s):
        return 1000 + 8 * s + s * s

    assert largest_seq(quadratic, quadratic(300), cap=4096).size == 300
    assert largest_seq(quadratic, quadratic(300) - 1, cap=4096).size == 299
    whole = largest_seq(quadratic, quadratic(4096), cap=4096)
    assert (whole.size, whole.bytes_at_next) == (4096, None)
    assert "position table" in whole.notes[-1]


@pytest.mark.parametrize("start", [256, 512, 300, 301], ids=["fits", "too-long", "at", "next"])
def test_largest_seq_starts_from_a_known_trace(start):
    def quadratic(s):
        return 1000 + 8 * s + s * s

    calls = []

    def counted(s):
        calls.append(s)
        return quadratic(s)

    solved = largest_seq(counted, quadratic(300), cap=4096, known={start: quadratic(start)})
    assert (solved.size, solved.bytes_at_next) == (300, quadratic(301))
    assert start not in calls  # the known trace is not run again


def test_a_budget_below_size_one_is_refused_with_what_it_needs():
    with pytest.raises(UserError, match="batch size 1 already needs 110 bytes"):
        largest_batch(_line(100, 10), 109)


# ---- a hand-derived training step ---------------------------------------------------------
def _mlp():
    return nn.Sequential(nn.Linear(64, 512, bias=False), nn.ReLU(),
                         nn.Linear(512, 16, bias=False))


P = (64 * 512 + 512 * 16) * 4  # parameters, 163,840 B
RESIDENT = P + P + 2 * P + 8  # + gradients (kept) + Adam's two states and 2 step counts


def _mlp_peak(batch):
    """Linear(64, 512) -> ReLU -> Linear(512, 16), no biases, Adam, gradients kept
    (set_to_none=False), cross-entropy against int64 labels (a classifier's loss, as train
    steps it). Per sample: input 256 B, labels 8, r (ReLU's output, saved) 2,048, output 64,
    and in ReLU's backward its input gradient g_r and output g_h, 2,048 each: 6,472 B; the
    loss and the one backward starts from, 4 B each. From batch 43 on that backward instant
    is the peak: RESIDENT + 6,472 b + 8. Below, Adam's step on W1 (two temporaries of W1's
    131,072 B) with the input, labels, output and loss alive is higher:
    RESIDENT + 262,144 + 328 b + 4 (batch 1: 917,844 B)."""
    return max(RESIDENT + 6472 * batch + 8, RESIDENT + 2 * 131072 + 328 * batch + 4)


def _fit(model, batch, budget, **kw):
    return layerscope.memory(model, torch.zeros(batch, 64), mode="training",
                             set_to_none=False, fit=budget, **kw)


@pytest.mark.integration
@pytest.mark.parametrize("k", [100, 43])
def test_mlp_budget_at_exactly_bytes_of_k_gives_k(k):
    assert _mlp_peak(k) == RESIDENT + 6472 * k + 8
    fit = _fit(_mlp(), 4, _mlp_peak(k)).fit
    assert (fit.max_batch_size, fit.bytes_at_max, fit.bytes_at_next) == \
        (k, _mlp_peak(k), _mlp_peak(k + 1))
    assert fit.budget_bytes == _mlp_peak(k)
    # batches 1 and 2 peak in the optimizer step (slope 328 B): the line misses, the check
    # says so, bisection finds it
    assert fit.method == "bisection" and "predicted" in fit.notes[0]
    assert not fit.confirmed and "not confirmed" in fit.notes[-1]
    assert _fit(_mlp(), 4, _mlp_peak(k) - 1).fit.max_batch_size == k - 1


def test_mlp_budget_below_batch_one_says_the_smallest_need():
    assert _mlp_peak(1) == 917_844
    with pytest.raises(UserError, match="batch size 1 already needs 917,844 bytes"):
        _fit(_mlp(), 4, 917_843)
    assert _fit(_mlp(), 4, 917_844).fit.max_batch_size == 1


def _conv():
    """Activations dominate from batch 1 (a few hundred parameters, 28.8 KB of conv output per
    sample), so the peak stays in backward and the line through batches 1 and 2 holds."""
    return nn.Sequential(nn.Conv2d(3, 8, 3, bias=False), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, 10, bias=False))


@pytest.mark.integration
def test_conv_affine_rule_agrees_with_traces_either_side():
    def peak(b):
        return layerscope.memory(_conv(), torch.zeros(b, 3, 32, 32), mode="training").peak_bytes

    budget = 3_000_000
    r = layerscope.memory(_conv(), torch.zeros(2, 3, 32, 32), mode="training", fit=budget)
    fit = r.fit
    assert fit.method == "affine" and fit.notes[0].startswith("affine")
    k = fit.max_batch_size
    assert peak(k) == fit.bytes_at_max <= budget < peak(k + 1) == fit.bytes_at_next
    # the line through 1 and 2 gives k exactly
    one, two = peak(1), peak(2)
    assert k == 1 + (budget - one) // (two - one)


@pytest.mark.integration
def test_measure_confirms_the_answer_on_the_cpu():
    r = layerscope.memory(_conv(), torch.zeros(2, 3, 32, 32), mode="training", fit=400_000,
                          measure=True)
    assert r.fit.confirmed, r.fit.notes
    assert r.fit.notes[-1].startswith("measured on the CPU")


# ---- the longest sequence of a language model ---------------------------------------------
TINY_LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 256, "max_position_embeddings": 512}


@pytest.mark.integration
def test_fit_seq_of_a_tiny_llama(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY_LLAMA))
    spec = f"hf:{path}"

    def peak(seq):
        return layerscope.memory(spec, mode="training", seq_len=seq).peak_bytes

    budget = peak(100)
    r = layerscope.memory(spec, mode="training", seq_len=16, fit=budget, fit_seq=True)
    s = r.fit_seq
    assert (s.batch_size, s.method, s.budget_bytes) == (1, "bisection", budget)
    assert s.max_seq_len >= 100
    assert peak(s.max_seq_len) == s.bytes_at_max <= budget < peak(s.max_seq_len + 1)
    assert r.fit.max_batch_size >= 1


# ---- plan --fit ---------------------------------------------------------------------------
@pytest.mark.integration
def test_plan_fit_against_plans_own_bytes():
    budget = 24 * 10 ** 9
    report = layerscope.plan("gpt2", 8, fit="24GB")
    assert report.fit_budget_bytes == budget
    peaks: dict[int, dict[str, int]] = {}

    def at(n):
        if n not in peaks:
            peaks[n] = {r.strategy: r.peak_bytes
                        for r in layerscope.plan("gpt2", 8, micro_batch=n).strategies}
        return peaks[n]

    for row in report.strategies:
        k = row.fit_micro_batch
        assert k >= 1
        assert at(k)[row.strategy] <= budget < at(k + 1)[row.strategy], row.strategy


def test_plan_fit_none_when_one_sequence_does_not_fit():
    report = layerscope.plan("gpt2", 8, fit="1GB")
    ddp = next(r for r in report.strategies if r.strategy == "ddp")
    assert ddp.peak_bytes > 10 ** 9 and ddp.fit_micro_batch == 0


# ---- the CLI ------------------------------------------------------------------------------
@pytest.mark.integration
def test_cli_memory_fit_json_and_table(tmp_path):
    out = tmp_path / "m.json"
    code, _, err = run_cli("memory", "mnist-cnn", "--mode", "training", "--fit", "100MB",
                           "-o", str(out))
    assert code == 0, err
    fit = json.loads(out.read_text())["fit"]
    assert set(fit) >= {"budget_bytes", "max_batch_size", "bytes_at_max", "bytes_at_next",
                        "confirmed", "method"}
    assert fit["budget_bytes"] == 10 ** 8 and fit["bytes_at_max"] <= 10 ** 8 < fit["bytes_at_next"]
    assert layerscope.load(str(out)).fit.max_batch_size == fit["max_batch_size"]
    code, text, err = run_cli("memory", "mnist-cnn", "--mode", "training", "--fit", "100MB",
                              "--width", "200")
    assert code == 0, err
    assert f"batch size {fit['max_batch_size']:,} " in text


@pytest.mark.parametrize("argv,words", [
    (["memory", "mnist-cnn", "--fit", "0"], "--fit must be from 1 byte"),
    (["memory", "mnist-cnn", "--fit", "lots"], "--fit must be a size such as"),
    (["memory", "mnist-cnn", "--mode", "training", "--fit", "1MB"],
     "--fit: batch size 1 already needs"),
    (["memory", "mnist-cnn", "--fit-seq"], "--fit-seq needs a memory budget"),
    (["memory", "mnist-cnn", "--fit", "1GB", "--fit-seq"], "'mnist-cnn' is not an LLM"),
    (["plan", "gpt2", "--gpus", "8", "--fit", "0"], "--fit must be from 1 byte"),
    (["plan", "gpt2", "--gpus", "8", "--fit", "lots"], "--fit must be a size such as"),
], ids=["zero", "lots", "below-batch-1", "seq-without-fit", "seq-not-llm",
    "plan-zero", "plan-lots"])
def test_cli_bad_fit_is_one_line_exit_2(argv, words):
    code, out, err = run_cli(*argv)
    assert code == 2 and out == ""
    assert words in err and len(err.strip().splitlines()) == 1


@pytest.mark.integration
def test_views_show_the_fit(tmp_path):
    html = tmp_path / "m.html"
    code, _, err = run_cli("memory", "resnet18", "--fit", "2GB", "-o", str(html))
    assert code == 0, err
    fit = layerscope.memory("resnet18", fit="2GB").fit
    assert f"batch size {fit.max_batch_size:,} " in html.read_text()
    csv = tmp_path / "p.csv"
    code, _, err = run_cli("plan", "gpt2", "--gpus", "8", "--fit", "24GB", "-o", str(csv))
    assert code == 0, err
    header, *rows = csv.read_text().splitlines()
    assert header.endswith(",fit_micro_batch") and all(r.split(",")[-1] != "" for r in rows)
    code, text, err = run_cli("plan", "gpt2", "--gpus", "8", "--fit", "24GB", "--width", "160")
    assert code == 0, err
    assert "Max micro-batch (24.00 GB)" in text


# ---- --fit chained with run --memory-limit, as a user would ----------------------------------
# A model given as file.py:factory and a training script in the shape of PyTorch's MNIST example
# building the same model (Adam, two steps on synthetic data, --batch-size from argv).
FIT_NET = """\
import torch.nn as nn


def factory():
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(),
                         nn.Linear(8 * 28 * 28, 64), nn.ReLU(), nn.Linear(64, 10))
"""
FIT_TRAIN = """\
import argparse

import torch
import torch.nn.functional as F

from net import factory

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=16)
args = parser.parse_args()
model = factory()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(2):
    data = torch.randn(args.batch_size, 1, 28, 28)
    target = torch.randint(0, 10, (args.batch_size,))
    optimizer.zero_grad()
    loss = F.cross_entropy(model(data), target)
    loss.backward()
    optimizer.step()
"""


def _cli(*argv: str, cwd) -> subprocess.CompletedProcess:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "layerscope", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.integration
def test_fit_answer_runs_under_memory_limit_and_next_size_does_not(tmp_path):
    """The batch --fit gives runs under run --memory-limit with the same budget; one more is
    refused with the post-mortem. The static step is train's (cross-entropy against int64
    labels, the outputs kept to the step's end, as train keeps them); this script frees the
    logits (10 float32 a sample) once the loss has them, so what the guard refuses at is below
    --fit's bytes_at_next by at most the logits' bytes."""
    (tmp_path / "net.py").write_text(FIT_NET)
    (tmp_path / "train.py").write_text(FIT_TRAIN)
    budget = "12MB"
    fit = _cli("memory", "net.py:factory", "--input", "1x1x28x28", "--mode", "training",
               "--optimizer", "adam", "--fit", budget, "-o", "fit.json", cwd=tmp_path)
    assert fit.returncode == 0, fit.stderr
    answer = json.loads((tmp_path / "fit.json").read_text())["fit"]
    k = answer["max_batch_size"]
    assert answer["bytes_at_max"] <= 12_000_000 < answer["bytes_at_next"]
    runs = _cli("run", "--memory-limit", budget, "-o", "at.json", "--", "train.py",
                "--batch-size", str(k), cwd=tmp_path)
    assert runs.returncode == 0, runs.stderr
    assert "post_mortem" not in json.loads((tmp_path / "at.json").read_text())
    # no -o: the report is drawn on the terminal, post-mortem table included
    over = _cli("run", "--memory-limit", budget, "--", "train.py", "--batch-size", str(k + 1),
                cwd=tmp_path)
    assert over.returncode == 1, over.stderr
    assert "layerscope: out of memory in" in over.stderr
    assert "alive at the failure" in over.stderr + over.stdout
    asked, live = map(int, re.search(r"tried to allocate (\d+) bytes .* with (\d+) bytes live; "
                                     r"the limit is 12000000 bytes", over.stderr).groups())
    refused_at = live + asked
    assert 12_000_000 < refused_at <= answer["bytes_at_next"]
    assert answer["bytes_at_next"] - refused_at <= 10 * 4 * (k + 1)
