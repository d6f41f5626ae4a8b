"""A model's own ``train()`` and ``eval()`` are its methods, not layerscope's switches.

pytorch/examples' forward-forward defines ``Layer.train(x_pos, x_neg)`` (it trains the layer) on
an ``nn.Linear`` subclass, and ``Net.train(x_pos, x_neg)`` on the model; a model may also have an
``eval(loader)`` that evaluates it. Every analysis that puts a model in eval or training mode
sets the ``training`` flags itself, as ``nn.Module.train`` does, never through those methods
(only an override with ``nn.Module.train``'s own signature, ``train(self, mode=True)``, is the
model's mode switch and is used);
and every flag comes back as it was (here the model mixes train and eval submodules)."""
import pytest
import torch
import torch.nn as nn

import layerscope

CALLED = []


class Layer(nn.Linear):
    """forward-forward's layer: ``train`` is a training routine with two required arguments."""

    def forward(self, x):
        x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return torch.relu(torch.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

    def train(self, x_pos, x_neg):
        CALLED.append((type(self).__name__, "train"))
        raise AssertionError("the model's own train() was called")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer(12, 8), Layer(8, 4)])
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.drop(x)

    def train(self, x_pos, x_neg):
        CALLED.append(("Net", "train"))
        raise AssertionError("the model's own train() was called")

    def eval(self, loader):
        CALLED.append(("Net", "eval"))
        raise AssertionError("the model's own eval() was called")


def _model():
    torch.manual_seed(0)
    net = Net()
    net.training = True  # mixed flags: each must come back as it was
    net.layers[1].training = False
    return net


CASES = [
    ("analyze", lambda m: layerscope.analyze(m, inputs=["2x12"])),
    ("analyze-training", lambda m: layerscope.analyze(m, inputs=["2x12"], mode="training")),
    ("analyze-real-run", lambda m: layerscope.analyze(m, inputs=[torch.randn(2, 12)])),
    ("profile", lambda m: layerscope.profile(m, inputs=["2x12"], runs=2, warmup=1,
                                             roofline=False)),
    ("ops", lambda m: layerscope.ops(m, inputs=["2x12"], runs=1, warmup=1)),
    ("memory", lambda m: layerscope.memory(m, ["2x12"])),
    ("memory-training", lambda m: layerscope.memory(m, ["2x12"], mode="training")),
    ("activations", lambda m: layerscope.activations(m, ["2x12"])),
    ("sweep", lambda m: _sweep(m)),
]


def _sweep(model):
    report = layerscope.sweep(model, ["2x12"], runs=2, warmup=1)
    assert [c.error for c in report.cells if c.status != "ok"] == []  # a failed cell says why


@pytest.mark.parametrize("run", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_the_models_train_and_eval_are_never_called_and_flags_come_back(run):
    model = _model()
    before = [(name, m.training) for name, m in model.named_modules()]
    CALLED.clear()
    run(model)
    assert CALLED == []
    assert [(name, m.training) for name, m in model.named_modules()] == before


def test_the_command_line_analyses_a_forward_forward_model(tmp_path, monkeypatch):
    """``analyze``/``memory`` of a model file shaped like the example: the report, exit 0."""
    from layerscope.cli.main import main

    (tmp_path / "ff.py").write_text(
        "import torch.nn as nn\n"
        "class Layer(nn.Linear):\n"
        "    def train(self, x_pos, x_neg):\n"
        "        raise AssertionError('called')\n"
        "class Net(nn.Sequential):\n"
        "    def train(self, x_pos, x_neg):\n"
        "        raise AssertionError('called')\n"
        "def make():\n"
        "    return Net(Layer(12, 8), nn.ReLU(), Layer(8, 4))\n")
    monkeypatch.chdir(tmp_path)
    for command in (["analyze"], ["memory", "--mode", "training"]):
        assert main([*command, "ff.py:make", "--input", "2x12", "--format", "json",
                     "-o", "r.json"]) == 0
        assert (tmp_path / "r.json").stat().st_size > 0


class FrozenNormBackbone(nn.Module):
    """A detection backbone's override with ``nn.Module.train``'s signature: its BatchNorm
    stays in eval mode while the rest trains. It is the model's mode switch, and is used."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(self.conv(x))

    def train(self, mode=True):
        super().train(mode)
        self.bn.eval()
        return self


class SelfTraining(nn.Sequential):
    """``train(epochs=1)``: a training routine, not a mode switch; never called."""

    def train(self, epochs=1):
        CALLED.append(("SelfTraining", "train"))
        raise AssertionError("the model's own train() was called")


def test_an_override_with_the_mode_signature_is_the_models_mode_switch():
    from layerscope.analysis import modes

    model = nn.Sequential(FrozenNormBackbone(), SelfTraining(nn.Linear(2, 2), nn.Dropout()))
    for m in model.modules():  # (model.eval() would call SelfTraining.train(False))
        m.training = False
    CALLED.clear()
    saved = modes.set_mode(model, True)
    backbone, head = model[0], model[1]
    # (module, flag) in training mode: the backbone's BatchNorm kept in eval by its override
    assert [(type(m).__name__, m.training) for m in model.modules()] == [
        ("Sequential", True), ("FrozenNormBackbone", True), ("Conv2d", True),
        ("BatchNorm2d", False), ("SelfTraining", True), ("Linear", True), ("Dropout", True)]
    assert CALLED == [] and backbone.conv.training and head[1].training
    modes.restore(saved)
    assert [m.training for m in model.modules()] == [False] * 7
