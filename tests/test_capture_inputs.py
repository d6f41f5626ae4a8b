"""Capture and inputs: shared modules and tied weights, lazy modules, wrapped models, keyword and
non-tensor inputs, modules without forward, the real-tensor fallback."""
import json
import sys
import threading

import pytest
import torch
import torch.nn as nn

import layerscope
from layerscope.core.errors import UserError
from tests.helpers import run_cli


# ---------------------------------------------------------------- ways to share
class TwoAttributes(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = self.b = nn.Linear(10, 10)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class TiedLM(nn.Module):
    """Embedding and output head share one weight (GPT-2 style)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 10)
        self.norm = nn.LayerNorm(10)
        self.head = nn.Linear(10, 20, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x):
        return self.head(self.norm(self.emb(x)))


class SharedParameter(nn.Module):
    """Two distinct modules holding the same Parameter object (and a hook on one)."""

    def __init__(self):
        super().__init__()
        self.p = nn.Linear(10, 10)
        self.q = nn.Linear(10, 10)
        self.q.weight = self.p.weight
        self.q.register_forward_hook(lambda m, i, o: None)

    def forward(self, x):
        return self.q(self.p(x))


def _same_twice():
    lin = nn.Linear(10, 10)
    return nn.Sequential(lin, nn.ReLU(), lin)


# (id, factory, example input, distinct parameters, forward MACs)
SHARING = [
    # one Linear(10,10): 100 weights + 10 bias; called twice on 1x10: 2 * 10*10
    ("same-module-twice-in-sequential", _same_twice, torch.randn(1, 10), 110, 200),
    ("two-attributes", TwoAttributes, torch.randn(1, 10), 110, 200),
    # embedding 20x10 shared with head; LayerNorm 10+10; head MACs 3 tokens * 10 * 20
    ("tied-embedding-head", TiedLM, torch.tensor([[1, 2, 3]]), 200 + 20, 3 * 10 * 20),
    # shared weight 100 + two biases 10 + 10; two Linear calls 2 * 10*10
    ("parameter-in-two-modules", SharedParameter, torch.randn(1, 10), 120, 200),
]


def _snapshot(model):
    """Every (module, attribute) slot's object and value, flags and hooks."""
    slots = []
    for name, m in model.named_modules(remove_duplicate=False):
        for table in (m._parameters, m._buffers):
            for key, t in table.items():
                slots.append((name, key, t, None if t is None else t.detach().clone(),
                              None if t is None else t.requires_grad))
    flags = [(m, m.training) for m in model.modules()]
    hooks = [(m, dict(m._forward_hooks), dict(m._forward_pre_hooks)) for m in model.modules()]
    return slots, flags, hooks


def _assert_unchanged(model, snap):
    slots, flags, hooks = snap
    mods = dict(model.named_modules(remove_duplicate=False))
    for name, key, t, value, grad in slots:
        now = {**mods[name]._parameters, **mods[name]._buffers}[key]
        assert now is t, f"{name}.{key} was replaced by {type(now).__name__}"
        assert type(now) is type(t)
        if t is not None:
            assert torch.equal(now, value) and now.requires_grad == grad and now.grad is None
    for m, flag in flags:
        assert m.training == flag
    for m, fwd, pre in hooks:
        assert dict(m._forward_hooks) == fwd and dict(m._forward_pre_hooks) == pre


@pytest.mark.parametrize("mode", ["inference", "training"])
@pytest.mark.parametrize("build,x,params,macs", [s[1:] for s in SHARING],
                         ids=[s[0] for s in SHARING])
def test_shared_modules_and_weights_are_restored_exactly(build, x, params, macs, mode):
    model = build()
    snap = _snapshot(model)
    report = layerscope.analyze(model, x, mode=mode)
    _assert_unchanged(model, snap)
    assert report.totals.params == params
    assert report.totals.trainable_params == params
    assert report.totals.macs == macs
    model(x)  # still runs
    assert isinstance(next(model.parameters()), nn.Parameter)


@pytest.mark.parametrize("build,x,params,macs", [s[1:] for s in SHARING],
                         ids=[s[0] for s in SHARING])
def test_shared_modules_from_the_cli(tmp_path, build, x, params, macs):
    src = tmp_path / "shared.py"
    # the factory keeps its model in a global, so the test can run it afterwards
    src.write_text("import tests.test_capture_inputs as t\n"
                   f"ENTRY = [s for s in t.SHARING if s[1].__name__ == {build.__name__!r}][0]\n"
                   "MODEL, X = ENTRY[1](), ENTRY[2]\n"
                   "def build():\n    return MODEL, (X,)\n")
    code, out, err = run_cli("analyze", f"{src}:build", "--mode", "training", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["totals"]["trainable_params"] == params
    user = next(m for m in list(sys.modules.values())
                if getattr(m, "__file__", None) == str(src))
    user.MODEL(x)


def _old_spectral_norm():
    return nn.utils.spectral_norm(nn.Linear(4, 4))


def _old_weight_norm():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # deprecated in favour of parametrizations
        return nn.utils.weight_norm(nn.Linear(4, 4))


@pytest.mark.parametrize("mode", ["inference", "training"])
@pytest.mark.parametrize("build,params", [
    (_old_spectral_norm, 16 + 4),  # weight_orig + bias (u, v are buffers)
    (_old_weight_norm, 4 + 16 + 4),  # weight_g (4x1) + weight_v + bias
    (lambda: nn.utils.parametrizations.weight_norm(nn.Linear(4, 4)), 4 + 16 + 4),
], ids=["spectral-norm-hook", "weight-norm-hook", "weight-norm-parametrization"])
def test_weights_derived_in_hooks_are_restored(build, params, mode):
    """Old-style weight/spectral norm set ``module.weight`` (a plain attribute) in a pre-hook."""
    model = build().eval()
    x = torch.ones(1, 4)
    expected = model(x).detach()
    snap, plain = _snapshot(model), dict(vars(model))
    report = layerscope.analyze(model, x, mode=mode)
    _assert_unchanged(model, snap)
    assert all(vars(model)[k] is v for k, v in plain.items() if isinstance(v, torch.Tensor))
    assert report.totals.params == params
    assert torch.equal(model(x), expected)


# ---------------------------------------------------------------- lazy modules
def test_lazy_modules_are_materialised_on_a_private_copy():
    model = nn.Sequential(nn.Linear(7, 7), nn.LazyLinear(5), nn.LazyBatchNorm1d())
    report = layerscope.analyze(model, (2, 7))
    # Linear 7*7+7 = 56, LazyLinear -> 7*5+5 = 40, LazyBatchNorm1d -> weight+bias 2*5 = 10
    assert report.totals.params == 56 + 40 + 10
    assert any("lazy" in n for n in report.notes)
    assert type(model[1]).__name__ == "LazyLinear"
    assert isinstance(model[1].weight, nn.parameter.UninitializedParameter)
    model(torch.randn(2, 7))  # the user's first forward still initialises it
    assert model[1].weight.shape == (5, 7)


def test_lazy_module_from_the_cli(tmp_path):
    src = tmp_path / "lazy.py"
    src.write_text("import torch.nn as nn\n"
                   "def build():\n    return nn.Sequential(nn.LazyLinear(3))\n")
    code, out, err = run_cli("analyze", f"{src}:build", "--input", "4x6", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["totals"]["params"] == 6 * 3 + 3


# ---------------------------------------------------------------- wrapped models
def test_data_parallel_analyses_the_wrapped_module():
    inner = nn.Sequential(nn.Linear(10, 10), nn.ReLU())
    report = layerscope.analyze(nn.DataParallel(inner), (10, 10))
    assert report.totals.macs == 10 * 10 * 10
    assert [r.name for r in report.layers] == ["0", "1"]  # names relative to .module
    assert any("DataParallel" in n and "module." in n for n in report.notes)


def test_distributed_data_parallel_analyses_the_wrapped_module(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        wrapped = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(4, 3)))
        report = layerscope.analyze(wrapped, (2, 4))
    finally:
        dist.destroy_process_group()
    assert report.totals.macs == 2 * 4 * 3 and [r.name for r in report.layers] == ["0"]
    assert any("DistributedDataParallel" in n for n in report.notes)


# ---------------------------------------------------------------- inputs
class Keywords(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, scale: int, mode=None, mask=None):
        assert isinstance(scale, int) and (mode is None or isinstance(mode, str))
        y = self.lin(x) * scale
        return y if mask is None else y * mask


@pytest.mark.parametrize("inputs,kwargs,described", [
    (((1, 4), 3), {"mask": torch.ones(1, 4), "mode": "fast"},
     [{"shape": [1, 4], "dtype": "float32"}, {"type": "int"},
      {"name": "mask", "shape": [1, 4], "dtype": "float32"}, {"name": "mode", "type": "str"}]),
    (["1x4", 3, "mask=1x4:bool"], None,
     [{"shape": [1, 4], "dtype": "float32"}, {"type": "int"},
      {"name": "mask", "shape": [1, 4], "dtype": "bool"}]),
    ((torch.ones(1, 4), 2, None), {"mask": (1, 4)},
     [{"shape": [1, 4], "dtype": "float32"}, {"type": "int"}, {"type": "NoneType"},
      {"name": "mask", "shape": [1, 4], "dtype": "float32"}]),
], ids=["api-kwargs", "shape-strings-and-keyword-string", "tensor-none-and-keyword-shape"])
def test_keyword_and_non_tensor_inputs(inputs, kwargs, described):
    report = layerscope.analyze(Keywords(), inputs, kwargs=kwargs)
    assert report.inputs == described
    assert report.totals.macs == 4 * 4  # one 1x4 row through Linear(4, 4)


def test_keyword_input_from_the_cli(tmp_path):
    src = tmp_path / "kw.py"
    src.write_text("from tests.test_capture_inputs import Keywords\n"
                   "def build():\n    return Keywords(), ((1, 4), 2)\n")
    code, out, err = run_cli("analyze", f"{src}:build", "--input", "2x4", "--input", "x=3x4",
                             "--format", "json")
    # --input replaces the factory's inputs: 2x4 alone, then a keyword 'x' clashes with it
    assert code == 2 and err.count("\n") == 1 and "rejected input 2x4, x=3x4" in err


@pytest.mark.parametrize("result,described,macs", [
    # a dict is keyword arguments, as in model(**tokenizer(text))
    ("Keywords(), {'x': torch.ones(2, 4), 'scale': 3}",
     [{"name": "x", "shape": [2, 4], "dtype": "float32"}, {"name": "scale", "type": "int"}], 32),
    ("Keywords(), ((2, 4), 3), {'mode': 'a'}",
     [{"shape": [2, 4], "dtype": "float32"}, {"type": "int"}, {"name": "mode", "type": "str"}],
     32),
    ("ScaleOnly(), 5", [{"type": "int"}], 0),
], ids=["dict-is-kwargs", "args-and-kwargs", "int-is-one-argument"])
def test_factory_example_inputs(tmp_path, result, described, macs):
    src = tmp_path / "f.py"
    src.write_text("import torch, torch.nn as nn\nfrom tests.test_capture_inputs import Keywords\n"
                   "class ScaleOnly(nn.Module):\n"
                   "    def forward(self, n):\n        return torch.ones(2) * n\n"
                   f"def build():\n    return {result}\n")
    report = layerscope.analyze(f"{src}:build")
    assert report.inputs == described
    assert report.totals.macs == macs


def test_forward_without_arguments_runs_with_no_inputs():
    class NoArgs(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 3)

        def forward(self):
            return self.lin(torch.ones(2, 4))

    report = layerscope.analyze(NoArgs())
    assert report.inputs == [] and report.totals.macs == 2 * 4 * 3


@pytest.mark.parametrize("inputs,kwargs,expected", [
    ({"x": torch.ones(1, 4)}, None, "inputs is a dict"),
    ((1, -16), None, "dimensions must be at least 1, got -16"),
    ((0, 4), None, "dimensions must be at least 1, got 0"),
    ("1x0", None, "inputs '1x0': dimensions must be at least 1, got 0"),
    (["1x-3"], None, "malformed inputs '1x-3': write dimensions joined by 'x'"),
    ((1, 4), {"mask": (2, 0)}, "input mask dimensions must be at least 1, got 0"),
    ((1, 4), [1], "kwargs must be a dict"),
    (16, None, "inputs=int is ambiguous"),
], ids=["dict", "negative", "zero", "zero-string", "negative-string", "zero-keyword",
        "kwargs-not-dict", "bare-int"])
def test_bad_inputs_are_one_line(inputs, kwargs, expected):
    with pytest.raises(UserError) as err:
        layerscope.analyze(Keywords(), inputs, kwargs=kwargs)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_rejected_input_is_described_by_shape_not_values():
    big = torch.arange(1000.0).reshape(10, 100)
    with pytest.raises(UserError) as err:
        layerscope.analyze(Keywords(), (big, 2), kwargs={"mask": torch.ones(10, 4)})
    text = str(err.value)
    assert "rejected input 10x100, int, mask=10x4" in text and "999" not in text
    assert len(text) < 300


# ---------------------------------------------------------------- no forward
@pytest.mark.parametrize("build,params,rows", [
    # Linear(3,4): 12+4; Linear(4,2): 8+2
    (lambda: nn.ModuleList([nn.Linear(3, 4), nn.Linear(4, 2)]), 16 + 10, ["0", "1"]),
    (lambda: nn.ParameterDict({"w": nn.Parameter(torch.zeros(3, 5))}), 15, ["(root)"]),
], ids=["module-list", "parameters-only"])
def test_modules_without_forward_get_a_parameters_only_report(build, params, rows):
    report = layerscope.analyze(build())
    assert report.totals.params == params and report.totals.weight_bytes == 4 * params
    assert report.totals.macs == 0 and [r.name for r in report.layers] == rows
    assert any("no forward ran" in n for n in report.notes)


# ---------------------------------------------------------------- real-tensor fallback
class DataDependent(nn.Module):
    """Shapes depend on values (.item()), and an attribute copy.deepcopy cannot copy."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.lock = threading.Lock()

    def forward(self, x):
        k = int(x.abs().sum().item()) % 3 + 1
        return self.bn(self.conv(x))[:, :, :k]


@pytest.mark.parametrize("mode", ["inference", "training"])
def test_data_dependent_fallback_leaves_the_model_untouched(mode):
    model = DataDependent()
    snap = _snapshot(model)
    report = layerscope.analyze(model, (1, 3, 8, 8), mode=mode)
    # conv: 4 out channels * 6*6 positions * 3*3*3 = 3888 MACs
    assert report.totals.macs == 3888
    _assert_unchanged(model, snap)
    assert int(model.bn.num_batches_tracked) == 0  # running statistics were not updated


def test_data_dependent_fallback_refuses_a_huge_input():
    # 1x3x100000x100000 float32 = 120 GB: refused before anything is allocated
    with pytest.raises(UserError) as err:
        layerscope.analyze(DataDependent(), (1, 3, 100_000, 100_000))
    assert "120000.00 MB of inputs" in str(err.value) and "\n" not in str(err.value)


def test_profile_passes_keyword_and_non_tensor_inputs():
    report = layerscope.profile(Keywords(), ((3, 4), 2), kwargs={"mask": (3, 4)}, runs=2,
                                warmup=0, backward=True, roofline=False)
    assert report.inputs[2] == {"name": "mask", "shape": [3, 4], "dtype": "float32"}
    assert report.settings["batch_size"] == 3
    assert report.totals.macs == 3 * 4 * 4  # three rows through Linear(4, 4)


CLI_MODELS = ("import torch, torch.nn as nn\n"
              "from tests.test_capture_inputs import DataDependent\n"
              "class Masked(nn.Module):\n"
              "    def __init__(self):\n        super().__init__()\n"
              "        self.lin = nn.Linear(4, 4)\n"
              "    def forward(self, x, mask=None):\n"
              "        y = self.lin(x)\n"
              "        return y if mask is None else y * mask\n"
              "def masked():\n    return Masked()\n"
              "def module_list():\n    return nn.ModuleList([nn.Linear(3, 4)])\n"
              "def data_dependent():\n    return DataDependent()\n")


@pytest.mark.parametrize("factory,extra,code,expected", [
    ("masked", ["--input", "2x4", "--input", "mask=2x4:bool"], 0, '"name": "mask"'),
    ("module_list", [], 0, "no forward ran"),
    ("masked", ["--input", "1x-16"], 2, "malformed --input '1x-16'"),
    ("masked", ["--input", "mask=2x0"], 2, "dimensions must be at least 1, got 0"),
    ("masked", ["--input", "2=2x4"], 2, "a keyword input is NAME=SHAPE"),
    ("data_dependent", ["--input", "1x3x100000x100000"], 2, "120000.00 MB of inputs"),
], ids=["keyword-tensor", "module-list", "negative-dim", "zero-dim-keyword", "bad-keyword-name",
        "huge-real-run"])
def test_cli_inputs(tmp_path, factory, extra, code, expected):
    src = tmp_path / "cli_models.py"
    src.write_text(CLI_MODELS)
    got, out, err = run_cli("analyze", f"{src}:{factory}", *extra, "--format", "json")
    assert got == code, err
    if code == 0:
        assert expected in out
    else:
        assert err.count("\n") == 1 and expected in err


def test_heading_names_keyword_inputs_and_value_types():
    from layerscope.views import view_for

    report = layerscope.analyze(Keywords(), ((3, 4), 2), kwargs={"mask": (3, 4)})
    assert "input 3x4 float32, int, mask=3x4 float32 ·" in view_for(report).heading(report)[1]


# ---------------------------------------------------------------- 0-d inputs
class Scaled(nn.Module):
    """A linear layer scaled by a 0-d tensor: forward(x: (1, 10), t: ())."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 4)

    def forward(self, x, t):
        assert t.dim() == 0, t.shape
        return self.fc(x) * t


SCALAR = {"shape": [], "dtype": "float32"}


@pytest.mark.parametrize("inputs,kwargs,described", [
    ([[1, 10], []], None, [{"shape": [1, 10], "dtype": "float32"}, SCALAR]),  # torchinfo's
    (((1, 10), ()), None, [{"shape": [1, 10], "dtype": "float32"}, SCALAR]),
    (((1, 10), torch.Size([])), None, [{"shape": [1, 10], "dtype": "float32"}, SCALAR]),
    (["1x10", "scalar"], None, [{"shape": [1, 10], "dtype": "float32"}, SCALAR]),
    (["1x10", "Scalar:float64"], None,
     [{"shape": [1, 10], "dtype": "float32"}, {"shape": [], "dtype": "float64"}]),
    (["1x10", "t=scalar"], None, [{"shape": [1, 10], "dtype": "float32"}, {"name": "t", **SCALAR}]),
    ([(1, 10)], {"t": ()}, [{"shape": [1, 10], "dtype": "float32"}, {"name": "t", **SCALAR}]),
], ids=["torchinfo-list", "empty-tuple", "empty-size", "text", "text-dtype", "text-keyword",
        "keyword-empty-tuple"])
def test_a_0d_input_is_given_by_the_empty_shape(inputs, kwargs, described):
    report = layerscope.analyze(Scaled(), inputs, kwargs=kwargs)
    assert report.inputs == described
    # Linear(10, 4) on one row: 40 MACs, 80 + 4 (bias) FLOPs; the product with t: 4 FLOPs
    assert (report.totals.macs, report.totals.flops) == (40, 88)


def test_a_0d_input_keeps_no_batch_dimension():
    report = layerscope.analyze(Scaled(), ["1x10", "scalar"], batch_size=3)
    assert report.inputs == [{"shape": [3, 10], "dtype": "float32"}, SCALAR]
    assert report.totals.macs == 3 * 40


def test_a_0d_input_from_the_cli(tmp_path):
    src = tmp_path / "scaled.py"
    src.write_text("from tests.test_capture_inputs import Scaled\n"
                   "def build():\n    return Scaled()\n")
    code, out, err = run_cli("analyze", f"{src}:build", "--input", "1x10", "--input", "scalar",
                             "--width", "160")
    assert code == 0, err
    assert "1x10, scalar" in out  # the root's input shapes
    code, out, err = run_cli("analyze", f"{src}:build", "--input", "1x10", "--input",
                             "scalar:int64", "--format", "json")
    assert code == 0 and '"shape": [],\n      "dtype": "int64"' in out, (err, out)
