"""The reference workflows end to end: export then verify, a trained run analysed, the same
model in every command."""
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


@pytest.mark.integration
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


# ------------------------------------------------------------ papercuts
def test_activations_never_cut_names_when_not_a_terminal():
    # googlenet's deepest names are 26 characters; rich's 80-column default cut them before
    code, out, _ = run_cli("activations", "googlenet", "--layers", "inception4a.branch2.*")
    assert code == 0
    for name in ("inception4a.branch2.0.conv", "inception4a.branch2.1.conv"):
        assert name in out
    assert "…" not in out


def _graph_with_trivial_nodes(tmp_path) -> str:
    """x -> Identity -> Add(Constant) -> Relu -> Identity -> y: 2 real ops, 3 trivial nodes."""
    import numpy as np
    from onnx import helper, numpy_helper

    from tests.onnx_graphs import model, save, tensor

    nodes = [helper.make_node("Identity", ["x"], ["a"], name="id0"),
             helper.make_node("Constant", [], ["c"], name="const",
                              value=numpy_helper.from_array(np.ones(4, np.float32))),
             helper.make_node("Add", ["a", "c"], ["b"], name="add"),
             helper.make_node("Relu", ["b"], ["r"], name="relu"),
             helper.make_node("Identity", ["r"], ["y"], name="id1")]
    return save(model(nodes, [tensor("x", [1, 4])], [tensor("y", [1, 4])]), tmp_path)


def test_ops_view_counts_trivial_nodes_apart_and_can_skip_them(tmp_path):
    path = _graph_with_trivial_nodes(tmp_path)
    code, out, _ = run_cli("analyze", path, "--view", "ops")
    assert code == 0
    assert "Total operators: 5" in out
    assert "Of these, 3 are Constant/Identity nodes (no arithmetic); 2 without them" in out
    code, out, _ = run_cli("analyze", path, "--view", "ops", "--skip-trivial")
    assert code == 0 and "Total operators: 2; unique: 2 (Add, Relu)" in out
    assert "Showing 2 of 5 nodes (without Constant/Identity)" in out


def test_attributes_view_op_filter(tmp_path):
    path = _graph_with_trivial_nodes(tmp_path)
    code, out, _ = run_cli("analyze", path, "--view", "attributes", "--op-type", "Add|Relu")
    names = [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│")]
    assert code == 0 and names == ["add", "relu"]
    assert "Showing 2 of 5 nodes (op type matching 'Add|Relu')" in out


@pytest.mark.parametrize("argv,expected", [
    pytest.param(["--view", "ops", "--op-type", "("], "not a valid regular expression",
                 id="bad-regex"),
    pytest.param(["--op-type", "Add"], "select the rows of the views", id="layers-view"),
    pytest.param(["--view", "ops", "--skip-trivial", "--format", "json"],
                 "stay the full report", id="json"),
])
def test_row_selection_bad_input(tmp_path, argv, expected):
    code, _, err = run_cli("analyze", _graph_with_trivial_nodes(tmp_path), *argv)
    assert code == 2 and expected in err, err


def test_analyze_table_has_an_input_shape_column():
    code, out, _ = run_cli("analyze", "mnist-cnn", "--width", "200")
    header = next(line for line in out.splitlines() if "Layer" in line)
    assert "Input shape" in header
    conv2 = next(line for line in out.splitlines() if line.startswith("│conv2 "))
    assert "1x32x26x26" in conv2 and "1x64x24x24" in conv2  # conv2's input and output


def test_torchscript_file_analysed_without_a_copy_counts_the_same(tmp_path, monkeypatch):
    """A TorchScript file loaded by the analysis is used as it is (copying it through
    torch.jit.save/load was most of the time: AlexNet 6.5 s -> 1.5 s); a module passed in is
    still copied. Both give the same rows and totals."""
    import layerscope
    from layerscope.analysis.capture import real

    path = tmp_path / "m.pt"
    torch.jit.save(torch.jit.script(zoo.MnistCNN()), str(path))
    copies = []
    real_copy = real.script_copy
    monkeypatch.setattr(real, "script_copy", lambda m: copies.append(m) or real_copy(m))
    from_file = layerscope.analyze(str(path), inputs=(1, 1, 28, 28))
    assert copies == []
    from_module = layerscope.analyze(torch.jit.load(str(path)), inputs=(1, 1, 28, 28))
    assert len(copies) == 1
    assert from_file.totals == from_module.totals
    assert [r.to_dict() for r in from_file.layers] == [r.to_dict() for r in from_module.layers]
