"""layerscope memory on models written the way users write them (none is layerscope's own): the
static peak equals the measured CPU peak of tensor storage within 5%, the module x kind rows sum
to the peak exactly, the model is left as it was, and what cannot be tracked is refused in one
line."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

import layerscope
from layerscope.core.errors import UserError

BAR = 0.05  # the measured peak is within this share of the static one


class InplaceReluBN(nn.Module):
    """torchvision's conv-bn-relu pattern on vectors: BatchNorm's running buffers, an in-place
    ReLU overwriting the BatchNorm output it is given."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 256)
        self.bn = nn.BatchNorm1d(256)
        self.relu = nn.ReLU(inplace=True)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        return self.fc2(self.relu(self.bn(self.fc1(x))))


class TiedLM(nn.Module):
    """nanoGPT's weight tying: the head shares the embedding's weight."""

    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(500, 64)
        self.head = nn.Linear(64, 500, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx):
        return self.head(self.wte(idx))


class RunningStats(nn.Module):
    """Buffers updated in forward: one in place, one rebound to a new tensor."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(32, 32)
        self.register_buffer("count", torch.zeros(()))
        self.register_buffer("ema", torch.zeros(32))

    def forward(self, x):
        self.count += 1
        self.ema = 0.9 * self.ema + 0.1 * x.detach().mean(0)
        return self.lin(x) + self.ema


class Checkpointed(nn.Module):
    def __init__(self, reentrant: bool):
        super().__init__()
        self.reentrant = reentrant
        self.stem = nn.Linear(64, 128)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(128, 512), nn.GELU(),
                                                  nn.Linear(512, 128)) for _ in range(3))

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=self.reentrant)
        return x


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(64, 4, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x)[0]


class Recurrent(nn.Module):
    def __init__(self, cell=nn.GRU):
        super().__init__()
        self.rnn = cell(32, 64, num_layers=2, batch_first=True)
        self.head = nn.Linear(64, 5)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


class Bag(nn.Module):
    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(1000, 32, mode="mean")
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.bag(x))


class DictOut(nn.Module):
    """A Hugging Face-style output: a dict holding a tensor and a tuple of tensors."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 4)

    def forward(self, x):
        h = self.a(x)
        return {"logits": self.b(h), "aux": (h.sum(1), h.mean())}


def _tiny_hf_llama():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=128,
                                      tie_word_embeddings=True)
    return transformers.AutoModelForCausalLM.from_config(config)


MODELS = {
    "inplace-relu-batchnorm": (InplaceReluBN, lambda: torch.randn(8, 64)),
    "weight-tying": (TiedLM, lambda: torch.randint(0, 500, (8, 20))),
    "buffer-updated-in-forward": (RunningStats, lambda: torch.randn(8, 32)),
    "checkpoint-reentrant": (lambda: Checkpointed(True), lambda: torch.randn(8, 64)),
    "checkpoint-non-reentrant": (lambda: Checkpointed(False), lambda: torch.randn(8, 64)),
    "multihead-attention": (Attention, lambda: torch.randn(8, 10, 64)),
    "gru": (Recurrent, lambda: torch.randn(8, 12, 32)),
    "embedding-bag": (Bag, lambda: torch.randint(0, 1000, (8, 6))),
    "dict-and-tuple-output": (DictOut, lambda: torch.randn(8, 16)),
    "hf-llama-from-config": (_tiny_hf_llama, lambda: torch.randint(0, 256, (2, 32))),
}


def _checked(report) -> None:
    assert sum(r.bytes for r in report.by_module_kind) == report.peak_bytes
    assert abs(report.measured_peak_bytes - report.peak_bytes) <= BAR * report.peak_bytes


@pytest.mark.integration
@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad")
@pytest.mark.parametrize("mode", ["training", "inference"])
@pytest.mark.parametrize("name", list(MODELS))
def test_static_peak_is_the_measured_one_and_rows_sum_to_it(name, mode):
    make, example = MODELS[name]
    torch.manual_seed(0)
    _checked(layerscope.memory(make(), example(), mode=mode, measure=True))


def test_buffers_updated_in_forward_are_left_as_they_were():
    model = RunningStats()
    count, ema = model.count, model.ema
    for measure in (False, True):
        layerscope.memory(model, torch.randn(8, 32), mode="training", measure=measure)
    assert model.count is count and model.ema is ema
    assert float(count) == 0 and not ema.any()


def test_lstm_training_is_refused_in_one_line():
    """On the CPU an LSTM runs oneDNN's kernel, whose workspace kept for backward the fake
    kernel sizes as empty: the static training peak would be silently low (by 55% here)."""
    model = Recurrent(nn.LSTM)
    weight = model.rnn.weight_ih_l0
    with pytest.raises(UserError, match="LSTM.*workspace") as err:
        layerscope.memory(model, torch.randn(8, 12, 32), mode="training")
    assert "\n" not in str(err.value) and err.value.arguments == ("mode",)
    assert model.rnn.weight_ih_l0 is weight and weight.grad is None and model.training
    assert torch.is_grad_enabled()
    _checked(layerscope.memory(model, torch.randn(8, 12, 32), mode="inference", measure=True))


def test_a_model_from_a_file_factory(tmp_path):
    path = tmp_path / "net.py"
    path.write_text(
        "import torch.nn as nn\n\n\n"
        "def build():\n"
        "    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(inplace=True),\n"
        "                         nn.Flatten(), nn.Linear(8 * 14 * 14, 10))\n")
    report = layerscope.memory(f"{path}:build", [(4, 3, 16, 16)], mode="training", measure=True)
    _checked(report)


def test_an_optimizer_over_the_user_s_own_parameters_is_refused_and_left_as_it_was():
    """A factory returning the optimizer the user already made steps the user's parameters,
    not the run's private copies: its zero_grad cleared the user's gradients and the figures
    had no gradients in them."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    grads = [p.grad.clone() for p in model.parameters()]
    values = [p.detach().clone() for p in model.parameters()]
    state = {k: v["exp_avg"].clone() for k, v in opt.state_dict()["state"].items()}
    for measure in (False, True):
        with pytest.raises(UserError, match="over other tensors") as err:
            layerscope.memory(model, torch.ones(4, 8), mode="training", measure=measure,
                              optimizer=lambda ps: opt)
        assert err.value.arguments == ("optimizer",)
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads))
    assert all(torch.equal(p, v) for p, v in zip(model.parameters(), values))
    assert all(torch.equal(opt.state_dict()["state"][k]["exp_avg"], v) for k, v in state.items())
    report = layerscope.memory(model, torch.ones(4, 8), mode="training",
                               optimizer=lambda ps: torch.optim.Adam(ps, lr=1e-3))
    assert report.by_kind()["gradients"] == sum(p.numel() for p in model.parameters()) * 4
