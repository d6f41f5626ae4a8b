"""MFU, HFU and MBU: the step's FLOPs derived by hand, the record's figures are each other's
quotients exactly, and a ratio above 100% is refused with its cause. No test reads a clock
threshold: the measured ceilings are replaced by hand-made ones where a peak matters."""
import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

import layerscope
from layerscope.analysis import roofline
from layerscope.analysis.efficiency import step_flops
from layerscope.core.records import Ceilings
from layerscope.core.records.efficiency import Efficiency, efficiency
from layerscope.core.report import Report


# ---- a nanoGPT-shaped block: qkv projection, causal SDPA, output projection, then a head ----
class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class TinyGPT(nn.Module):
    def __init__(self, d=16, heads=2, vocab=10, checkpointed=True):
        super().__init__()
        self.block = Block(d, heads)
        self.head = nn.Linear(d, vocab, bias=False)
        self.checkpointed = checkpointed

    def forward(self, x):
        y = (checkpoint(self.block, x, use_reentrant=False) if self.checkpointed
             else self.block(x))
        return self.head(y)


# B=2, S=8, D=16, H=2 heads of dh=8, vocab V=10; one micro-batch:
#   forward F:  qkv 2*B*S*D*3D = 24,576; causal SDPA: B*H*S(S+1)/2 = 144 visible scores,
#               MACs 144*(dh+dh) = 2,304, FLOPs 2*2,304 + 6 per score (scale, mask, softmax)
#               *144 = 5,472; proj 2*B*S*D*D = 8,192; head 2*B*S*D*V = 5,120  -> F = 43,360
#   backward:   qkv: weight gradient only (the input needs none) 24,576; SDPA: 4 gradient
#               products (dV, dP, dQ, dK) over the visible scores, MACs 4*B*H*dh*144/(B*H)
#               = 4*2*2*8*36 = 4,608, FLOPs 2*4,608 + 4 per score *144 = 9,792; proj input
#               and weight gradients 2*8,192 = 16,384; head 2*5,120 = 10,240  -> 60,992
#   recompute:  the fused SDPA backward kernel first rebuilds the scores, the forward's q.k
#               and softmax again: 2*B*H*36*dh + 6*144 = 2,304 + 864 = 3,168 (with or without
#               checkpointing: hardware FLOPs, not the model's); checkpointed, the block's
#               forward also runs again in backward up to the last tensor backward needs:
#               qkv 24,576 + SDPA 5,472 (proj saved only its input, so its matmul is not run
#               again)                                                       -> 33,216
#   optimizer:  Adam, 13 FLOPs per parameter (analysis.efficiency), parameters
#               16*48 + 16*16 + 16*10 = 1,184                                 -> 15,392
# gradient accumulation 2: two micro-batches of forward and backward, one optimizer step.
MODEL_PER_STEP = 2 * (43_360 + 60_992) + 15_392  # 224,096
HARDWARE_PER_STEP = MODEL_PER_STEP + 2 * 33_216  # 290,528
SCORES_AGAIN = 3_168


@pytest.mark.parametrize("checkpointed, model, hardware", [
    pytest.param(True, MODEL_PER_STEP, HARDWARE_PER_STEP, id="checkpointed"),
    pytest.param(False, MODEL_PER_STEP, MODEL_PER_STEP + 2 * SCORES_AGAIN,
                 id="no-checkpointing"),
])
def test_step_flops_of_a_small_causal_transformer_by_hand(checkpointed, model, hardware):
    """Backward is the model's 2x its forward (every weight's and input's gradient); what a
    kernel or checkpointing runs again counts for HFU only."""
    got = step_flops(TinyGPT(checkpointed=checkpointed), (2, 8, 16), optimizer="adam",
                     micro_batches=2)
    assert (got.forward, got.backward, got.optimizer) == (2 * 43_360, 2 * 60_992, 15_392)
    assert (got.model, got.hardware) == (model, hardware)


def test_optimizer_flops_follow_the_torch_optimizer():
    from layerscope.analysis.efficiency import optimizer_flops

    params = [nn.Parameter(torch.zeros(10))]
    cases = [(torch.optim.SGD(params, lr=0.1), 2 * 10),
             (torch.optim.SGD(params, lr=0.1, momentum=0.9), 4 * 10),
             (torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-4), 6 * 10),
             (torch.optim.Adam(params), 13 * 10), (torch.optim.AdamW(params), 14 * 10),
             # nanoGPT's groups: decay on the matrices, none on biases and norms, where
             # torch skips the decoupled decay (13); 10 parameters in each
             (torch.optim.AdamW([{"params": params, "weight_decay": 0.1},
                                 {"params": [nn.Parameter(torch.zeros(10))],
                                  "weight_decay": 0.0}]), 14 * 10 + 13 * 10),
             (torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True), 6 * 10),
             (torch.optim.Adam(params, amsgrad=True), 14 * 10)]
    assert [optimizer_flops(o, 0) for o, _ in cases] == [n for _, n in cases]


@pytest.mark.parametrize("flops, seconds, peak", [
    pytest.param(1e9, [0.5, 0.25, 1.0], 1e10, id="three-steps"),
    pytest.param([1e9, 2e9], [0.5, 0.5], 8e9, id="two-shapes"),
    pytest.param(3e6, 1e-3, 3e9, id="at-the-peak"),
    # four steps: the median step is 2.5 s, 1e9 / 2.5 = 4e8 FLOP/s (the median of the
    # per-step rates, (1e9/2 + 1e9/3) / 2 = 4.17e8, is not what the record prints)
    pytest.param(1e9, [4.0, 1.0, 3.0, 2.0], 1e10, id="an-even-number-of-steps"),
])
def test_the_record_is_its_own_quotients(flops, seconds, peak):
    """MFU is what a reader computes from the record: FLOPs per step / step seconds / peak."""
    e = efficiency(flops, seconds, peak)
    assert 0 < e.mfu <= 1
    assert e.mfu == e.achieved_flops_per_s / e.peak_flops_per_s
    assert e.achieved_flops_per_s == e.model_flops_per_step / e.step_s
    assert e.hfu == e.mfu and e.hardware_flops_per_step is None
    assert e.peak_source == "measured" and not e.notes
    assert all(0 < r <= 1 for r in e.mfu_per_step)


@pytest.mark.parametrize("kwargs, field, cause", [
    pytest.param(dict(peak_flops_per_s=1e9), "mfu", "roofline --refresh", id="mfu-measured"),
    pytest.param(dict(peak_flops_per_s=1e12, bytes_per_step=4e9, peak_bytes_per_s=1e9),
                 "mbu", "CPU caches", id="mbu-measured"),
])
def test_a_ratio_above_one_is_refused_with_its_cause(kwargs, field, cause):
    e = efficiency(2e9, 1.0, **kwargs)  # 2 GFLOP/s and 4 GB/s achieved
    assert getattr(e, field) is None
    assert len(e.notes) == 1 and "above 100%" in e.notes[0] and cause in e.notes[0]
    assert Efficiency.from_dict(json.loads(json.dumps(e.to_dict()))).notes == e.notes


def test_datasheet_peak_is_given_beside_the_measured_one():
    e = efficiency(4e12, 1.0, 8e12, datasheet=("h100-sxm datasheet (bf16, dense)", 989.4e12,
                                                3.35e12))
    assert e.mfu == 0.5
    assert e.datasheet.peak_source == "h100-sxm datasheet (bf16, dense)"
    assert e.datasheet.mfu == 4e12 / 989.4e12
    refused = efficiency(2e15, 1.0, 4e15, datasheet=("h100-sxm", 989.4e12, None))
    assert refused.mfu == 0.5 and refused.datasheet.mfu is None
    assert len(refused.notes) == 1 and "against the h100-sxm peak" in refused.notes[0]
    assert "not the datasheet's GPU" in refused.notes[0]


def _profile(monkeypatch, peak: float, bandwidth: float) -> Report:
    monkeypatch.setattr(roofline, "ceilings", lambda *a, **k: Ceilings(
        "cpu", "float32", 1, peak, bandwidth, 2048, 2**29))
    model = nn.Sequential(nn.Linear(256, 256, bias=False))  # matmul-bound
    report = layerscope.profile(model, (64, 256), runs=3, warmup=1, threads=1)
    return Report.from_dict(json.loads(json.dumps(report.to_dict())))


def test_profile_of_a_matmul_bound_model_against_its_roofline(monkeypatch):
    report = _profile(monkeypatch, peak=1e15, bandwidth=1e15)  # nothing reaches these
    e = report.efficiency
    assert e.model_flops_per_step == report.totals.flops == 2 * 64 * 256 * 256
    assert e.step_s == report.end_to_end["median_s"]
    assert e.achieved_flops_per_s == report.totals.flops / e.step_s
    assert e.peak_flops_per_s == report.roofline["peak_flops"]
    assert 0 < e.mfu <= 1 and e.mfu == e.achieved_flops_per_s / e.peak_flops_per_s
    assert 0 < e.mbu <= 1 and e.hfu is None
    assert e.bytes_per_step == report.totals.bytes_read + report.totals.bytes_written


def test_profile_above_its_stale_peak_refuses_and_says_why(monkeypatch):
    from layerscope.renderers.terminal import to_text

    report = _profile(monkeypatch, peak=1.0, bandwidth=1.0)  # 1 FLOP/s: surely exceeded
    e = report.efficiency
    assert e.mfu is None and e.mbu is None and len(e.notes) == 2
    text = to_text(report, width=200)
    assert "MFU: not given" in text and "roofline --refresh" in text


def test_train_reports_mfu_per_step_and_renders_it(monkeypatch, tmp_path):
    from layerscope.renderers.terminal import to_text

    monkeypatch.setattr(roofline, "ceilings", lambda *a, **k: Ceilings(
        "cpu", "float32", 1, 1e15, 1e15, 2048, 2**29))
    report = layerscope.train(recipe="digits-cnn", steps=3, evaluate=False, out=str(tmp_path))
    e = report.efficiency
    assert len(e.mfu_per_step) == len(report.step_seconds) == 3
    assert e.mfu == e.achieved_flops_per_s / 1e15 and 0 < e.mfu <= 1
    assert e.hfu == e.mfu  # nothing recomputed
    # digits-cnn's step: forward + backward of a batch of the recipe's size, plus the optimizer
    batch = report.breakdown["samples"] // 3
    counted = step_flops(_digits_model(), (batch, 1, 8, 8), optimizer=_adam_or_sgd(report))
    assert e.model_flops_per_step == counted.model
    again = type(report).from_dict(json.loads(json.dumps(report.to_dict())))
    assert again.efficiency.mfu == e.mfu
    assert "MFU:" in to_text(again, width=200)


def _digits_model():
    from layerscope.training.recipes import lookup

    return lookup("digits-cnn").build()


def _adam_or_sgd(report):
    from layerscope.training.recipes import lookup, make_optimizer

    r = lookup("digits-cnn")
    return make_optimizer(report.config.get("optimizer") or r.optimizer,
                          _digits_model().parameters(), 0.1)


def test_watched_loop_counts_the_model_as_seen_at_its_first_step(monkeypatch):
    """The nanoGPT loop's shape (batches from get_batch, gradient accumulation 2, Adam) with a
    checkpointed block: ``watch`` (what ``layerscope run`` uses) counts the hand-derived
    FLOPs per optimizer step, and the recomputed forward for HFU only."""
    monkeypatch.setattr(roofline, "ceilings", lambda *a, **k: Ceilings(
        "cpu", "float32", 1, 1e15, 1e15, 2048, 2**29))
    torch.manual_seed(0)
    model = TinyGPT()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    with layerscope.watch() as w:
        for _ in range(3):
            for _ in range(2):  # micro-steps
                model(torch.randn(2, 8, 16)).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    e = w.report().efficiency
    assert e.model_flops_per_step == MODEL_PER_STEP
    assert e.hardware_flops_per_step == HARDWARE_PER_STEP
    assert 0 < e.mfu < e.hfu <= 1
    assert e.hfu / e.mfu == pytest.approx(HARDWARE_PER_STEP / MODEL_PER_STEP)
    assert any("first step" in n and "2 forward(s)" in n for n in e.notes)


def _step_flops_of(e, seconds):
    """Each measured step's model FLOPs, back from its MFU (the peak is the test's own)."""
    return [m * e.peak_flops_per_s * s for m, s in zip(e.mfu_per_step, seconds)]


def test_watched_loop_counts_each_step_on_its_own_batch(monkeypatch):
    """The MNIST example's loop over a DataLoader of 5 samples in batches of 2 (the last one
    short), an evaluation pass under no_grad between the epochs: each step is counted on the
    batch it ran, and the evaluation counts nothing. Linear(4, 2) per sample: forward
    2*4*2 + 2 (bias) = 18; backward: weight gradient 16 + bias gradient 2 = 18 (the input needs
    none); SGD 2 x 10 parameters = 20 per step: a batch of 2 is 92, of 1 56."""
    monkeypatch.setattr(roofline, "ceilings", lambda *a, **k: Ceilings(
        "cpu", "float32", 1, 1e15, 1e15, 2048, 2**29))
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(5, 4)),
                                         batch_size=2)
    with layerscope.watch() as w:
        for _ in range(2):
            for (x,) in loader:
                optimizer.zero_grad()
                model(x).square().mean().backward()
                optimizer.step()
            with torch.no_grad():
                model(torch.randn(7, 4))  # evaluation: another shape, not a step's
    report = w.report()
    e = report.efficiency
    assert _step_flops_of(e, report.step_seconds) == pytest.approx([92, 92, 56] * 2, rel=1e-9)
    assert e.model_flops_per_step == 92
    assert any("2 distinct inputs" in n for n in e.notes)


@pytest.mark.parametrize("autocast, expected", [
    pytest.param(False, torch.float32, id="float32"),
    pytest.param(True, torch.bfloat16, id="autocast-bfloat16"),
])
def test_watched_loop_under_autocast_is_against_the_autocast_dtypes_peak(monkeypatch, autocast,
                                                                          expected):
    """nanoGPT trains under torch.autocast(bfloat16) on CUDA: its FLOPs run on the bfloat16
    peak, not the float32 one (a GPU's bf16 peak is many times its fp32 one, so an MFU
    against the fp32 peak is above 100% and refused)."""
    asked = []

    def ceilings(device, dtype=torch.float32, *a, **k):
        asked.append(dtype)
        return Ceilings("cpu", str(dtype), 1, 1e15, 1e15, 2048, 2**29)

    monkeypatch.setattr(roofline, "ceilings", ceilings)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with layerscope.watch() as w:
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = model(torch.randn(3, 4)).float().square().mean()
            loss.backward()
            optimizer.step()
    e = w.report().efficiency
    assert asked == [expected]
    assert any("bfloat16 peaks" in n for n in e.notes) == autocast


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_a_checkpointed_segment_recomputed_in_backward_is_backward_time(reentrant):
    """Under ``layerscope run`` (no model named) every outermost module call was a forward:
    the blocks torch.utils.checkpoint runs again inside backward were timed as forward. Each
    step has one forward interval, the model's own (a clock that ticks once per reading:
    nothing depends on real time)."""
    ticks = iter(range(10**6))
    blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))
    optimizer = torch.optim.SGD(blocks.parameters(), lr=0.1)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = blocks

        def forward(self, x):
            for b in self.blocks:
                x = checkpoint(b, x, use_reentrant=reentrant)
            return x

    model = Model()
    with layerscope.watch(trace=True, clock=lambda: float(next(ticks))) as w:
        for _ in range(3):
            model(torch.randn(2, 4, requires_grad=True)).sum().backward()
            optimizer.step()
    phases = [p for p, _, _ in w.intervals]
    assert phases.count("forward") == 3 and "backward" in phases


def test_a_model_returning_its_loss_is_trained_from_the_loss_only():
    """nanoGPT and Hugging Face models return the logits and the loss made from them; the
    step runs loss.backward(), so backward starts at the loss alone. Linear(4, 3, no bias) on
    2 x 4, loss = logits.sum(): backward is the weight gradient 2*2*4*3 = 48 (the sum's
    gradient is a broadcast, no arithmetic); a gradient seeded into the logits as well would
    add 6 (2 x 3) accumulating the two."""
    class WithLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(4, 3, bias=False)

        def forward(self, x):
            logits = self.head(x)
            return logits, logits.sum()

    t = layerscope.analyze(WithLoss(), inputs=(2, 4), mode="training").totals
    assert (t.flops, t.backward_flops) == (2 * 2 * 4 * 3 + 6, 48)  # forward: matmul + sum


def test_profile_loop_gives_each_batch_its_mfu_and_mbu(monkeypatch):
    from layerscope.training.inference_loop import profile_loop
    from layerscope.training.recipes import DigitsCNN

    monkeypatch.setattr(roofline, "ceilings", lambda *a, **k: Ceilings(
        "cpu", "float32", 1, 1e15, 1e15, 2048, 2**29))
    model = DigitsCNN()
    result = profile_loop(model, "digits", batch_size=64, batches=3, warmup=1)
    e = result.efficiency
    assert e.model_flops_per_step == layerscope.analyze(model, (64, 1, 8, 8)).totals.flops
    assert e.step_s == result.batch_time["median_s"] and len(e.mfu_per_step) == 3
    assert e.mfu == e.achieved_flops_per_s / 1e15 and 0 < e.mbu <= 1 and e.hfu is None
    again = type(result).from_dict(json.loads(json.dumps(result.to_dict())))
    assert again.efficiency.mbu == e.mbu


def test_scaling_point_carries_rank_zeros_mfu():
    from layerscope.training import scaling as sc

    e = efficiency(1e9, [0.5, 0.5], 1e10)  # 2 GFLOP/s of 10: 20%
    report = {"recipe": "digits-cnn", "config": {"batch_size": 8}, "world_size": 2,
              "step_seconds": [0.5, 0.5], "ranks": [],
              "breakdown": {"steps": 2, "samples": 16, "wall_s": 1.0},
              "efficiency": json.loads(json.dumps(e.to_dict()))}
    p = sc.point(report, threads=1, cores=2, device="cpu")
    assert p.utilisation.mfu == 0.2
    from layerscope.views.scaling import _mfu

    assert _mfu(p).text == "20.00%"


@pytest.mark.integration
def test_train_writes_step_mfu_to_tensorboard(monkeypatch, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setattr(roofline, "ceilings", lambda *a, **k: Ceilings(
        "cpu", "float32", 1, 1e15, 1e15, 2048, 2**29))
    report = layerscope.train(recipe="digits-cnn", steps=3, warmup_steps=1, evaluate=False,
                              tensorboard=True, out=str(tmp_path))
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    points = [(e.step, e.value) for e in acc.Scalars("step/mfu")]
    # the measured steps only (step 1 was warm-up), each its own figure (float32 in the file)
    assert [s for s, _ in points] == [2, 3]
    assert [v for _, v in points] == pytest.approx(report.efficiency.mfu_per_step, rel=1e-6)


class KeywordModel(nn.Module):
    """Called as the Hugging Face Trainer calls a model: model(**batch)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, input_ids=None):
        return self.fc(input_ids)


@pytest.mark.parametrize("steps, expected", [
    # Linear(4, 1) on a batch of 3: forward 2*3*4 + 3 (bias) = 27; backward: weight and bias
    # gradients 24 + 3 = 27 (the input needs none); SGD 2 x 5 parameters = 10
    pytest.param(2, 27 + 27 + 10, id="read-at-the-second-call"),
    pytest.param(1, None, id="one-call-only"),
])
def test_a_model_called_with_keywords_only(steps, expected):
    """The Hugging Face Trainer calls ``model(**batch)``: the global hooks see no keyword
    arguments, so the model's second call is read by a one-shot hook of its own."""
    model = KeywordModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with layerscope.watch() as w:
        for _ in range(steps):
            model(input_ids=torch.randn(3, 4)).sum().backward()
            optimizer.step()
    assert not model._forward_pre_hooks  # nothing left on the user's model
    report = w.report()
    if expected is None:
        assert report.efficiency is None
        assert any(n.startswith("MFU not given") and "keyword" in n for n in report.notes)
    else:
        assert report.efficiency.model_flops_per_step == expected


def test_keyword_calls_are_counted_per_step_on_their_own_shapes(monkeypatch):
    """The Trainer's model(**batch) with a last short batch: Linear(4, 1) on 3 samples 27 +
    27 + SGD 10 = 64, on 2 samples 18 + 18 + 10 = 46. The first call, made before the keyword
    hook was on, is the second's input, not an input of its own."""
    monkeypatch.setattr(roofline, "ceilings", lambda *a, **k: Ceilings(
        "cpu", "float32", 1, 1e15, 1e15, 2048, 2**29))

    model = KeywordModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with layerscope.watch() as w:
        for n in (3, 3, 2):
            model(input_ids=torch.randn(n, 4)).sum().backward()
            optimizer.step()
    report = w.report()
    e = report.efficiency
    assert _step_flops_of(e, report.step_seconds) == pytest.approx([64, 64, 46], rel=1e-9)
    assert any("2 distinct inputs" in n for n in e.notes)


# nanoGPT's train.py in small: token ids from get_batch(), gradient accumulation 2, AdamW
NANOGPT = """\
import torch
import torch.nn as nn
from torch.nn import functional as F

torch.manual_seed(0)
block_size, batch_size, vocab = 8, 2, 11
data = torch.randint(0, vocab, (100,))

def get_batch():
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i:i + block_size] for i in ix])
    return x, torch.stack([data[i + 1:i + 1 + block_size] for i in ix])

class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(vocab, 16)
        self.lm_head = nn.Linear(16, vocab, bias=False)

    def forward(self, idx, targets):
        logits = self.lm_head(self.wte(idx))
        return logits, F.cross_entropy(logits.view(-1, vocab), targets.view(-1))

model = GPT()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for it in range(3):
    for micro in range(2):
        X, Y = get_batch()
        _, loss = model(X, Y)
        (loss / 2).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
"""


def test_run_reports_mfu_of_the_scripts_model_and_writes_step_mfu(monkeypatch, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tests.helpers import run_cli

    monkeypatch.setattr(roofline, "ceilings", lambda *a, **k: Ceilings(
        "cpu", "float32", 1, 1e15, 1e15, 2048, 2**29))
    script = tmp_path / "train.py"
    script.write_text(NANOGPT)
    out, board = tmp_path / "r.json", tmp_path / "tb"
    code, _, err = run_cli("run", "--warmup-steps", "1", "--tensorboard", str(board), "-o",
                           str(out), str(script))
    assert code == 0, err
    e = json.loads(out.read_text())["efficiency"]
    # the script's model counted on its first forward's shapes (ids and targets, 2 x 8),
    # twice (gradient accumulation 2), plus AdamW: 14 x (11*16 + 16*11) parameters = 4,928
    one = step_flops(_script_model(), (torch.zeros(2, 8, dtype=torch.long),
                                       torch.zeros(2, 8, dtype=torch.long)))
    assert e["model_flops_per_step"] == 2 * (one.forward + one.backward) + 4_928
    acc = EventAccumulator(str(board))
    acc.Reload()
    points = [(p.step, p.value) for p in acc.Scalars("step/mfu")]
    assert [s for s, _ in points] == [2, 3]
    assert [v for _, v in points] == pytest.approx(e["mfu_per_step"], rel=1e-6)


def _script_model():
    namespace = {}
    exec(NANOGPT.split("model = GPT()")[0], namespace)
    return namespace["GPT"]()
