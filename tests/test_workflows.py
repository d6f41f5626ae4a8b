"""The reference workflows end to end: export then verify, a trained run analysed, the same
model in every command (issue 16)."""
from __future__ import annotations

import json

import pytest
import torch

from layerscope.frontends import zoo
from layerscope.frontends.torch_module import resolve
from tests.helpers import run_cli


def _weights(module):
    return [t.detach().clone() for t in module.state_dict().values()]


def test_builtin_models_are_built_from_one_seed_and_leave_the_global_rng_alone():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a, b = resolve("resnet20").module, resolve("resnet20").module
    other = resolve("resnet20", seed=1).module
    assert torch.equal(torch.get_rng_state(), before)  # fork_rng: the caller's stream untouched
    assert all(torch.equal(x, y) for x, y in zip(_weights(a), _weights(b)))
    assert not torch.equal(a.conv1.weight, other.conv1.weight)


def test_factories_are_built_under_the_seed_too():
    one = resolve("tests.models:tiny_with_example").module
    two = resolve("tests.models:tiny_with_example").module
    assert all(torch.equal(x, y) for x, y in zip(_weights(one), _weights(two)))


def test_activations_repeat_exactly():
    from layerscope.analysis.activations import activations

    first = activations("mnist-cnn", layers="fc2", seed=3)
    second = activations("mnist-cnn", layers="fc2", seed=3)
    assert all((first.arrays[k] == second.arrays[k]).all() for k in first.arrays)


def test_export_twice_is_byte_identical_and_verifies(tmp_path):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    for path in (a, b):
        code, _, err = run_cli("export", "mnist-cnn", "-o", str(path))
        assert code == 0, err
    assert a.read_bytes() == b.read_bytes()
    code, out, _ = run_cli("verify", "mnist-cnn", str(a), "--format", "json")
    assert code == 0 and json.loads(out)["ok"]


# ------------------------------------------------------------ trained models everywhere
@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "run"
    code, _, err = run_cli("train", "digits-cnn", "--epochs", "1", "--threads", "1",
                           "--out", str(out))
    assert code == 0, err
    return out


def test_run_folder_and_its_files_load_the_trained_weights(digits_run):
    from layerscope.training import checkpoint as ckpt

    trained = ckpt.load(str(digits_run / "model.pt"))["model"]
    for spec in (digits_run, digits_run / "model.pt", digits_run / "checkpoints" / "last.pt"):
        loaded = resolve(str(spec))
        assert loaded.frontend == "torch" and loaded.extras["recipe"] == "digits-cnn"
        assert [x.shape for x in loaded.inputs] == [(1, 1, 8, 8)]  # digits: 1x8x8 images
        assert all(torch.equal(loaded.module.state_dict()[k], v) for k, v in trained.items())


@pytest.mark.parametrize("argv", [
    pytest.param(["analyze", "{run}"], id="analyze"),
    pytest.param(["analyze", "{run}/model.pt"], id="analyze-model.pt"),
    pytest.param(["profile", "{run}", "--runs", "5", "--warmup", "1"], id="profile"),
    pytest.param(["ops", "{run}", "--runs", "2", "--warmup", "1"], id="ops"),
])
def test_commands_accept_a_run_folder(digits_run, argv):
    code, out, err = run_cli(*[a.format(run=digits_run) for a in argv], "--format", "json")
    assert code == 0, err
    assert json.loads(out)


def test_digits_cnn_params_from_the_run_folder(digits_run):
    # conv1 1*16*9+16 = 160, conv2 16*32*9+32 = 4,640, fc1 512*64+64 = 32,832, fc2 64*10+10 = 650
    code, out, _ = run_cli("analyze", str(digits_run), "--format", "json")
    assert json.loads(out)["totals"]["params"] == 160 + 4640 + 32832 + 650


@pytest.mark.parametrize("make,expected", [
    pytest.param(lambda p: p.mkdir(), "not a training run folder", id="empty-directory"),
    pytest.param(lambda p: torch.save({"weights": torch.zeros(2)}, p),
                 "not a layerscope checkpoint", id="torch-save-without-config"),
    pytest.param(lambda p: p.write_text("hello"), "neither a TorchScript file", id="text-file"),
])
def test_not_a_model_file(tmp_path, make, expected):
    path = tmp_path / "thing.pt"
    make(path)
    code, _, err = run_cli("analyze", str(path))
    assert code == 2 and expected in err, err


def test_torchscript_files_are_still_torchscript(tmp_path):
    path = tmp_path / "m.pt"
    torch.jit.save(torch.jit.script(zoo.MnistCNN()), str(path))
    assert resolve(str(path)).frontend == "torchscript"
