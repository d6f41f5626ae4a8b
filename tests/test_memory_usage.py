"""layerscope memory: the live set of one inference pass or training step, by module and kind at
its peak. Expected bytes are derived by hand from the ops each model runs (float32: 4 bytes)."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

import layerscope
from layerscope.analysis.memory_track import OPTIMIZERS
from layerscope.core.errors import UserError
from layerscope.core.options import OPTIMIZER_NAMES
from tests.helpers import run_cli

F32 = 4


def _kinds(report) -> dict[str, int]:
    return report.by_kind()


def _end_of_forward(report) -> int:
    """The live bytes after the forward's last op (the last event of phase forward)."""
    return [p.bytes for p in report.timeline if p.phase == "forward"][-1]


# ---- a hand-derived training step -----------------------------------------------------------
def test_mlp_adam_training_step_peak_by_hand():
    """Linear(64, 512) -> ReLU -> Linear(512, 16), no biases, batch 256, Adam, gradients kept
    (set_to_none=False), so params, gradients and both Adam states are alive all step.

    P (parameters) = (64*512 + 512*16) * 4 = 163,840 B; G (gradients) = P;
    S (Adam: exp_avg and exp_avg_sq per parameter, plus a 4-byte step tensor for each of the
    2 parameters) = 2P + 8 = 327,688; X (input 256x64) = 65,536; L (the batch's labels, one
    int64 a sample, as train holds them) = 2,048.
    Forward: mm -> h (256x512 = 524,288), relu -> r (524,288; h is freed: ReLU saves its
    result, Linear 2 saves r too, the same storage), mm -> out (256x16 = 16,384).
    At the end of forward: P + G + S + X + L + r + out = 1,263,624.
    Loss: cross-entropy (a classifier's (batch, classes) output): log_softmax (16,384, saved
    for backward) and the loss (4 B). Backward starts from a 4-byte one; the loss's backward
    frees log_softmax's output and its own gradients once Linear 2 has used them. Linear 2's
    input gradient g_r (524,288); its weight gradient (32 KB) is added into W2.grad and freed
    before ReLU's backward, which makes g_h (524,288) while g_r and the saved r are still
    alive. That is the peak, in backward: P + G + S + X + L + r + out + 4 + 4 + g_r + g_h =
    2,312,208. After it r and g_r are freed; Linear 1's weight gradient (128 KB) and Adam's
    per-parameter temporaries (2 x 128 KB at most) stay below it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 512, bias=False), nn.ReLU(),
                          nn.Linear(512, 16, bias=False))
    r = layerscope.memory(model, torch.zeros(256, 64), mode="training", optimizer="adam",
                          set_to_none=False)
    P = (64 * 512 + 512 * 16) * F32
    X, act, out = 256 * 64 * F32, 256 * 512 * F32, 256 * 16 * F32
    L = 256 * 8
    assert _end_of_forward(r) == P + P + (2 * P + 2 * F32) + X + L + act + out == 1_263_624
    assert r.peak_bytes == 2_312_208
    assert r.peak_phase == "backward"
    assert _kinds(r) == {"parameters": P, "gradients": P, "optimizer_state": 2 * P + 8,
                         "activations": act, "inputs": X + L, "outputs": out,
                         "temporaries": act + act + 4 + 4}
    rows = {(x.module, x.kind): x.bytes for x in r.by_module_kind}
    assert rows[("1", "activations")] == act  # ReLU's result, saved for backward
    assert rows[("0", "optimizer_state")] == 2 * 64 * 512 * F32 + F32
    assert rows[("(loss)", "temporaries")] == 4  # the loss
    assert rows[("", "temporaries")] == 4  # the one backward starts from


def test_sgd_without_momentum_has_no_state_and_gradients_are_freed_by_default():
    model = nn.Sequential(nn.Linear(64, 512, bias=False), nn.ReLU(),
                          nn.Linear(512, 16, bias=False))
    r = layerscope.memory(model, torch.zeros(256, 64), mode="training", optimizer="sgd")
    assert "optimizer_state" not in _kinds(r)
    # zero_grad(set_to_none=True) frees last step's gradients: none alive at forward's end
    P = (64 * 512 + 512 * 16) * F32
    assert _end_of_forward(r) == P + 256 * 64 * F32 + 256 * 8 + 256 * 512 * F32 + 256 * 16 * F32


# ---- a temporary freed early ----------------------------------------------------------------
class FreesEarly(nn.Module):
    def forward(self, x):  # x: 4 x 8
        t1 = x.repeat(1, 125)  # 4 x 1000: a large temporary
        s = t1.sum(dim=1, keepdim=True)
        del t1  # freed before the larger one is made
        t2 = x.repeat(1, 250)  # 4 x 2000
        return t2.mean(dim=1, keepdim=True) + s


def test_a_temporary_freed_early_is_not_in_the_peak():
    """X = 4x8x4 = 128; t1 = 16,000; s = 16; t2 = 32,000; the mean and the sum 16 each.
    The peak is at the add: X + s + t2 + mean + sum = 32,176, without t1 (48,176 with it).
    After forward the output (16) and the input are left."""
    r = layerscope.memory(FreesEarly(), torch.zeros(4, 8))
    assert r.peak_bytes == 128 + 16 + 32_000 + 16 + 16 == 32_176
    assert r.peak_phase == "forward"
    # start (twice: before the pass, at forward's start), repeat, sum, t1 freed as repeat
    # makes t2, mean, add, the end
    assert [p.bytes for p in r.timeline] == [128, 128, 128 + 16_000, 16_144, 128 + 16 + 32_000,
                                             32_160, 32_176, 128 + 16]
    assert all(x.bytes != 16_000 for x in r.by_module_kind)


class WritesIntoOut(nn.Module):
    def forward(self, x):  # x: 4 x 8
        buf = x.new_empty(0)  # 0 bytes
        torch.add(x, 1, out=buf)  # resized to 4 x 8 by the op
        return buf * 2


def test_a_storage_resized_by_an_out_argument_counts_its_new_size():
    """X = 128; buf 0 B, then 128 when add resizes it; the product 128: peak 384."""
    r = layerscope.memory(WritesIntoOut(), torch.zeros(4, 8))
    assert [p.bytes for p in r.timeline] == [128, 128, 128, 256, 384, 256]
    assert r.peak_bytes == 384
    assert sum(x.bytes for x in r.by_module_kind) == 384


# ---- checkpointing ------------------------------------------------------------------------
class Blocks(nn.Module):
    """Three blocks Linear(32, 256) -> ReLU -> Linear(256, 32), optionally checkpointed."""

    def __init__(self, checkpointed: bool):
        super().__init__()
        self.checkpointed = checkpointed
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(32, 256), nn.ReLU(),
                                                  nn.Linear(256, 32)) for _ in range(3))

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        return x


def test_checkpointed_blocks_save_only_their_inputs():
    """Batch 64. Unchanged, each block saves ReLU's result (64 x 256 x 4 = 65,536 B) and its
    input (for the first Linear's weight gradient: the model's input for block 0, counted as
    an input, and 64 x 32 x 4 = 8,192 B for blocks 1 and 2). Checkpointed, a block saves only
    its input and recomputes the rest in its backward: 3 x 65,536 B less is alive when forward
    ends, and the peak is lower (one block's recomputed activations at a time)."""
    x = torch.zeros(64, 32)
    plain = layerscope.memory(Blocks(False), x, mode="training", optimizer="sgd")
    ckpt = layerscope.memory(Blocks(True), x, mode="training", optimizer="sgd")
    assert _kinds(plain)["activations"] == 3 * 64 * 256 * F32 + 2 * 64 * 32 * F32
    assert _end_of_forward(plain) - _end_of_forward(ckpt) == 3 * 64 * 256 * F32
    assert ckpt.peak_bytes < plain.peak_bytes


# ---- invariants ---------------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.parametrize("spec,mode,batch", [
    ("mnist-cnn", "inference", 4), ("mnist-cnn", "training", 4),
    ("resnet20", "training", 2), ("resnet18", "inference", 1),
    ("gpt2", "inference", 1),
], ids=lambda v: str(v))
def test_the_rows_sum_to_the_peak(spec, mode, batch):
    kwargs = {"seq_len": 32} if spec == "gpt2" else {}
    r = layerscope.memory(spec, mode=mode, batch_size=batch, **kwargs)
    assert sum(x.bytes for x in r.by_module_kind) == r.peak_bytes
    assert r.peak_bytes == max(p.bytes for p in r.timeline) == r.timeline[r.peak_t].bytes
    assert r.peak_phase == r.timeline[r.peak_t].phase
    assert len({(x.module, x.kind) for x in r.by_module_kind}) == len(r.by_module_kind)


def test_the_optimizer_names_are_analyze_s():  # and adadelta (a train recipe's)
    assert tuple(OPTIMIZERS) == OPTIMIZER_NAMES + ("adadelta",)


def test_momentum_keeps_one_state_per_parameter():
    model = nn.Linear(100, 100, bias=False)
    r = layerscope.memory(model, torch.zeros(2, 100), mode="training", optimizer="momentum",
                          set_to_none=False)
    assert _kinds(r)["optimizer_state"] == 100 * 100 * F32


def test_your_own_optimizer_factory():
    model = nn.Linear(100, 100, bias=False)
    r = layerscope.memory(model, torch.zeros(2, 100), mode="training",
                          optimizer=lambda ps: torch.optim.Adagrad(ps, lr=0.1))
    # Adagrad: a sum per parameter and a 4-byte step tensor
    assert _kinds(r)["optimizer_state"] == 100 * 100 * F32 + F32
    assert r.optimizer == "custom"


# ---- static vs measured --------------------------------------------------------------------
def _within(report, share: float) -> None:
    rec = report.reconciliation
    assert rec.static_peak_bytes == report.peak_bytes
    assert rec.measured_peak_bytes == report.measured_peak_bytes
    assert abs(rec.difference) <= share * report.peak_bytes


def test_measured_cpu_peak_matches_the_static_one_mnist():
    r = layerscope.memory("mnist-cnn", mode="training", batch_size=2, measure=True)
    _within(r, 0.05)


# torchvision classifiers of every family small enough to measure a training step at batch 8
# in a minute or two on a shared CPU (the larger members of each family run the same ops)
TORCHVISION_AT_8 = ["alexnet", "convnext_tiny", "densenet121", "efficientnet_b0",
                    "efficientnet_v2_s", "googlenet", "inception_v3", "maxvit_t", "mnasnet0_5",
                    "mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small", "regnet_x_400mf",
                    "regnet_y_400mf", "resnet18", "resnet50", "shufflenet_v2_x0_5",
                    "squeezenet1_0", "squeezenet1_1", "swin_t", "swin_v2_t", "vgg11", "vit_b_32"]


@pytest.mark.slow
@pytest.mark.parametrize("spec", TORCHVISION_AT_8)
def test_measured_cpu_peak_matches_the_static_one_torchvision(spec):
    r = layerscope.memory(spec, mode="training", batch_size=8, measure=True)
    _within(r, 0.05)
    assert sum(x.bytes for x in r.by_module_kind) == r.peak_bytes


# ---- the user's model ----------------------------------------------------------------------
def test_the_model_is_left_as_it_was():
    from torch.nn.modules import module as nn_module
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))
    model.eval()
    before = {n: (t, t.detach().clone()) for n, t in
              list(model.named_parameters()) + list(model.named_buffers())}
    for measure in (False, True):
        layerscope.memory(model, torch.ones(4, 8), mode="training", measure=measure)
    after = dict(list(model.named_parameters()) + list(model.named_buffers()))
    assert after.keys() == before.keys()
    for name, (t, values) in before.items():
        assert after[name] is t and torch.equal(t, values)
        assert t.grad is None
    assert not model.training and not any(m.training for m in model.modules())
    assert not nn_module._global_forward_hooks and not nn_module._global_forward_pre_hooks
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert _get_current_dispatch_mode_stack() == []


class FailsInBackward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        y.register_hook(self._fail)
        return y

    @staticmethod
    def _fail(grad):
        raise RuntimeError("boom in backward")


def test_a_model_failing_mid_step_is_one_line_and_left_as_it_was():
    from torch.nn.modules import module as nn_module
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    model = FailsInBackward()
    weight = model.lin.weight
    with pytest.raises(UserError, match="boom in backward"):
        layerscope.memory(model, torch.zeros(2, 4), mode="training")
    assert model.lin.weight is weight and weight.grad is None and model.training
    assert not nn_module._global_forward_hooks and not nn_module._global_forward_pre_hooks
    assert _get_current_dispatch_mode_stack() == [] and torch.is_grad_enabled()


# ---- bad input ---------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,words", [
    ({"mode": "train"}, "unknown mode 'train'"),
    ({"optimizer": "lion"}, "unknown optimizer 'lion'"),
    ({"optimizer": lambda ps: 3, "mode": "training"}, "must return a torch.optim.Optimizer"),
], ids=["mode", "optimizer", "factory"])
def test_bad_arguments_are_one_line(kwargs, words):
    with pytest.raises(UserError, match=words):
        layerscope.memory(nn.Linear(2, 2), torch.zeros(1, 2), **kwargs)


def test_frozen_model_in_training_is_refused():
    model = nn.Linear(2, 2).requires_grad_(False)
    with pytest.raises(UserError, match="no parameter of the model requires a gradient"):
        layerscope.memory(model, torch.zeros(1, 2), mode="training")


# (model, measure, the refusal): a step that runs for real (measure, or a forward that needs
# real values) refuses weights on no real device, in its own words
@pytest.mark.parametrize("model,measure,words", [
    (lambda: nn.Linear(8, 8, device="meta"), True, "measure runs the step on the CPU"),
    (lambda: _CausalMaskCheck().to("meta"), False,
     "the static run cannot track this model: the forward needs real values"),
    (lambda: _CausalMaskCheck().to("meta"), True,
     "the static run cannot track this model: the forward needs real values"),
], ids=["measure", "needs-real-values", "needs-real-values-measure"])
def test_weights_on_the_meta_device_are_refused_when_the_step_runs_for_real(model, measure,
                                                                           words):
    with pytest.raises(UserError, match=words):
        layerscope.memory(model(), "4x8", measure=measure)


# ---- the command ----------------------------------------------------------------------------
def test_cli_writes_table_json_csv_html_and_png(tmp_path):
    code, out, err = run_cli("memory", "mnist-cnn", "--mode", "training", "--width", "120")
    assert code == 0, err
    assert "alive at the peak" in out and "optimizer_state" in out
    assert "Highest per phase" in out and "Backward" in out
    js, csv, html, png = (tmp_path / n for n in ("m.json", "m.csv", "m.html", "m.png"))
    code, _, err = run_cli("memory", "mnist-cnn", "-o", str(js), "--html", str(html),
                           "--plot", str(png))
    assert code == 0, err
    saved = json.loads(js.read_text())
    assert saved["kind"] == "memory" and saved["peak_bytes"] == sum(
        x["bytes"] for x in saved["by_module_kind"])
    assert layerscope.load(js).peak_bytes == saved["peak_bytes"]
    assert "<svg" in html.read_text() and png.read_bytes()[:4] == b"\x89PNG"
    code, _, err = run_cli("memory", "mnist-cnn", "-o", str(csv))
    assert code == 0, err
    assert csv.read_text().splitlines()[0] == "module,kind,bytes,share_of_peak"


@pytest.mark.integration
@pytest.mark.parametrize("argv,words", [
    (["memory", "mnist-cnn", "--optimizer", "lion"], "--optimizer: invalid choice"),
    (["memory", "mnist-cnn", "--zero-grad", "maybe"], "--zero-grad: invalid choice"),
    (["memory", "no-such-model"], "no-such-model"),
    (["memory", "mnist-cnn", "--input", "1x3x5x5"], "rejected input"),
    (["memory", "llama-3-8b", "--measure"], "--measure would allocate"),
], ids=["optimizer", "zero-grad", "model", "input", "measure-too-large"])
def test_cli_bad_input_is_one_line_exit_2(argv, words):
    code, out, err = run_cli(*argv)
    assert code == 2 and out == ""
    assert words in err and len(err.strip().splitlines()) == 1


class _CausalMaskCheck(nn.Module):
    """The shape of nn.TransformerEncoder's causal-mask check (torch.equal on a mask it built):
    a bool from tensor values, which fake tensors cannot give."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        mask = torch.triu(torch.ones(x.shape[0], x.shape[0]), diagonal=1)
        h = self.fc(x)
        return h * 2 if torch.equal(mask, torch.zeros_like(mask)) else h + 1


@pytest.mark.parametrize("mode", ["inference", "training"])
def test_a_forward_needing_real_values_runs_for_real_and_says_so(mode):
    """Not refused: the step runs for real on the CPU (as analyze falls back), the rows still sum
    to the peak, the peak equals --measure's, and the first note says it is measured."""
    model = _CausalMaskCheck()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    r = layerscope.memory(model, "4x8", mode=mode, measure=True)
    assert r.settings["ran"] == "real"
    assert r.notes[0].startswith("measured, not static: the forward needs real values")
    assert sum(row.bytes for row in r.by_module_kind) == r.peak_bytes > 0
    assert r.measured_peak_bytes == r.peak_bytes
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


_REAL_FORWARDS: list = []  # kept outside the model: what a forward writes into the model
#                             does not outlive the tracked step


class _CountedMaskCheck(_CausalMaskCheck):
    """``_CausalMaskCheck`` counting its forwards that ran for real in ``_REAL_FORWARDS`` (the
    fake run stops at torch.equal, before the count)."""

    def forward(self, x):
        out = super().forward(x)
        _REAL_FORWARDS.append(x.shape)
        return out


# (mode, measure, forwards run for real): a training step is tracked after one untracked
# step (the optimizer's state exists), so 2 forwards a training step, 1 an inference pass;
# with measure the one measured step also gives the figures the static run could not
@pytest.mark.parametrize("mode,measure,calls", [
    ("inference", False, 1), ("inference", True, 1),
    ("training", False, 2), ("training", True, 2),
], ids=["inference", "inference-measure", "training", "training-measure"])
def test_a_forward_needing_real_values_runs_one_real_step(mode, measure, calls):
    _REAL_FORWARDS.clear()
    r = layerscope.memory(_CountedMaskCheck(), "4x8", mode=mode, measure=measure)
    assert len(_REAL_FORWARDS) == calls
    assert r.settings["ran"] == "real"
    if measure:
        assert r.reconciliation.difference == 0
        assert r.reconciliation.measured_peak_bytes == r.peak_bytes


def test_fit_of_a_forward_needing_real_values_is_one_line():
    with pytest.raises(UserError, match=r"needs real values .*fit traces the step at other "
                                        r"batch sizes on fake tensors"):
        layerscope.memory(_CausalMaskCheck(), "4x8", fit="1GB")
