"""The activation-memory figures users compare with: torchinfo's
"Forward/backward pass size" reproduced exactly, and the plain sum of layer outputs."""
from __future__ import annotations

import json

import pytest

import layerscope
from tests.helpers import run_cli

# AlexNet leaf-layer outputs per sample (elements): conv1 64*55*55 = 193,600 (ReLU the same),
# pool 64*27*27 = 46,656; conv2 192*27*27 = 139,968 (ReLU), pool 192*13*13 = 32,448;
# conv3 384*13*13 = 64,896 (ReLU); conv4 and conv5 256*13*13 = 43,264 (each + ReLU);
# pool and avgpool 256*6*6 = 9,216; classifier: dropout 9,216, fc 4,096, ReLU 4,096,
# dropout 4,096, fc 4,096, ReLU 4,096, fc 1,000.
ALEXNET_LAYERS_WITH_PARAMS = 193600 + 139968 + 64896 + 43264 + 43264 + 4096 + 4096 + 1000
ALEXNET_ALL_LEAVES = (2 * 193600 + 46656 + 2 * 139968 + 32448 + 2 * 64896 + 4 * 43264
                      + 3 * 9216 + 5 * 4096 + 1000)
# mnist-cnn: conv1 32*26*26 = 21,632, conv2 64*24*24 = 36,864, fc1 128, fc2 10 have parameters;
# dropout1 after the 2x2 max-pool 64*12*12 = 9,216, dropout2 128 do not (ReLUs are functional).
MNIST_WITH_PARAMS = 21632 + 36864 + 128 + 10
MNIST_ALL_LEAVES = MNIST_WITH_PARAMS + 9216 + 128


@pytest.mark.parametrize("model,layer_outputs,torchinfo_pass", [
    ("alexnet", 4 * ALEXNET_ALL_LEAVES, 2 * 4 * ALEXNET_LAYERS_WITH_PARAMS),
    ("mnist-cnn", 4 * MNIST_ALL_LEAVES, 2 * 4 * MNIST_WITH_PARAMS),
], ids=["alexnet", "mnist-cnn"])
def test_hand_derived_figures(model, layer_outputs, torchinfo_pass):
    t = layerscope.analyze(model).totals
    assert t.layer_output_bytes == layer_outputs
    assert t.torchinfo_pass_bytes == torchinfo_pass


def test_alexnet_as_people_sum_it():
    assert 4 * ALEXNET_ALL_LEAVES == 4_392_864  # the figure quoted in the issue
    code, out, _ = run_cli("analyze", "alexnet", "--width", "200")
    assert code == 0
    assert "Sum of layer outputs: 4,392,864 B (4.39 MB)" in out
    assert "Forward/backward pass size (MB): 3.95   (torchinfo:" in out
    code, out, _ = run_cli("analyze", "alexnet", "--format", "json")
    totals = json.loads(out)["totals"]
    assert totals["layer_output_bytes"] == 4_392_864 and totals["torchinfo_pass_bytes"] == 3_953_472


def test_figures_are_none_where_no_layer_outputs_are_seen(tmp_path):
    import torch

    from layerscope.frontends import zoo

    path = tmp_path / "m.pt"
    torch.jit.save(torch.jit.script(zoo.MnistCNN()), str(path))
    t = layerscope.analyze(str(path), inputs=(1, 1, 28, 28)).totals
    assert t.layer_output_bytes is None and t.torchinfo_pass_bytes is None


@pytest.mark.parametrize("model", ["alexnet", "googlenet", "resnet18", "mnist-cnn"])
def test_matches_torchinfo(model):
    torchinfo = pytest.importorskip("torchinfo")
    from layerscope.frontends.torch_module import resolve

    loaded = resolve(model)
    summary = torchinfo.summary(loaded.module, input_size=loaded.inputs[0].shape, verbose=0)
    assert layerscope.analyze(model).totals.torchinfo_pass_bytes == summary.total_output_bytes
