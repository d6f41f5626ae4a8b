"""Model specs, default inputs, meta-device models, and leaving the model as it was."""
import copy
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import layerscope
from layerscope.core.errors import UserError
from layerscope.frontends import zoo

TINY_MACS = 2 * 8 * 8 * 8 * 3 * 3 * 3 + 2 * 512 * 10  # conv N*Cout*H*W*Cin*k*k + fc N*In*Out


def test_file_factory_spec(tmp_path):
    path = tmp_path / "net.py"
    path.write_text("import torch.nn as nn\n"
                    "def build():\n    return nn.Sequential(nn.Linear(4, 3))\n")
    report = layerscope.analyze(f"{path}:build", inputs=(5, 4))
    assert report.totals.macs == 5 * 4 * 3  # rows x in x out


def test_module_factory_with_example_inputs():
    report = layerscope.analyze("tests.models:tiny_with_example")
    assert report.inputs == [{"shape": [2, 3, 8, 8], "dtype": "float32"}]
    assert report.totals.macs == TINY_MACS


def test_batch_size_overrides_first_dimension():
    report = layerscope.analyze("tests.models:tiny_with_example", batch_size=6)
    assert report.inputs[0]["shape"] == [6, 3, 8, 8]
    assert report.totals.macs == 3 * TINY_MACS


@pytest.mark.parametrize("name,shape", [("resnet20", [1, 3, 32, 32]), ("mnist-cnn", [1, 1, 28, 28]),
                                        ("resnet50", [1, 3, 224, 224]),
                                        ("inception_v3", [1, 3, 299, 299])])
def test_builtin_default_inputs(name, shape):
    assert [1, *zoo.lookup(name).input_shape] == shape


def test_resnet20_architecture():
    # 3x3 stem (16) + 3 stages x 3 blocks x 2 convs, two 1x1 projection shortcuts, fc 64->10.
    m = zoo.lookup("resnet20").build()
    convs = [c for c in m.modules() if isinstance(c, nn.Conv2d)]
    assert len(convs) == 1 + 18 + 2
    assert sum(p.numel() for p in m.parameters()) == 272_474
    report = layerscope.analyze("resnet20")
    # stem 16*3*9*32^2; stage1 6 convs 16*16*9*32^2; stage2 first conv 32*16*9*16^2, five more
    # 32*32*9*16^2, projection 32*16*16^2; stage3 likewise at 8x8; fc 64*10
    expected = (16 * 3 * 9 * 32**2 + 6 * 16 * 16 * 9 * 32**2
                + 32 * 16 * 9 * 16**2 + 5 * 32 * 32 * 9 * 16**2 + 32 * 16 * 16**2
                + 64 * 32 * 9 * 8**2 + 5 * 64 * 64 * 9 * 8**2 + 64 * 32 * 8**2 + 64 * 10)
    assert report.totals.macs == expected


def test_mnist_cnn_architecture():
    report = layerscope.analyze("mnist-cnn")
    # conv1 32*1*9*26^2, conv2 64*32*9*24^2, fc1 9216*128, fc2 128*10
    assert report.totals.macs == 32 * 9 * 26**2 + 64 * 32 * 9 * 24**2 + 9216 * 128 + 128 * 10
    assert report.totals.params == 1_199_882


def _snapshot(model):
    return ({k: v.clone() for k, v in model.state_dict().items()},
            [m.training for m in model.modules()],
            [(len(m._forward_hooks), len(m._forward_pre_hooks), len(m._backward_hooks))
             for m in model.modules()])


@pytest.mark.parametrize("mode", ["inference", "training"])
def test_model_is_unchanged(mode):
    model = zoo.lookup("resnet20").build()
    model.train()
    model.layer2.eval()  # a mixed train/eval state must survive too
    before = _snapshot(model)
    hooks_before = (len(torch.nn.modules.module._global_forward_hooks),
                    len(torch.nn.modules.module._global_forward_pre_hooks))
    layerscope.analyze(model, inputs=(2, 3, 32, 32), mode=mode)
    after = _snapshot(model)
    for k, v in before[0].items():
        assert torch.equal(v, after[0][k]), k
    assert before[1:] == after[1:]
    assert hooks_before == (len(torch.nn.modules.module._global_forward_hooks),
                            len(torch.nn.modules.module._global_forward_pre_hooks))
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.integration
def test_meta_factory_huge_model_analysed_without_its_weights():
    # The weights would take 40 * 16384^2 * 4 bytes = 42.9 GB; the analysis must not allocate them.
    code = ("import resource, layerscope;"
            "r = layerscope.analyze('tests.models:huge_on_meta');"
            "print(r.totals.macs, r.totals.weight_bytes,"
            " resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    macs, weight_bytes, max_rss_kib = map(int, out.stdout.split())
    assert macs == 40 * 16384 * 16384
    assert weight_bytes == 40 * 16384 * 16384 * 4
    assert max_rss_kib * 1024 < weight_bytes / 20  # well below 2 GB


def test_fake_analysis_falls_back_to_real_for_data_dependent_models():
    class Nonzero(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            idx = torch.nonzero(x[:, 0] > -1).flatten()  # data-dependent shape
            return self.fc(x[idx])

    model = Nonzero()
    before = copy.deepcopy(model.state_dict())
    report = layerscope.analyze(model, inputs=(3, 4))
    assert report.totals.macs == 3 * 4 * 2  # zeros input: every row kept
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


def test_model_that_computes_in_its_constructor_is_built_without_weights():
    """torchvision's RegNet derives its widths with .tolist(), which the meta device cannot
    answer: the build falls back to parameters sent to meta one at a time (zoo.build)."""
    import torch.nn as nn
    import torchvision

    import layerscope

    register = (nn.Module.register_parameter, nn.Module.register_buffer)
    report = layerscope.analyze("regnet_y_400mf")
    real = torchvision.models.regnet_y_400mf()
    assert report.totals.params == sum(p.numel() for p in real.parameters()) == 4_344_144
    assert report.op_coverage == 1.0
    assert (nn.Module.register_parameter, nn.Module.register_buffer) == register  # restored


# ---- package.module:factory is found from the current folder, as `python -m` finds it ----
def _write_package(folder):
    (folder / "my_package").mkdir()
    (folder / "my_package" / "__init__.py").write_text("")
    (folder / "my_package" / "models.py").write_text(
        "import torch\n\n\ndef factory():\n    return torch.nn.Linear(4, 2)\n")


def _cli_without_cwd_on_path(args, cwd):
    """The CLI as the installed entry point runs it: `-P` keeps Python from putting the current
    folder on sys.path itself (as `python -m` and `-c` do), so only layerscope can."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root)
    code = "import sys; from layerscope.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-P", "-c", code, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.integration
def test_package_factory_found_in_the_current_folder_without_pythonpath(tmp_path):
    _write_package(tmp_path)
    done = _cli_without_cwd_on_path(["analyze", "my_package.models:factory", "--input", "1x4",
                                     "--format", "json"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["totals"]["macs"] == 4 * 2  # in x out, batch 1


@pytest.mark.integration
def test_package_factory_not_found_says_where_it_looked_and_what_to_do(tmp_path):
    _write_package(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _cli_without_cwd_on_path(["analyze", "my_package.models:factory", "--input", "1x4"],
                                    elsewhere)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    for part in ("no module named 'my_package'", f"current folder ({elsewhere})", "sys.path (",
                 "run layerscope from the folder that holds my_package/", "PYTHONPATH"):
        assert part in done.stderr, done.stderr


def test_package_factory_import_leaves_sys_path_as_it_was(tmp_path, monkeypatch):
    _write_package(tmp_path)
    (tmp_path / "my_package" / "models.py").write_text(
        "import torch\n\n\ndef factory():\n    return torch.nn.Linear(4, 2), torch.zeros(3, 4)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    before = list(sys.path)
    monkeypatch.delitem(sys.modules, "my_package", raising=False)
    monkeypatch.delitem(sys.modules, "my_package.models", raising=False)
    try:
        report = layerscope.analyze("my_package.models:factory")
    finally:
        sys.modules.pop("my_package.models", None)
        sys.modules.pop("my_package", None)
    assert report.totals.macs == 3 * 4 * 2
    assert sys.path == before


def test_missing_dependency_inside_the_package_is_named_as_such(tmp_path, monkeypatch):
    _write_package(tmp_path)
    (tmp_path / "my_package" / "models.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "my_package", raising=False)
    try:
        with pytest.raises(UserError, match="importing 'my_package.models' failed: "
                           "ModuleNotFoundError: No module named 'no_such_dependency_xyz'"):
            layerscope.analyze("my_package.models:factory", inputs=(1, 4))
    finally:
        sys.modules.pop("my_package.models", None)
        sys.modules.pop("my_package", None)
