"""Hostile files and API misuse: one line on stderr (exit code 2), never a traceback, a huge
allocation or wrong numbers."""
import json
import os

import pytest
from onnx import TensorProto

from layerscope.core.errors import UserError
from tests.helpers import run_cli
from tests.onnx_graphs import FLOAT, external_tensor, model, save, single, tensor

# ------------------------------------------------------------------ hostile ONNX graphs


def _relu(tmp_path, shape, name="m.onnx") -> str:
    return save(single("Relu", [tensor("x", shape)], shape), tmp_path, name)


def _huge(tmp_path) -> str:
    """1x3x100000x100000 float32: 3e10 elements, 120e9 bytes = 111.8 GiB of input."""
    return _relu(tmp_path, [1, 3, 100000, 100000])


def _valueless(tmp_path, dims, raw: bytes | None = None) -> str:
    """A MatMul whose weight W declares ``dims`` but holds no values (or ``raw`` bytes only)."""
    w = TensorProto()
    w.name, w.data_type = "W", FLOAT
    w.dims.extend(dims)
    if raw is not None:
        w.raw_data = raw
    m = single("MatMul", [tensor("x", [2, dims[0]]), "W"], [2, dims[1]], [w])
    return save(m, tmp_path)


def _negative_value_info(tmp_path) -> str:
    """A custom op's output declared 2x-16 in value_info: nothing infers it, so the declared
    shape would be used as is (before the fix: -32 FLOPs for the Relu reading it)."""
    from onnx import helper

    nodes = [helper.make_node("Foo", ["x"], ["h"], name="f", domain="acme"),
             helper.make_node("Relu", ["h"], ["y"], name="n")]
    m = model(nodes, [tensor("x", [2, 4])], [tensor("y", [2, 16])], extra_opsets=[("acme", 1)],
              value_info=[tensor("h", [2, -16])])
    return save(m, tmp_path)


def _external(tmp_path, location: str) -> str:
    """A model in tmp_path/sub whose 4x2 float weight (32 B) lives at ``location``; a file of
    64 B exists at tmp_path/secret.bin, outside the model's folder, and sub/link.bin links
    to it."""
    (tmp_path / "secret.bin").write_bytes(b"\0" * 64)
    sub = tmp_path / "sub"
    sub.mkdir()
    os.symlink(tmp_path / "secret.bin", sub / "link.bin")
    w = external_tensor("w", [4, 2], location.replace("TMP", str(tmp_path)))
    return save(single("MatMul", [tensor("x", [1, 4]), "w"], [1, 2], [w]), sub)


def _external_constant(tmp_path) -> str:
    """A Constant node whose value (4x2 float) is external data at ../secret.bin."""
    from onnx import helper

    (tmp_path / "secret.bin").write_bytes(b"\0" * 64)
    (tmp_path / "sub").mkdir()
    value = external_tensor("c", [4, 2], "../secret.bin")
    nodes = [helper.make_node("Constant", [], ["c"], name="k", value=value),
             helper.make_node("MatMul", ["x", "c"], ["y"], name="n")]
    return save(model(nodes, [tensor("x", [1, 4])], [tensor("y", [1, 2])]), tmp_path / "sub")


OUTSIDE = "lies outside the model's folder; external data files must be inside it"
HUGE = "its inputs would need 111.8 GiB, over the 4.0 GiB limit"

ONNX_CASES = [
    ("profile-huge-dims", lambda p: ["profile", _huge(p), "--runs", "1"],
     f"{HUGE}; give smaller shapes (--input NAME=SHAPE, --batch-size) or raise the limit with "
     "LAYERSCOPE_MAX_INPUT_BYTES=BYTES"),
    ("verify-huge-dims", lambda p: ["verify", *[_huge(p)] * 2],
     f"{HUGE}; raise the limit with LAYERSCOPE_MAX_INPUT_BYTES=BYTES"),
    ("linear-subgraph-huge", lambda p: ["rewrite", "linear-subgraph", "--m", "1", "--k",
                                        "100000", "--n", "100000", "-o", str(p / "lin")],
     # weights drawn in float64, kept in float32: 1e10 x 12 B = 111.8 GiB
     # refused before the byte bound: an ONNX file holds at most 2 GiB (core.values)
     "is too large for a test graph: the input and the weight may each have at most"),
    ("rewrite-valueless-initializer",
     lambda p: ["rewrite", "tile-linear", _valueless(p, [128, 128]), "-o", str(p / "out.onnx")],
     "initializer 'W' (128x128) does not hold the values its dims call for"),
    ("rewrite-valueless-small-initializer",
     lambda p: ["rewrite", "tile-linear", _valueless(p, [4, 16]), "-o", str(p / "out.onnx")],
     "initializer 'W' (4x16) does not hold the values"),
    ("rewrite-short-initializer",
     lambda p: ["rewrite", "tile-linear", _valueless(p, [128, 128], b"\0" * 100), "-o",
                str(p / "out.onnx")],
     "initializer 'W' (128x128) does not hold the values"),
    ("negative-input-dim", lambda p: ["analyze", _relu(p, [1, -5])],
     "input 'x' has a negative dimension (shape 1x-5); give its shape with --input x=1x1"),
    ("negative-value-info-dim", lambda p: ["analyze", _negative_value_info(p)],
     "tensor 'h' has a negative dimension (shape 2x-16); the model is malformed"),
    ("external-data-parent", lambda p: ["analyze", _external(p, "../secret.bin")],
     f"external data '../secret.bin' of initializer 'w' {OUTSIDE}"),
    ("external-data-absolute", lambda p: ["analyze", _external(p, "TMP/secret.bin")],
     OUTSIDE),
    ("external-data-symlink-out", lambda p: ["analyze", _external(p, "link.bin")],
     f"external data 'link.bin' of initializer 'w' {OUTSIDE}"),
    ("external-data-of-constant", lambda p: ["analyze", _external_constant(p)],
     f"external data '../secret.bin' of attribute 'value' of node 'k' {OUTSIDE}"),
    ("profile-external-data-parent", lambda p: ["profile", _external(p, "../secret.bin")],
     OUTSIDE),
]


def _one_line_error(argv, expected, tmp_path):
    before = sorted(os.listdir(tmp_path))
    code, out, err = run_cli(*argv)
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and err.startswith("layerscope: error: "), err
    assert expected in err, err
    assert sorted(os.listdir(tmp_path)) == before  # nothing written


@pytest.mark.parametrize("make,expected", [c[1:] for c in ONNX_CASES],
                         ids=[c[0] for c in ONNX_CASES])
def test_hostile_onnx_is_one_line(tmp_path, make, expected):
    argv = make(tmp_path)
    _one_line_error(argv, expected, tmp_path)


def test_static_analysis_of_huge_dims_still_works(tmp_path):
    """analyze never allocates inputs: 3e10 elements x 4 B = 120e9 bytes in and out."""
    from layerscope import analyze

    report = analyze(_huge(tmp_path))
    assert report.totals.input_bytes == 120_000_000_000
    assert report.layers[0].flops == 3 * 10**10  # Relu: one comparison per element


def test_zero_dim_counts_zero(tmp_path):
    """A 0 dimension is legal ONNX: an empty tensor, every count 0 (never negative)."""
    from layerscope import analyze

    report = analyze(_relu(tmp_path, [1, 0]))
    assert (report.layers[0].flops, report.totals.input_bytes) == (0, 0)


def test_verify_keeps_a_zero_dim(tmp_path):
    """verify used to take a fixed 0 for a symbolic dimension and feed 1x1 (rejected)."""
    from layerscope.rewrite import verify

    path = _relu(tmp_path, [1, 0])
    result = verify(path, path, runs=1)
    assert result.ok and result.inputs[0]["shape"] == [1, 0]


@pytest.mark.parametrize("value,expected", [
    ("7", "its inputs would need 8 bytes, over the 7 bytes limit"),  # 1x2 float32 = 8 B
    ("abc", "LAYERSCOPE_MAX_INPUT_BYTES='abc': give a whole number of bytes"),
    ("0", "LAYERSCOPE_MAX_INPUT_BYTES='0': give a whole number of bytes, at least 1"),
], ids=["below-need", "not-a-number", "zero"])
def test_input_bytes_limit_env(tmp_path, monkeypatch, value, expected):
    monkeypatch.setenv("LAYERSCOPE_MAX_INPUT_BYTES", value)
    path = _relu(tmp_path, [1, 2])
    _one_line_error(["verify", path, path], expected, tmp_path)


def test_input_bytes_limit_raised_by_env(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERSCOPE_MAX_INPUT_BYTES", "8")  # exactly 1x2 float32
    path = _relu(tmp_path, [1, 2])
    code, out, err = run_cli("verify", path, path)
    assert code == 0, err


def test_tile_linear_api_refuses_valueless_initializer(tmp_path):
    import onnx

    from layerscope.core.errors import UserError
    from layerscope.rewrite import tile_linear

    m = onnx.load(_valueless(tmp_path, [128, 128]))
    with pytest.raises(UserError, match="initializer 'W' .128x128. does not hold"):
        tile_linear(m, 64)
    m = single("MatMul", [tensor("x", [2, 128]), "w"], [2, 128],
               [external_tensor("w", [128, 128], "w.bin")])
    with pytest.raises(UserError, match="external data file that was not loaded"):
        tile_linear(m, 64)


# ------------------------------------------------------------------ API names shared with modules

SHADOWED = [  # (package, name, the module a user may import under that name)
    ("layerscope", "ops", "layerscope.ops.registry"),
    ("layerscope.rewrite", "tile_linear", "layerscope.rewrite.tile_linear"),
    ("layerscope.rewrite", "verify", "layerscope.rewrite.verify"),
]


@pytest.mark.integration
@pytest.mark.parametrize("module_first", [True, False], ids=["module-first", "function-first"])
@pytest.mark.parametrize("package,name,submodule", SHADOWED, ids=[c[1] for c in SHADOWED])
def test_api_function_survives_import_of_same_named_module(package, name, submodule,
                                                          module_first):
    """Importing the submodule binds the package attribute to the module (Python's import
    system does); the name must stay callable in either order of imports, and the module
    usable. A fresh interpreter: this process has imported everything already."""
    import subprocess
    import sys

    steps = [f"import {submodule}", f"assert callable({package}.{name})"]
    code = "; ".join([f"import {package}", *(steps if module_first else steps[::-1]),
                      f"import {submodule}", f"assert callable({package}.{name})",
                      f"assert {submodule}.__name__ == {submodule!r}"])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_layerscope_ops_callable_after_import_of_subpackage():
    import sys

    import layerscope
    import layerscope.ops.registry  # noqa: F401  binds layerscope.ops to the subpackage

    table = layerscope.ops("mnist-cnn", runs=1, warmup=0)
    assert table.kind == "ops" and table.rows
    assert layerscope.ops.registry is sys.modules["layerscope.ops.registry"]


def test_tile_linear_and_verify_callable_after_module_import(tmp_path):
    import layerscope.rewrite.tile_linear  # noqa: F401
    import layerscope.rewrite.verify  # noqa: F401
    from layerscope.rewrite import linear_model, tile_linear, verify
    from layerscope.rewrite.onnx_io import save_onnx

    m = linear_model(2, 128, 128)
    save_onnx(m, str(tmp_path / "a.onnx"))
    save_onnx(tile_linear(m, 64).model, str(tmp_path / "b.onnx"))
    assert verify(str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx"), runs=1).ok


# ------------------------------------------------------------------ a damaged roofline cache

def _fake_measure(calls):
    """Stands in for the 2048^3 matmul and 256 MiB copy; counts the measurements."""
    from layerscope.analysis.roofline import Ceilings

    def measure(device="cpu", dtype=None, threads=None, *args, **kwargs):
        calls.append(device)
        return Ceilings(device, "float32", threads or 1, 1e11, 1e10, 2048, 2**29)
    return measure


def _good_entry(**changes):
    entry = {"device": "cpu", "dtype": "float32", "threads": 1, "peak_flops": 5e10,
             "bandwidth": 5e9, "matmul_size": 2048, "copy_bytes": 2**29, "ridge": 10.0}
    return entry | changes


def _with_entry(**changes):
    """A cache whose entry for this machine has ``changes``: a callable of the cache key."""
    import json

    return lambda key: json.dumps({key: _good_entry(**changes)})


CACHE_CASES = [  # (id, file content (text, or a callable of the key), why it is ignored)
    ("invalid-json", "{not json", "it is not valid JSON"),
    ("empty-file", "", "it is not valid JSON"),
    ("not-utf8", b"\xff\xfe\x00garbage", "it is not valid JSON"),
    ("json-list", "[1, 2]", "it holds a JSON list, not an object"),
    ("directory", None, "it is a directory"),
    ("entry-not-object", lambda key: json.dumps({key: "fast"}),
     "this machine's entry is malformed"),
    ("entry-missing-key", lambda key: json.dumps({key: {"device": "cpu"}}),
     "this machine's entry is malformed"),
    ("negative-bandwidth", _with_entry(bandwidth=-1.0), "non-positive ceilings"),
    ("nan-peak", _with_entry(peak_flops=float("nan")), "malformed"),
    ("string-threads", _with_entry(threads="4"), "malformed"),
    ("bool-size", _with_entry(matmul_size=True), "malformed"),
    # when and under what load the ceilings were measured (cache version 2)
    ("negative-load", _with_entry(loadavg=-1.0), "malformed"),
    ("numeric-time", _with_entry(measured_at=1764169331), "malformed"),
    ("unknown-key", _with_entry(turbo=True), "malformed"),
]


def _damage(cache_file, content, key):
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    if content is None:
        cache_file.mkdir()
    elif callable(content):
        cache_file.write_text(content(key))
    else:
        (cache_file.write_bytes if isinstance(content, bytes) else cache_file.write_text)(content)


@pytest.mark.parametrize("content,why", [c[1:] for c in CACHE_CASES],
                         ids=[c[0] for c in CACHE_CASES])
def test_damaged_roofline_cache_is_ignored_with_one_warning(tmp_path, monkeypatch, content, why):
    import torch

    from layerscope.analysis import roofline
    from layerscope.core.errors import LayerscopeWarning

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # never the real ~/.cache
    calls = []
    monkeypatch.setattr(roofline, "measure", _fake_measure(calls))
    cache_file = tmp_path / "layerscope" / "roofline.json"
    assert roofline.cache_path() == str(cache_file)
    _damage(cache_file, content, roofline._key("cpu", torch.float32, 1))
    with pytest.warns(LayerscopeWarning) as caught:
        c = roofline.ceilings("cpu", torch.float32, threads=1)
    assert len(caught) == 1 and why in str(caught[0].message), [str(w.message) for w in caught]
    assert str(cache_file) in str(caught[0].message)
    assert (c.peak_flops, c.bandwidth, calls) == (1e11, 1e10, ["cpu"])  # measured again
    if content is not None:  # the file was replaced by a good one: no warning next time
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert roofline.ceilings("cpu", torch.float32, threads=1) == c
        assert calls == ["cpu"]


def test_good_roofline_cache_is_used_silently(tmp_path, monkeypatch):
    import warnings

    import torch

    from layerscope.analysis import roofline

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = []
    monkeypatch.setattr(roofline, "measure", _fake_measure(calls))
    _damage(tmp_path / "layerscope" / "roofline.json", _with_entry(),
            roofline._key("cpu", torch.float32, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = roofline.ceilings("cpu", torch.float32, threads=1)
    assert (c.bandwidth, calls) == (5e9, [])


def test_profile_with_damaged_cache_warns_once_on_stderr(tmp_path, monkeypatch):
    from layerscope.analysis import roofline

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(roofline, "measure", _fake_measure([]))
    _damage(tmp_path / "layerscope" / "roofline.json", "{not json", "")
    code, out, err = run_cli("profile", "mnist-cnn", "--runs", "1", "--warmup", "0")
    assert code == 0, err
    lines = [ln for ln in err.splitlines() if "roofline cache" in ln]
    assert len(lines) == 1 and lines[0].startswith("layerscope: warning: ignoring the roofline "
                                                   "cache "), err
    assert "Traceback" not in err and "Warning" not in err


# ------------------------------------------------------------------ export keeps every flag

def _mixed_flags_model():
    """Root in training mode, BatchNorm in eval mode, Dropout in training mode."""
    from torch import nn

    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 2))
    model[1].eval()
    return model


_SHARED = {}


def shared_mixed_flags_model():
    """A factory for the CLI (spec MODULE:shared_mixed_flags_model, MODULE this module's name
    in sys.modules) that returns the test's own model, so the test can see its flags after."""
    return _SHARED["model"]


@pytest.mark.parametrize("via", ["api", "cli"])
def test_export_restores_every_modules_training_flag(tmp_path, via):
    from layerscope.analysis.onnx_export import export_onnx

    model = _mixed_flags_model()
    before = [m.training for m in model.modules()]
    assert before == [True, True, False, True, True]
    path = str(tmp_path / "m.onnx")
    if via == "api":
        export_onnx(model, path, inputs="2x8", exporter="legacy", verify=False)
    else:
        _SHARED["model"] = model
        code, out, err = run_cli("export", f"{__name__}:shared_mixed_flags_model", "-o", path,
                                 "--input", "2x8", "--legacy", "--no-verify")
        assert code == 0, err
    assert os.path.exists(path)
    assert [m.training for m in model.modules()] == before


# ------------------------------------------------------------------ hostile checkpoints

def _digits_weights():
    from layerscope.training.recipes import lookup

    return lookup("digits-cnn").build().state_dict()


def _other_recipe_weights():
    """mnist-cnn's weights: same layer names as far as they go, other shapes."""
    from layerscope.training.recipes import lookup

    return lookup("mnist-cnn").build().state_dict()


CONFIG = {"recipe": "digits-cnn", "synthetic": True, "synthetic_size": [64, 32]}


def _checkpoint(**changes):
    """A training checkpoint as loop.py writes one (the optimizer state of a fresh SGD/Adam is
    what load_state_dict accepts), with ``changes``; a value of None removes the entry."""
    from layerscope.training.checkpoint import rng_state
    from layerscope.training.recipes import lookup, make_optimizer

    recipe = lookup("digits-cnn")
    model = recipe.build()
    state = {"model": model.state_dict(),
             "optimizer": make_optimizer(recipe.optimizer, model.parameters(),
                                         recipe.lr).state_dict(),
             "scheduler": None, "scaler": None, "epoch": 1, "step": 2, "rng": rng_state(),
             "config": dict(CONFIG), "history": []}
    state.update(changes)
    return {k: v for k, v in state.items() if v is not None}


def _final_model(**changes):
    """What training writes to RUN/model.pt: weights, config, classes; no training state."""
    state = {"model": _digits_weights(), "config": dict(CONFIG), "classes": list("0123456789"),
             "recipe": "digits-cnn"}
    return state | changes


def _saved(tmp_path, state, name="ckpt.pt") -> str:
    import torch

    path = str(tmp_path / name)
    torch.save(state, path)
    return path


def _resume(state):
    return lambda p: ["train", "--resume", _saved(p, state()), "--out", str(p / "out"),
                      "--dry-run"]


def _predict(state):
    return lambda p: ["predict", _saved(p, state()), "--index", "0"]


CHECKPOINT_CASES = [
    ("resume-final-model", _resume(_final_model),
     "is a run's final model, not a training checkpoint; to resume, give the run directory"),
    ("resume-other-recipe-weights", _resume(lambda: _checkpoint(model=_other_recipe_weights())),
     "its weights do not fit the model of recipe 'digits-cnn' (size mismatch for"),
    ("predict-other-recipe-weights", _predict(lambda: _final_model(model=_other_recipe_weights())),
     "its weights do not fit the model of recipe 'digits-cnn'"),
    ("predict-missing-weights", _predict(lambda: _final_model(model={})),
     "its weights do not fit the model of recipe 'digits-cnn' (Missing key(s)"),
    ("model-entry-tensor", _predict(lambda: _final_model(model=_ones())),
     "its model entry is a Tensor, not a state dict"),
    ("config-not-dict", _predict(lambda: _final_model(config="digits-cnn")),
     "its config is malformed (a str, not a dict)"),
    ("config-no-recipe", _predict(lambda: _final_model(config={"synthetic": True})),
     "its config is malformed (no recipe)"),
    ("config-wrong-type", _resume(lambda: _checkpoint(config=CONFIG | {"epochs": "ten"})),
     "its config is malformed (epochs is 'ten')"),
    ("config-recipe-not-str", _predict(lambda: _final_model(config={"recipe": 3})),
     "its config is malformed (recipe is 3)"),
    ("resume-damaged-optimizer", _resume(lambda: _checkpoint(optimizer={"state": {},
                                                                        "param_groups": []})),
     "the checkpoint's training state does not fit this run (ValueError"),
    ("resume-no-rng", _resume(lambda: _checkpoint(rng=None)), "the checkpoint has no rng"),
    ("resume-bare-tensor", _resume(lambda: _ones()),
     "is not a layerscope checkpoint (no model/config entries)"),
]


def _ones():
    import torch

    return torch.ones(3)


@pytest.mark.integration
@pytest.mark.parametrize("make,expected", [c[1:] for c in CHECKPOINT_CASES],
                         ids=[c[0] for c in CHECKPOINT_CASES])
def test_hostile_checkpoint_is_one_line(tmp_path, make, expected):
    _one_line_error(make(tmp_path), expected, tmp_path)


@pytest.mark.parametrize("content", ["tensor", "list", "dict-of-strings"])
def test_weights_that_are_not_a_state_dict(tmp_path, content):
    import torch
    from torch import nn

    from layerscope.core.errors import UserError
    from layerscope.training.recipes import load_pretrained_resnet50

    obj = {"tensor": torch.ones(3), "list": [torch.ones(3)], "dict-of-strings": {"a": "b"}}
    path = _saved(tmp_path, obj[content], "w.pth")
    with pytest.raises(UserError, match="holds a .*, not a state dict"):
        load_pretrained_resnet50(nn.Linear(1, 1), path)


# ------------------------------------------------------------------ corrupt files, every command

def _good_onnx(tmp_path) -> str:
    return _relu(tmp_path, [1, 4], "good.onnx")


def _torchscript_bytes() -> bytes:
    import io
    import warnings

    import torch

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.save(torch.jit.script(torch.nn.Linear(4, 4)), buf)
    return buf.getvalue()


def _zip_without_version() -> bytes:
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("m/data.pkl", b"garbage")
    return buf.getvalue()


def _corrupt(kind: str, suffix: str):
    """A callable of tmp_path that writes a corrupt model file named bad.<suffix>."""
    import random

    def make(tmp_path) -> str:
        path = tmp_path / f"bad.{suffix}"
        if kind == "directory":
            path.mkdir()
            return str(path)
        data = {"random": lambda: random.Random(0).randbytes(512),
                "empty": lambda: b"",
                "truncated-torchscript": lambda: _torchscript_bytes()[:300],
                "torchscript": _torchscript_bytes,
                "zip-not-torchscript": _zip_without_version}
        if kind == "truncated-onnx":
            good = open(_good_onnx(tmp_path), "rb").read()
            path.write_bytes(good[: len(good) // 2])
        else:
            path.write_bytes(data[kind]())
        return str(path)
    return make


ONNX_FILES = ["random", "empty", "directory", "truncated-onnx", "torchscript"]
TORCHSCRIPT_FILES = ["random", "empty", "directory", "truncated-torchscript",
                     "zip-not-torchscript"]
ONNX_COMMANDS = {  # command -> argv around the bad file F (good.onnx: a valid second model)
    "analyze": ["analyze", "F"], "profile": ["profile", "F", "--runs", "1"],
    "verify-a": ["verify", "F", "G"], "verify-b": ["verify", "G", "F"],
    "rewrite": ["rewrite", "tile-linear", "F", "-o", "OUT"], "compare": ["compare", "F", "G"],
}
TORCHSCRIPT_COMMANDS = {
    "analyze": ["analyze", "F"], "profile": ["profile", "F", "--runs", "1"],
    "ops": ["ops", "F", "--runs", "1"], "verify": ["verify", "F", "G"],
    "compare": ["compare", "F", "G"], "export": ["export", "F", "-o", "OUT"],
}
CORRUPT_CASES = (
    [(f"{cmd}-{kind}.onnx", kind, "onnx", argv) for kind in ONNX_FILES
     for cmd, argv in ONNX_COMMANDS.items()]
    + [(f"{cmd}-{kind}.pt", kind, "pt", argv) for kind in TORCHSCRIPT_FILES
       for cmd, argv in TORCHSCRIPT_COMMANDS.items()])


@pytest.mark.parametrize("kind,suffix,argv", [c[1:] for c in CORRUPT_CASES],
                         ids=[c[0] for c in CORRUPT_CASES])
def test_corrupt_model_file_is_one_line(tmp_path, kind, suffix, argv):
    bad = _corrupt(kind, suffix)(tmp_path)
    good = _good_onnx(tmp_path)
    out = str(tmp_path / "out.onnx")
    argv = [{"F": bad, "G": good, "OUT": out}.get(a, a) for a in argv]
    _one_line_error(argv, os.path.basename(bad), tmp_path)


@pytest.mark.parametrize("argv,expected", [
    (["analyze", "TMP/nope.onnx"], "nope.onnx: no such file"),
    (["analyze", "TMP/nope.pt"], "nope.pt: no such file"),
    (["analyze", "resnt50"], "unknown model 'resnt50'. Did you mean: resnet50"),
    (["analyze", "TMP/bad.onnx"], "it is a zip archive, as TorchScript and torch.save files are"),
    (["rewrite", "tile-linear", "TMP/bad.onnx", "-o", "TMP/o.onnx"], "it is a zip archive"),
    (["analyze", "TMP/bad.pt"], "is not a readable layerscope checkpoint: Expected hasRecord"),
], ids=["missing-onnx", "missing-pt", "unknown-name", "torchscript-named-onnx",
        "rewrite-torchscript-named-onnx", "zip-not-torchscript"])
def test_bad_model_message_says_what_to_do(tmp_path, argv, expected):
    (tmp_path / "bad.onnx").write_bytes(_torchscript_bytes())
    (tmp_path / "bad.pt").write_bytes(_zip_without_version())
    argv = [a.replace("TMP", str(tmp_path)) for a in argv]
    code, out, err = run_cli(*argv)
    assert code == 2 and err.count("\n") == 1 and expected in err, err
    assert "Could this error message be improved" not in err


@pytest.mark.parametrize("argv", [
    ["profile", "mnist-cnn", "--input", "1x1x100000x100000", "--runs", "1"],
    ["activations", "mnist-cnn", "--input", "1x1x100000x100000"],
], ids=["profile", "activations"])
def test_pytorch_commands_refuse_a_huge_declared_input_before_allocating(tmp_path, monkeypatch,
                                                                       argv):
    # 1 x 1 x 100000 x 100000 float32 = 4e10 B = 37.3 GiB, over the default 4 GiB bound
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(*argv)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "would need 37.3 GiB, over the 4.0 GiB limit" in err


def test_sweep_cell_says_why_a_huge_input_was_not_run(tmp_path, monkeypatch):
    # a sweep reports a cell that cannot run and goes on (docs/profiling.md, "Sweeps"); nothing
    # is allocated
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("sweep", "mnist-cnn", "--input", "1x1x100000x100000", "--runs", "1",
                             "--format", "json")
    assert code == 0, err
    cell = json.loads(out)["cells"][0]
    assert cell["status"] != "ok" and "would need 37.3 GiB" in json.dumps(cell)


def test_pytorch_input_bound_follows_the_environment(monkeypatch):
    from layerscope.frontends.inputs import InputSpec, real_inputs

    # 1x8 float32 = 32 B: over a 31-byte bound, within a 32-byte one
    monkeypatch.setenv("LAYERSCOPE_MAX_INPUT_BYTES", "31")
    with pytest.raises(UserError, match="would need 32 bytes, over the 31 bytes limit"):
        real_inputs([InputSpec((1, 8))])
    monkeypatch.setenv("LAYERSCOPE_MAX_INPUT_BYTES", "32")
    assert real_inputs([InputSpec((1, 8))])[0].shape == (1, 8)


# ------------------------------------------------------------------ an output that is an input


def _graph_and_result(tmp_path) -> tuple[str, str]:
    """An ONNX graph and its saved analysis, both in tmp_path."""
    graph = save(single("Relu", [tensor("x", [1, 4])], [1, 4]), tmp_path)
    result = str(tmp_path / "r.json")
    code, _, err = run_cli("analyze", graph, "--format", "json", "-o", result)
    assert code == 0, err
    return graph, result


def _link(tmp_path, target: str) -> str:
    os.symlink(target, tmp_path / "link")
    return str(tmp_path / "link")


def _hard_link(tmp_path, target: str) -> str:
    os.link(target, tmp_path / "hard")
    return str(tmp_path / "hard")


# (id, argv builder(tmp_path, graph, result) -> argv, the option the message names)
SELF_OVERWRITE = [
    ("report-o-input", lambda t, g, r: ["report", r, "-o", r], "-o"),
    ("render-html-o-input", lambda t, g, r: ["render", r, "-o", r, "--format", "html"], "-o"),
    ("render-o-symlink-to-input", lambda t, g, r: ["render", r, "-o", _link(t, r),
                                                   "--format", "json"], "-o"),
    ("render-o-hard-link-to-input", lambda t, g, r: ["render", r, "-o", _hard_link(t, r),
                                                     "--format", "json"], "-o"),
    ("render-html-option-input", lambda t, g, r: ["render", r, "--html", r], "--html"),
    ("compare-o-second-input", lambda t, g, r: ["compare", g, r, "-o", r], "-o"),
    ("analyze-onnx-o-model", lambda t, g, r: ["analyze", g, "-o", g, "--format", "json"], "-o"),
    ("graph-onnx-o-model", lambda t, g, r: ["graph", g, "-o", g], "-o"),
    ("rewrite-o-input", lambda t, g, r: ["rewrite", "fold-identity", g, "-o", g], "-o"),
]


@pytest.mark.parametrize("build,option", [c[1:] for c in SELF_OVERWRITE],
                         ids=[c[0] for c in SELF_OVERWRITE])
def test_an_output_that_is_an_input_is_refused(tmp_path, build, option):
    """Writing it would replace what the command reads (`report r.json -o r.json` lost the
    saved result): refused before any work, whichever name (link, hard link) it has."""
    graph, result = _graph_and_result(tmp_path)
    argv = build(tmp_path, graph, result)
    before = {name: (tmp_path / name).read_bytes() for name in ("m.onnx", "r.json")}
    _one_line_error(argv, f"{option} ", tmp_path)
    code, out, err = run_cli(*argv)
    assert "is also one of the command's inputs" in err
    assert {name: (tmp_path / name).read_bytes() for name in before} == before


def test_an_output_beside_its_input_is_written(tmp_path):
    graph, result = _graph_and_result(tmp_path)
    code, _, err = run_cli("render", result, "-o", str(tmp_path / "r.html"))
    assert code == 0, err
    assert (tmp_path / "r.html").read_text().startswith("<!")


# ------------------------------------------------------------------ inputs that are not files


def _fifo(tmp_path, name: str) -> str:
    path = str(tmp_path / name)
    os.mkfifo(path)
    return path


def _char_device(tmp_path, name: str) -> str:
    """A character device like /dev/zero (1, 5), made in tmp_path: reading it never ends."""
    import stat

    path = str(tmp_path / name)
    os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))
    return path


def _external_fifo(tmp_path) -> str:
    """A model whose external data file 'missing' is a FIFO."""
    sub = tmp_path / "sub"
    sub.mkdir()
    os.mkfifo(sub / "missing")
    w = external_tensor("w", [4, 2], "missing")
    return save(single("MatMul", [tensor("x", [1, 4]), "w"], [1, 2], [w]), sub)


def _external_entry(tmp_path, key: str, value: str) -> str:
    """A model whose external data entry ``key`` (offset, length, location) holds ``value``."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "w.bin").write_bytes(b"\0" * 64)
    w = external_tensor("w", [4, 2], "w.bin")
    next(e for e in w.external_data if e.key == key).value = value
    return save(single("MatMul", [tensor("x", [1, 4]), "w"], [1, 2], [w]), tmp_path / "sub")


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHAR = "is a character device, not"
FIFO = "is a FIFO (named pipe), not"

# (id, argv builder(tmp_path), the message's fragment); each ran out of memory, hung or was
# "a bug in layerscope" before
SPECIAL_INPUTS = [
    ("analyze-char-device-model", lambda p: ["analyze", _char_device(p, "m.pt")],
     f"{CHAR} a model file"),
    ("analyze-fifo-model", lambda p: ["analyze", _fifo(p, "m.pt")], f"{FIFO} a model file"),
    ("analyze-fifo-onnx", lambda p: ["analyze", _fifo(p, "m.onnx")], f"{FIFO} a model file"),
    ("profile-char-device-onnx", lambda p: ["profile", _char_device(p, "m.onnx")],
     f"{CHAR} a model file"),
    ("render-fifo-result", lambda p: ["render", _fifo(p, "r.json")],
     f"{FIFO} a saved result (.json)"),
    ("report-char-device-result", lambda p: ["report", _char_device(p, "r.json")],
     f"{CHAR} a saved result (.json)"),
    ("compare-fifo-result", lambda p: ["compare", _fifo(p, "a.json"), _fifo(p, "b.json")],
     FIFO),
    ("hf-config-fifo", lambda p: ["analyze", "hf:" + _fifo(p, "config.json")],
     f"{FIFO} a model config (config.json)"),
    ("external-data-fifo", lambda p: ["analyze", _external_fifo(p)],
     "external data file 'missing' of initializer 'w' is a FIFO (named pipe), not a data file"),
    ("graph-external-data-fifo", lambda p: ["graph", _external_fifo(p), "-o",
                                            str(p / "g.json")], "is a FIFO (named pipe)"),
    ("external-data-negative-offset", lambda p: ["analyze", _external_entry(p, "offset", "-8")],
     "the external data entry of initializer 'w' is malformed (External data offset must be "
     "non-negative, got -8"),
    ("profile-external-data-negative-length",
     lambda p: ["profile", _external_entry(p, "length", "-32")], "got -32"),
    ("external-data-nul-location",
     lambda p: ["analyze", _external_entry(p, "location", "w.bin\0x")],
     "external data location of initializer 'w' contains a NUL byte; the model is damaged"),
    ("external-data-offset-not-a-number",
     lambda p: ["analyze", _external_entry(p, "offset", "abc")],
     "external data entry of initializer 'w' is malformed"),
]


@pytest.mark.integration
@pytest.mark.parametrize("make,expected", [c[1:] for c in SPECIAL_INPUTS],
                         ids=[c[0] for c in SPECIAL_INPUTS])
def test_input_that_is_not_a_regular_file_is_refused_unopened(tmp_path, make, expected):
    """Run in a subprocess with a time limit: before the fix these read /dev/zero-like
    devices until memory ran out, or blocked forever on a FIFO."""
    import subprocess
    import sys

    argv = make(tmp_path)
    before = sorted(os.listdir(tmp_path))
    run = subprocess.run([sys.executable, "-m", "layerscope", *argv], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path, env={**os.environ,
                                                                   "PYTHONPATH": ROOT})
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("layerscope: error: ")
    assert expected in run.stderr, run.stderr
    assert sorted(os.listdir(tmp_path)) == before


def test_hf_folder_without_config_says_so(tmp_path):
    _one_line_error(["analyze", f"hf:{tmp_path}"],
                    f"the folder {tmp_path} has no config.json", tmp_path)


def test_hf_config_nested_deeply_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    _one_line_error(["analyze", f"hf:{tmp_path / 'config.json'}"],
                    "is not a model config (JSON nested too deeply)", tmp_path)


@pytest.mark.parametrize("make,expected", [
    (lambda p: 5, "model must be an nn.Module or a spec string (a built-in name, a file or "
                  "file.py:factory), got int"),
    (lambda p: _char_device(p, "m.pt"), CHAR),
], ids=["int", "char-device"])
def test_api_names_what_the_model_argument_is(tmp_path, make, expected):
    import layerscope

    with pytest.raises(UserError, match="^") as info:
        layerscope.analyze(make(tmp_path))
    assert expected in str(info.value)


def test_api_takes_a_path_like_its_text(tmp_path):
    from pathlib import Path

    import layerscope

    graph = Path(_relu(tmp_path, [1, 4]))
    assert layerscope.analyze(graph).totals == layerscope.analyze(str(graph)).totals


def _bomb(tmp_path, side: int) -> str:
    """A PNG of side x side one-bit pixels: a few kilobytes on disk, side**2 pixels decoded."""
    from PIL import Image

    path = str(tmp_path / "bomb.png")
    Image.new("1", (side, side)).save(path)
    return path


@pytest.mark.parametrize("side", [10_000, 14_000], ids=["over-warning-limit", "over-error-limit"])
def test_predict_refuses_a_decompression_bomb(tmp_path, side):
    """PIL warns from about 89 million pixels (the warning went by and the image was decoded)
    and refuses from twice that (DecompressionBombError was "a bug in layerscope")."""
    import torch

    torch.save(_final_model(), tmp_path / "model.pt")
    _one_line_error(["predict", str(tmp_path / "model.pt"), "--image", _bomb(tmp_path, side)],
                    "refused as a possible decompression bomb; give a smaller image", tmp_path)


# ------------------------------------------------------------------ hostile results
# A result file is data that travels between machines and CI jobs: what it holds (a model name,
# a script, its arguments, its timings) is never run, parsed as options or shell, nor trusted
# to be finite.

DATA = os.path.join(ROOT, "tests", "data")


def _result(tmp_path, kind: str = "profile", name: str = "r.json", **changes) -> str:
    """tests/data/<kind>_0.4.json with ``changes`` (a key's value replaced), in tmp_path. Its
    timings count as 12 runs (the file has 3): the threads rule, whose command names the
    result's model, judges from 10 or more."""
    with open(os.path.join(DATA, f"{kind}_0.4.json"), encoding="utf-8") as f:
        d = json.load(f)
    for timing in [d.get("end_to_end")] + [c.get("latency") for c in d.get("cells") or []]:
        if timing:
            timing["n"] = 12
    d.update(changes)
    path = tmp_path / name
    path.write_text(json.dumps(d))
    return str(path)


def _run_result(tmp_path, **script) -> str:
    """A ``layerscope run`` result (train_0.4.json with a watched script whose steps wait for
    data: the workers rule fires, a what-if run tests it) recording ``script``."""
    with open(os.path.join(DATA, "train_0.4.json"), encoding="utf-8") as f:
        d = json.load(f)
    d["recipe"] = script.get("name", "train.py")
    d["breakdown"]["seconds"] = {"data": 0.8, "forward": 0.1, "backward": 0.05,
                                 "optimizer": 0.05}
    d["script"] = {"name": "train.py", "argv": [], "path": "train.py", "module": False,
                   "cwd": str(tmp_path / "work"), **script}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(d))
    return str(path)


PWN = ("import pathlib\n(pathlib.Path(__file__).resolve().parent / 'PWNED').write_text('ran')\n"
       "import torch\n\ndef factory():\n    return torch.nn.Linear(2, 2)\n")
HOSTILE_MODELS = ["mnist-cnn --html victim.html", "x; touch HACKED #", "$(touch HACKED)",
                  "`touch HACKED`", "a'b\"c", "--html=victim.html", "m\ntouch HACKED"]


@pytest.mark.integration
@pytest.mark.parametrize("model", HOSTILE_MODELS, ids=range(len(HOSTILE_MODELS)))
def test_an_advised_command_is_an_argument_list_shown_quoted(tmp_path, model):
    """The model a result names is one argument of the sweep that tests the threads rule, and
    the command shown is that list quoted for a shell: run by sh (with a `layerscope` that
    does nothing) it creates nothing. Before: text, "layerscope sweep x; touch HACKED # ..."."""
    import shlex
    import stat
    import subprocess

    from layerscope.advice import advise

    report = advise(_result(tmp_path, model=model))
    item = next(a for a in report.advice if a.rule == "threads")
    assert item.argv[:3] == ["layerscope", "sweep", model]
    assert shlex.split(item.command) == item.argv
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "layerscope").write_text("#!/bin/sh\nexit 0\n")
    (stub / "layerscope").chmod(stat.S_IRWXU)
    for a in report.advice:
        subprocess.run(["sh", "-c", a.command], cwd=tmp_path, capture_output=True, timeout=60,
                       env={"PATH": f"{stub}:/usr/bin:/bin"})
    assert not (tmp_path / "HACKED").exists()


# (id, the result's model, files written in tmp_path first, what the one line says)
REFUSED_MODELS = [
    ("option-in-model", "mnist-cnn --html victim.html", {},
     "its model 'mnist-cnn --html victim.html' is not a model on this machine"),
    ("option-as-model", "--html=victim.html", {}, "begins with '-', so it is not a model"),
    ("factory-file", "pwn.py:factory", {"pwn.py": PWN},
     "names its model as Python code (pwn.py:factory): --verify would import and run the "
     "Python file"),
    ("factory-module", "pwnmod:factory", {"pwnmod.py": PWN},
     "--verify would import and run the Python module pwnmod"),
    ("stdlib-module", "os:getcwd", {}, "the Python module os"),
]


@pytest.mark.parametrize("model,files,expected", [c[1:] for c in REFUSED_MODELS],
                         ids=[c[0] for c in REFUSED_MODELS])
@pytest.mark.parametrize("kind", ["profile", "sweep"])
def test_verify_refuses_a_model_the_result_chose(tmp_path, monkeypatch, kind, model, files,
                                                 expected):
    """Nothing runs: no sweep overwrites victim.html with its --html, no factory file or
    module is imported; one line, exit 2, naming the code and --allow-code."""
    monkeypatch.chdir(tmp_path)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "victim.html").write_text("precious")
    noise = json.load(open(os.path.join(DATA, "profile_0.4.json")))["noise"]
    path = _result(tmp_path, kind, model=model, noise=noise)  # the threads rule fires
    before = sorted(os.listdir(tmp_path))
    _one_line_error(["advise", path, "--verify", "--steps", "1"], expected, tmp_path)
    assert (tmp_path / "victim.html").read_text() == "precious"
    assert sorted(os.listdir(tmp_path)) == before  # no PWNED, nothing written
    if files:
        code, out, err = run_cli("advise", path, "--verify", "--steps", "1")
        assert "--allow-code" in err


def _fake_sweep(calls):
    """subprocess.run for advise's sweeps: records the argument list, writes two cells."""
    import subprocess

    def run(argv, **kwargs):
        calls.append(list(argv))
        out = argv[argv.index("-o") + 1]
        cell = {"status": "ok", "speedup": 1.0, "throughput_per_s": 10.0}
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"cells": [cell, {**cell, "speedup": 1.25, "throughput_per_s": 12.5,
                                        "within_noise": False}]}, f)
        return subprocess.CompletedProcess(argv, 0, "", "")
    return run


def test_verify_runs_the_argument_list_a_model_with_a_space_included(tmp_path, monkeypatch):
    """A real spec with a space (an ONNX file in "my dir"): the sweep gets it as one argument.
    Before: the command's text split on the space, and the sweep failed."""
    import subprocess
    import sys

    (tmp_path / "my dir").mkdir()
    model = _relu(tmp_path / "my dir", [1, 4], "my model.onnx")
    calls = []
    monkeypatch.setattr(subprocess, "run", _fake_sweep(calls))
    from layerscope.advice import advise

    report = advise(_result(tmp_path, model=model), verify=True, steps=1)
    (argv,) = calls
    assert argv[:5] == [sys.executable, "-m", "layerscope", "sweep", model]
    item = next(a for a in report.advice if a.rule == "threads")
    assert item.measured_gain == pytest.approx(0.2)  # 1 - 1/1.25: the fake sweep's cell


def test_verify_with_allow_code_says_which_code_it_runs(tmp_path, monkeypatch):
    import subprocess

    monkeypatch.chdir(tmp_path)
    (tmp_path / "pwn.py").write_text(PWN)
    calls = []
    monkeypatch.setattr(subprocess, "run", _fake_sweep(calls))
    code, out, err = run_cli("advise", _result(tmp_path, model="pwn.py:factory"), "--verify",
                             "--steps", "1", "--allow-code", "--format", "json")
    assert code == 0, err
    said = f"verify imports and runs the Python file {tmp_path / 'pwn.py'} (pwn.py:factory)"
    assert err.startswith(f"layerscope: {said}"), err
    assert any(said in n for n in json.loads(out)["notes"])
    assert calls and calls[0][4] == "pwn.py:factory"


def _module_outside(tmp_path):
    return {"path": "pip", "name": "pip", "module": True, "argv": ["--version"]}


def _script_outside(tmp_path):
    (tmp_path / "evil.py").write_text(PWN)
    return {"path": "../evil.py", "name": "evil.py"}


def _script_linked_out(tmp_path):
    (tmp_path / "evil.py").write_text(PWN)
    os.symlink(tmp_path / "evil.py", tmp_path / "work" / "train.py")
    return {}


def _script_absolute_outside(tmp_path):
    (tmp_path / "evil.py").write_text(PWN)
    return {"path": str(tmp_path / "evil.py"), "name": "evil.py"}


# (id, the script record (a callable of tmp_path, which may write files), the one line)
REFUSED_SCRIPTS = [
    ("module-found-elsewhere", _module_outside, "-m pip, which is not a module file in"),
    ("script-outside-its-folder", _script_outside, "evil.py, which is outside"),
    ("script-linked-out", _script_linked_out, "evil.py, which is outside"),
    ("script-absolute-outside", _script_absolute_outside, "evil.py, which is outside"),
    ("module-not-a-name", lambda t: {"path": "a;b", "module": True}, "is not a module name"),
]


@pytest.mark.parametrize("make,expected", [c[1:] for c in REFUSED_SCRIPTS],
                         ids=[c[0] for c in REFUSED_SCRIPTS])
def test_verify_of_a_run_result_refuses_code_outside_its_recorded_folder(tmp_path, make,
                                                                          expected):
    (tmp_path / "work").mkdir()
    path = _run_result(tmp_path, **make(tmp_path))
    before = sorted(os.listdir(tmp_path))
    _one_line_error(["advise", path, "--verify", "--steps", "2"], expected, tmp_path)
    assert sorted(os.listdir(tmp_path)) == before  # evil.py never ran: no PWNED
    code, out, err = run_cli("advise", path, "--verify", "--steps", "2")
    assert ("--allow-code" in err) == ("name" not in expected)  # what a flag could allow


@pytest.mark.parametrize("script", [{"path": "train.py"}, {"path": "pkg.train", "module": True}],
                         ids=["script", "module"])
def test_verify_runs_the_recorded_script_and_says_so_first(tmp_path, script):
    """The script (or -m module) inside the folder the result recorded runs without a flag;
    the line saying so names its real path."""
    from layerscope.advice.trust import check_script

    work = tmp_path / "work"
    (work / "pkg").mkdir(parents=True)
    (work / "train.py").write_text("pass\n")
    (work / "pkg" / "__init__.py").write_text("")
    (work / "pkg" / "train.py").write_text("pass\n")
    record = {"cwd": str(work), "argv": ["--lr", "0.1"], **script}
    (line,) = check_script(record, "run.json", allow_code=False)
    file = work / ("pkg/train.py" if script.get("module") else "train.py")
    assert f"({file})" in line or f"script {file}" in line
    assert line.endswith(f"in {work} with the arguments --lr 0.1, as run.json recorded it")


def _profile_with_samples(tmp_path, where: str, value, name: str = "bad.json") -> str:
    """sample_results' profile with its samples, one timing replaced by ``value``."""
    from layerscope.renderers.json_out import to_json
    from tests.sample_results import diff_profiles

    d = json.loads(to_json(diff_profiles()[0]))
    if where == "sample":
        d["layers"][1]["time"]["samples_s"][2] = value
    elif where == "median":
        d["layers"][1]["time"]["median_s"] = value
    elif where == "end-to-end":
        d["end_to_end"]["samples_s"] = [value] * len(d["end_to_end"]["samples_s"])
    elif where == "e2e-median":
        d["end_to_end"]["median_s"] = value
    elif where == "type":
        d["by_type"][0]["time"]["p90_s"] = value
    path = tmp_path / name
    with open(path, "w", encoding="utf-8") as f:
        json.dump(d, f)  # NaN and Infinity written as Python's json writes them
    return str(path)


# (id, the timing replaced, its value, the field and the words the one line names)
HOSTILE_TIMINGS = [
    ("sample-nan", "sample", float("nan"), "layers/1/time/samples_s/2: nan is not a finite"),
    ("sample-inf", "sample", float("inf"), "layers/1/time/samples_s/2: inf is not a finite"),
    ("sample-minus-inf", "sample", float("-inf"), "layers/1/time/samples_s/2: -inf is not a"),
    ("sample-1e308", "sample", 1e308,
     "layers/1/time/samples_s/2: 1e+308 is greater than the maximum of 1000000000"),
    ("sample-negative", "sample", -0.001,
     "layers/1/time/samples_s/2: -0.001 is less than the minimum of 0"),
    ("median-nan", "median", float("nan"), "layers/1/time/median_s: nan is not a finite"),
    ("median-negative", "median", -1.0, "layers/1/time/median_s: -1.0 is less than"),
    ("end-to-end-nan", "end-to-end", float("nan"), "end_to_end/samples_s/0: nan"),
    ("end-to-end-1e308", "end-to-end", 1e308, "end_to_end/samples_s/0: 1e+308"),
    # a whole forward pass cannot take 0 s (a layer's sample can: test_a_zero_timing_...)
    ("end-to-end-zero", "end-to-end", 0.0,
     "end_to_end/samples_s/0: 0.0 is less than or equal to the minimum of 0"),
    ("end-to-end-median-zero", "e2e-median", 0,
     "end_to_end/median_s: 0 is less than or equal to the minimum of 0"),
    ("type-p90-nan", "type", float("nan"), "by_type/0/time/p90_s: nan is not a finite"),
]


@pytest.mark.parametrize("where,value,expected", [c[1:] for c in HOSTILE_TIMINGS],
                         ids=[c[0] for c in HOSTILE_TIMINGS])
def test_a_timing_that_is_not_a_finite_duration_is_refused_naming_the_field(tmp_path, where,
                                                                            value, expected):
    """Before: NaN, infinity and 1e308 ended in "a bug in layerscope" (statistics could not
    take them) and negative samples were judged; now the schema refuses them, one line."""
    import layerscope

    good = _profile_with_samples(tmp_path, "sample", 0.0005, "good.json")
    bad = _profile_with_samples(tmp_path, where, value)
    _one_line_error(["diff", good, bad], f"bad.json: not a valid profile result: {expected}",
                    tmp_path)
    with pytest.raises(UserError, match="bad.json: not a valid profile result"):
        layerscope.diff(good, bad)


def test_a_zero_timing_is_a_duration(tmp_path):
    """0 is a timing a result can hold (a layer not called in a run, a phase not spent):
    read, and diffed without error."""
    good = _profile_with_samples(tmp_path, "sample", 0.0005, "good.json")
    zero = _profile_with_samples(tmp_path, "sample", 0.0, "zero.json")
    code, out, err = run_cli("diff", good, zero)
    assert code == 0, err


@pytest.mark.parametrize("value,expected", [
    (0.0, "step_seconds/1: 0.0 is less than or equal to the minimum of 0"),
    (-0.5, "step_seconds/1: -0.5 is less than or equal to the minimum of 0"),
    (float("nan"), "step_seconds/1: nan is not a finite number"),
], ids=["zero", "negative", "nan"])
def test_a_training_step_of_no_time_is_refused(tmp_path, value, expected):
    """A training step is timed from one step end to the next: 0 s (or less) is damage, as
    advise and diff would otherwise divide by it or call it infinitely faster."""
    from layerscope.renderers.json_out import to_json
    from tests.sample_results import train_report

    d = json.loads(to_json(train_report()))
    assert len(d["step_seconds"]) > 1
    d["step_seconds"][1] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    for argv in (["diff", str(path), str(path)], ["advise", str(path)]):
        _one_line_error(argv, f"bad.json: not a valid train result: {expected}", tmp_path)


# a layer name and a model name as a hand-edited result may hold them: terminal escape
# sequences (colour, the window title), a bell, and rich's markup
ESCAPES = "\x1b[31mred\x1b]0;title\x07\x9b2J"


@pytest.mark.parametrize("command", ["diff", "render"])
def test_control_characters_in_a_result_are_shown_not_obeyed(tmp_path, command):
    """Before: the terminal table wrote a name's escape sequences as they were (ESC [31m
    coloured the terminal, ESC ]0; retitled it); now each control character is written out
    (\\x1b), and a name that looks like rich markup is text."""
    from layerscope.renderers.json_out import to_json
    from tests.sample_results import diff_profiles

    d = json.loads(to_json(diff_profiles()[0]))
    d["layers"][1]["name"] = "bn1" + ESCAPES
    d["model"] = "[/bold][link=x]net" + ESCAPES
    path = tmp_path / "esc.json"
    path.write_text(json.dumps(d))
    argv = [command, str(path)] + ([str(path)] if command == "diff" else [])
    code, out, err = run_cli(*argv)
    assert code == 0, err
    shown = out + err
    assert not any(c in shown for c in "\x1b\x07\x9b"), repr(shown[:400])
    assert "net\\x1b[31mred\\x1b]0;title\\x07\\x9b2J" in shown, shown  # written out


@pytest.mark.parametrize("data_dir,shown", [
    ("--download", "--data-dir=--download"),
    ("data dir", "--data-dir 'data dir'"),
], ids=["option-like", "space"])
def test_an_advised_ablation_keeps_each_value_one_argument(tmp_path, data_dir, shown):
    """Before: a data folder named --download was printed as `--data-dir --download`, which
    a shell user's paste runs as the option --download."""
    from layerscope.advice import advise
    from layerscope.renderers.json_out import to_json
    from tests.sample_results import train_report

    d = json.loads(to_json(train_report()))
    d["config"].update(synthetic=False, data_dir=data_dir)
    path = tmp_path / "train.json"
    path.write_text(json.dumps(d))
    commands = [a.command for a in advise(str(path)).advice if a.command.startswith(
        "layerscope ablate")]
    assert commands and all(shown in c for c in commands), commands
