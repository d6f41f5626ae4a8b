"""`layerscope compare A B`: two reports joined by module path, every difference explained.

Acceptance: resnet50 against its ONNX export from both exporters (equal MACs, no row left
unexplained), mnist-cnn against its TorchScript file (every row and every summed total equal),
resnet20 against its legacy export (BatchNorm folding). Then one tiny case per explanation rule,
each with numbers derived by hand in its comment, and bad input (one line, exit code 2).

Exports are built once per session (session fixtures); the resnet50 ones take ~15 s together.
"""
import contextlib
import io
import json
import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

import layerscope
from layerscope.analysis.compare import Comparison, compare, legacy_scope
from layerscope.core.errors import UserError
from layerscope.core.report import LayerRow, Report, Totals
from layerscope.core.results import load_result
from layerscope.schema import errors as schema_errors
from tests.doc_examples import docs_root
from tests.helpers import run_cli
from tests.onnx_graphs import init, model, save, tensor

R50_MACS = 4_089_184_256
R50_PARAMS = 25_557_032


def _legacy(module: nn.Module, shape, path) -> str:
    """torch.onnx.export(..., dynamo=False, opset_version=17) of a module in eval mode."""
    module.eval()
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.zeros(shape),), str(path), dynamo=False,
                          opset_version=17)
    return str(path)


def _zoo_legacy(name: str, path) -> str:
    from layerscope.analysis.analyze_torch import load

    loaded = load(name, meta=False)
    return _legacy(loaded.module, loaded.inputs[0].shape, path)


@pytest.fixture(scope="session")
def cmp_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("compare")


@pytest.fixture(scope="session")
def r50_dynamo(cmp_dir):
    from layerscope.analysis.onnx_export import export_onnx

    path = str(cmp_dir / "resnet50_dynamo.onnx")
    export_onnx("resnet50", path)  # the default exporter: dynamo, BatchNorm kept
    return path


@pytest.fixture(scope="session")
def r50_legacy(cmp_dir):
    return _zoo_legacy("resnet50", cmp_dir / "resnet50_legacy.onnx")


@pytest.fixture(scope="session")
def r20_legacy(cmp_dir):
    return _zoo_legacy("resnet20", cmp_dir / "resnet20_legacy.onnx")


@pytest.fixture(scope="session")
def mnist_legacy(cmp_dir):
    return _zoo_legacy("mnist-cnn", cmp_dir / "mnist_legacy.onnx")


@pytest.fixture(scope="session")
def mnist_script(cmp_dir):
    from layerscope.analysis.analyze_torch import load

    module = load("mnist-cnn", meta=False).module.eval()
    path = str(cmp_dir / "mnist_cnn.pt")
    torch.jit.save(torch.jit.script(module), path)
    return path


def _rows(c: Comparison) -> dict:
    return {r.module: r for r in c.rows}


def _totals(c: Comparison) -> dict:
    return {t.metric: t for t in c.totals}


def _check_every_difference_explained(c: Comparison) -> None:
    assert c.unexplained == 0, [r.explanation for r in c.rows if "unexplained" in r.rules]
    for r in c.rows:
        if r.diff:
            assert r.explanation and r.rules and "unexplained" not in r.rules, r
        else:
            assert r.explanation is None and not r.rules, r
    for t in c.totals:
        assert bool(t.explanation) == bool(t.diff), t
        assert "unexplained" not in t.rules, t.explanation
    # rows sum to totals on both sides, so the row differences add up to the total's
    for t in c.totals:
        if t.metric != "peak_activation_bytes":
            assert sum(r.diff.get(t.metric, 0) for r in c.rows) == t.diff, t.metric


def _rule_rows(c: Comparison, rule: str) -> list[str]:
    return [r.module for r in c.rows if rule in r.rules]


# ---------------------------------------------------------------- acceptance: real models
@pytest.mark.integration
def test_resnet50_against_legacy_export_via_cli(r50_legacy, tmp_path):
    out = tmp_path / "c.json"
    code, _, err = run_cli("compare", "resnet50", r50_legacy, "--format", "json", "-o", str(out))
    assert code == 0, err
    d = json.loads(out.read_text())
    assert d["kind"] == "compare" and schema_errors(d) == []
    c = load_result(d)
    _check_every_difference_explained(c)
    t = _totals(c)
    assert t["macs"].a == t["macs"].b == R50_MACS and not t["macs"].diff
    # 53 BatchNorms (2 x 26,560 channels = 53,120 parameters) are folded away; their biases are
    # zeros (fresh statistics), so the exporter stores one per channel count: 64 + 128 + 256 +
    # 512 + 1024 + 2048 = 4,032 parameters. 25,557,032 - 53,120 + 4,032 = 25,507,944.
    assert (t["params"].a, t["params"].b) == (R50_PARAMS, 25_507_944)
    assert set(t["params"].rules) == {"batchnorm-folded", "bias-added"}
    assert t["buffer_bytes"].b == 0
    assert len(_rule_rows(c, "batchnorm-folded")) == 53
    assert len(_rule_rows(c, "bias-added")) == 53  # every conv gained the folded BN's bias
    assert len(_rule_rows(c, "in-place")) == 33  # 17 ReLU modules + 16 `out += identity`
    assert _rule_rows(c, "maxpool-indices") == ["maxpool"]
    rows = _rows(c)
    assert rows["layer1.0.bn1"].b is None and rows["layer1.0.bn1"].rules == ["batchnorm-folded"]
    # conv1: 64 output channels x 112 x 112 = 802,816 bias adds; 64 float32 biases = 256 bytes
    assert rows["conv1"].diff == {"params": 64, "weight_bytes": 256, "flops": 802_816,
                                  "bytes_read": 256}
    # the legacy exporter numbers repeated calls (relu, relu_1, relu_2): joined to `relu`
    assert rows["layer1.0.relu"].b_type == "Relu x3"
    assert "relu_1" not in " ".join(rows)
    # the table
    code, text, _ = run_cli("render", str(out), "--width", "160")
    assert code == 0
    assert "every difference explained" in text and "BN folded into layer1.0.conv1" in text
    assert "4,089,184,256" in text and "25,507,944" in text


@pytest.mark.integration
def test_resnet50_against_dynamo_export(r50_dynamo):
    c = compare("resnet50", r50_dynamo)
    _check_every_difference_explained(c)
    assert c.b["exporter"].startswith("dynamo")
    t = _totals(c)
    for metric in ("params", "weight_bytes", "macs", "flops", "bytes_read"):
        assert not t[metric].diff, metric
    assert t["macs"].a == R50_MACS
    # BatchNorm keeps num_batches_tracked (int64) in PyTorch only: 53 x 8 bytes
    assert t["buffer_bytes"].diff == -424 and t["buffer_bytes"].rules == ["num-batches-tracked"]
    # max-pool indices: 64 x 56 x 56 int64 = 1,605,632 bytes written by PyTorch only
    assert t["bytes_written"].diff == -1_605_632
    assert set(t["activation_bytes"].rules) == {"in-place", "maxpool-indices"}
    # the figures the compare and ONNX pages quote (1e6-byte MB, as written there)
    acts = t["activation_bytes"]
    compare_page = " ".join((docs_root() / "docs/compare.md").read_text().split())
    assert f"activation bytes {(acts.b - acts.a) / 1e6:+.1f} MB" in compare_page
    onnx_page = " ".join((docs_root() / "docs/onnx.md").read_text().split())
    assert f"(resnet50: {acts.b / 1e6:.1f} MB vs {acts.a / 1e6:.1f} MB)" in onnx_page
    assert len(_rule_rows(c, "num-batches-tracked")) == 53
    assert len(_rule_rows(c, "in-place")) == 33
    assert _rows(c)["layer1.0"].a_type == "Bottleneck (own ops)"
    assert _rows(c)["layer1.0"].b_type == "Add"
    assert t["peak_activation_bytes"].rules == ["memory-model"]


def test_mnist_cnn_against_its_torchscript_file(mnist_script):
    code, out, err = run_cli("compare", "mnist-cnn", mnist_script, "--format", "json")
    assert code == 0, err
    c = load_result(json.loads(out))
    # the .pt file has no default input: it takes A's (1x1x28x28)
    assert c.b["inputs"] == [{"shape": [1, 1, 28, 28], "dtype": "float32"}]
    assert any("analysed with A's input 1x1x28x28" in n for n in c.notes)
    assert not c.differing_rows() and c.unexplained == 0
    differing = [t.metric for t in c.totals if t.diff]
    # every row and every summed total is equal. The peak is not a sum over rows: eager
    # PyTorch keeps conv1's relu output (x, 86,528 bytes) alive while conv2 and its relu run,
    # because the variable x still names it; TorchScript frees it after its last use:
    # 3,136 (input) + 86,528 + 2 x 147,456 = 384,576 against 3,136 + 2 x 147,456 = 298,048.
    assert differing == ["peak_activation_bytes"]
    peak = _totals(c)["peak_activation_bytes"]
    assert (peak.a, peak.b) == (384_576, 298_048)
    assert peak.rules == ["interpreter-lifetimes"]


def test_resnet20_against_legacy_export_explains_batchnorm_folding(r20_legacy):
    c = compare("resnet20", r20_legacy)
    _check_every_difference_explained(c)
    rows = _rows(c)
    # 19 BatchNorms + 2 in the shortcuts; the shortcut conv is joined through the legacy name
    # /layer2/layer2.0/shortcut/shortcut.0/Conv -> layer2.0.shortcut.0
    assert len(_rule_rows(c, "batchnorm-folded")) == 21
    assert rows["layer2.0.shortcut.1"].rules == ["batchnorm-folded"]
    assert "`layer2.0.shortcut.0`" in rows["layer2.0.shortcut.1"].explanation
    # bn1: 16 channels: weight + bias 32 parameters; running mean, var (16 float32 each) and
    # num_batches_tracked (int64): 64 + 64 + 8 = 136 buffer bytes; 4 FLOPs x 16x32x32
    assert rows["bn1"].diff == {"params": -32, "weight_bytes": -128, "buffer_bytes": -136,
                                "flops": -65_536, "bytes_read": -65_792,
                                "bytes_written": -65_536, "activation_bytes": -65_536}
    assert not _totals(c)["macs"].diff
    # layer1.0.conv1's folded bias (16 zeros) is stored once for every 16-channel conv
    assert rows["layer1.0.conv1"].diff == {"flops": 16_384, "bytes_read": 64}
    assert "stores once" in rows["layer1.0.conv1"].explanation


def test_depth_zero_report_joins_every_node_into_the_root(mnist_legacy):
    report = layerscope.analyze("mnist-cnn", depth=0)
    c = compare(report, mnist_legacy)
    assert [r.module for r in c.rows] == ["(root)"]
    # F.max_pool2d on 1x64x24x24 -> 1x64x12x12: 9,216 int64 indices = 73,728 bytes
    assert c.rows[0].diff == {"bytes_written": -73_728, "activation_bytes": -73_728}
    assert c.rows[0].rules == ["maxpool-indices"]


def test_saved_report_json_is_a_side(tmp_path, mnist_legacy):
    saved = tmp_path / "mnist.json"
    assert run_cli("analyze", "mnist-cnn", "-o", str(saved))[0] == 0
    c = compare(str(saved), mnist_legacy)
    assert c.a["source"] == str(saved) and c.a["frontend"] == "torch"
    assert _rule_rows(c, "maxpool-indices") == ["(root)"] and c.unexplained == 0


# ---------------------------------------------------------------- join keys
LEGACY_NAMES = [
    ("/conv1/Conv", "conv1"),
    ("/Relu", ""),
    ("/layer1/layer1.0/conv1/Conv", "layer1.0.conv1"),
    ("/layer1/layer1.0/downsample/downsample.0/Conv", "layer1.0.downsample.0"),
    ("/classifier/classifier.6/Gemm", "classifier.6"),
    ("/features/features.3/squeeze/Conv", "features.3.squeeze"),
    ("Identity_3", None),
    ("node_conv2d", None),
]


@pytest.mark.parametrize("name,path", LEGACY_NAMES, ids=[n for n, _ in LEGACY_NAMES])
def test_legacy_scope_from_node_name(name, path):
    assert legacy_scope(name) == path


def test_legacy_scope_drops_call_numbers_of_known_modules():
    known = {"", "layer1", "layer1.0", "layer1.0.relu", "conv_1"}
    assert legacy_scope("/layer1/layer1.0/relu_2/Relu", known) == "layer1.0.relu"
    assert legacy_scope("/layer1/layer1.0/relu_2/Relu") == "layer1.0.relu_2"
    assert legacy_scope("/conv_1/Conv", known) == "conv_1"  # a real name ending in _N stays


# ---------------------------------------------------------------- one case per rule
class ConvBnReluPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, bias=False)
        self.bn = nn.BatchNorm2d(2)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        return self.pool(self.relu(self.bn(self.conv(x))))


def test_legacy_rules_batchnorm_bias_in_place_maxpool(tmp_path):
    m = ConvBnReluPool()
    c = compare(layerscope.analyze(m, (1, 1, 6, 6)), _legacy(m, (1, 1, 6, 6), tmp_path / "m.onnx"))
    _check_every_difference_explained(c)
    rows = _rows(c)
    # conv: 1x1x6x6 -> 1x2x4x4 = 32 outputs; the folded bias: 2 float32 values
    assert rows["conv"].rules == ["bias-added"]
    assert rows["conv"].diff == {"params": 2, "weight_bytes": 8, "flops": 32, "bytes_read": 8}
    assert "BatchNorm `bn` was folded into it" in rows["conv"].explanation
    # bn: weight + bias 4 params (16 B); mean + var 16 B + num_batches_tracked 8 B = 24 B;
    # 4 FLOPs x 32; reads x (128 B) + 4 vectors of 2 floats (32 B) = 160; writes 128
    assert rows["bn"].rules == ["batchnorm-folded"]
    assert rows["bn"].diff == {"params": -4, "weight_bytes": -16, "buffer_bytes": -24,
                               "flops": -128, "bytes_read": -160, "bytes_written": -128,
                               "activation_bytes": -128}
    # ReLU(inplace=True): 128 bytes written in place in PyTorch, a new tensor in ONNX
    assert rows["relu"].rules == ["in-place"]
    assert rows["relu"].diff == {"activation_bytes": 128}
    # MaxPool2d(2): 1x2x2x2 = 8 outputs -> 8 int64 indices = 64 bytes
    assert rows["pool"].rules == ["maxpool-indices"]
    assert rows["pool"].diff == {"bytes_written": -64, "activation_bytes": -64}


@pytest.mark.integration
def test_folded_node_under_the_batchnorm_scope(tmp_path):
    # `layerscope export --fold-batchnorm` (onnxscript's optimizer) fuses conv + bn into one
    # Conv node that carries bn's scope and drops the all-zero folded bias: conv's numbers
    # (18 weights, 288 MACs = 32 outputs x 9) move to the bn row, whose own numbers are gone
    from layerscope.analysis.onnx_export import export_onnx

    m = ConvBnReluPool()
    path = str(tmp_path / "fold.onnx")
    export_onnx(m, path, inputs=(1, 1, 6, 6), fold_batchnorm=True, verify=False)
    c = compare(layerscope.analyze(m, (1, 1, 6, 6)), path)
    _check_every_difference_explained(c)
    rows = _rows(c)
    assert rows["conv"].b is None and rows["conv"].rules == ["folded-scope"]
    assert rows["conv"].diff["macs"] == -288 and rows["conv"].diff["params"] == -18
    assert rows["bn"].b_type == "Conv"
    assert rows["bn"].rules == ["folded-scope", "batchnorm-folded"]
    # 18 weights arrive, 4 BN parameters leave; 24 buffer bytes leave; 288 MACs arrive
    assert rows["bn"].diff["params"] == 14 and rows["bn"].diff["macs"] == 288
    assert not _totals(c)["macs"].diff and _totals(c)["params"].diff == -4


class Drop(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.drop = nn.Dropout(0.5)
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(self.drop(self.fc1(x)))


def test_dropout_removed(tmp_path):
    m = Drop()
    training = layerscope.analyze(m, (1, 4), mode="training")  # dropout does work here
    c = compare(training, _legacy(m, (1, 4), tmp_path / "d.onnx"))
    _check_every_difference_explained(c)
    drop = _rows(c)["drop"]
    assert drop.rules == ["dropout-removed"] and drop.b is None
    # training dropout: 2 FLOPs per element of 1x8
    assert drop.diff["flops"] == -16
    assert drop.diff == {m: -v for m, v in drop.a.items() if v}


class Lin3(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x)


def test_linear_as_matmul_add(tmp_path):
    m = Lin3()
    c = compare(layerscope.analyze(m, (1, 2, 4)), _legacy(m, (1, 2, 4), tmp_path / "l.onnx"))
    _check_every_difference_explained(c)
    fc = _rows(c)["fc"]
    assert fc.b_type == "MatMul, Add" and fc.rules == ["linear-matmul-add"]
    # the 1x2x3 product (24 bytes) is written by MatMul and read back by Add
    assert fc.diff == {"bytes_read": 24, "bytes_written": 24, "activation_bytes": 24}


class GeluNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.GELU()
        self.ln = nn.LayerNorm(4)

    def forward(self, x):
        return self.ln(self.act(x))


def test_gelu_decomposed_and_layer_norm_statistics(tmp_path):
    m = GeluNorm()
    c = compare(layerscope.analyze(m, (1, 2, 4)), _legacy(m, (1, 2, 4), tmp_path / "g.onnx"))
    _check_every_difference_explained(c)
    rows = _rows(c)
    # GELU on 8 elements: PyTorch 1 op (8 FLOPs, reads 32 B, writes 32 B); ONNX x / sqrt2, Erf,
    # + 1, x * ..., * 0.5: 5 nodes of 8 FLOPs each, reading 32+32+32+64+32 = 192 B and writing
    # 5 x 32 = 160 B
    assert rows["act"].rules == ["decomposed"]
    assert rows["act"].diff == {"flops": 32, "bytes_read": 160, "bytes_written": 128,
                                "activation_bytes": 128}
    # LayerNorm(4) over 1x2x4: mean and rstd of 2 rows, float32: 2 x 2 x 4 = 16 bytes
    assert rows["ln"].rules == ["norm-statistics"]
    assert rows["ln"].diff == {"bytes_written": -16, "activation_bytes": -16}


class Transposed(nn.Module):
    def forward(self, x):
        return x.transpose(1, 2) * 2


def test_view_in_pytorch_copy_in_onnx(tmp_path):
    m = Transposed()
    c = compare(layerscope.analyze(m, (1, 2, 4)), _legacy(m, (1, 2, 4), tmp_path / "t.onnx"))
    _check_every_difference_explained(c)
    root = _rows(c)["(root)"]
    # Transpose copies the 1x2x4 float32 tensor: 32 bytes read, written and created
    assert root.rules == ["view-or-copy"]
    assert root.diff == {"bytes_read": 32, "bytes_written": 32, "activation_bytes": 32}


class Borrower(nn.Module):
    def __init__(self):
        super().__init__()
        self.child = nn.Linear(4, 3)

    def forward(self, x):  # uses the child's weights without calling the child
        return F.linear(x, self.child.weight, self.child.bias)


def test_parameters_counted_at_the_parent(tmp_path):
    m = Borrower()
    c = compare(layerscope.analyze(m, (1, 4)), _legacy(m, (1, 4), tmp_path / "b.onnx"))
    _check_every_difference_explained(c)
    rows = _rows(c)
    # PyTorch: the parameters belong to `child`; ONNX: to the Gemm, which has the root's scope
    assert rows["child"].diff == {"params": -15, "weight_bytes": -60}
    assert rows["(root)"].diff == {"params": 15, "weight_bytes": 60}
    assert rows["child"].rules == rows["(root)"].rules == ["moved"]


def test_batch_size(tmp_path):
    m = Lin3()
    one, four = layerscope.analyze(m, (1, 4)), layerscope.analyze(m, (4, 4))
    c = compare(one, four)
    _check_every_difference_explained(c)
    fc = _rows(c)["fc"]
    # Linear(4, 3): batch 1: 12 MACs, 2 x 12 + 3 = 27 FLOPs, reads 16 + 48 + 12 = 76 B, writes
    # 12 B; batch 4: 48 MACs, 108 FLOPs, reads 64 + 60 = 124 B, writes 48 B
    assert fc.diff == {"macs": 36, "flops": 81, "bytes_read": 48, "bytes_written": 36,
                       "activation_bytes": 36}
    assert fc.rules == ["batch"] and "60 bytes of weights" in fc.explanation
    assert _totals(c)["peak_activation_bytes"].rules == ["batch"]


# -- hand-built ONNX graphs (legacy-style node names carry the module path)
def _node(op, inputs, outputs, name, domain="", **attrs):
    return helper.make_node(op, inputs, outputs, name=name, domain=domain, **attrs)


class Conv(nn.Module):
    def __init__(self, bias: bool):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, bias=bias)

    def forward(self, x):
        return self.conv(x)


def test_bias_the_exporter_added(tmp_path):
    # Conv(x: 1x1x4x4, W: 2x1x3x3, B: 2) -> 1x2x2x2: 8 bias adds, 2 floats (8 bytes)
    g = model([_node("Conv", ["x", "W", "B"], ["y"], "/conv/Conv")],
              [tensor("x", [1, 1, 4, 4])], [tensor("y", [1, 2, 2, 2])],
              [init("W", [2, 1, 3, 3]), init("B", [2], 0.0)])
    c = compare(layerscope.analyze(Conv(bias=False), (1, 1, 4, 4)), save(g, tmp_path))
    _check_every_difference_explained(c)
    conv = _rows(c)["conv"]
    assert conv.diff == {"params": 2, "weight_bytes": 8, "flops": 8, "bytes_read": 8}
    assert conv.rules == ["bias-added"] and "the exporter added it" in conv.explanation


class TwoConvs(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 2, 3)
        self.conv2 = nn.Conv2d(2, 2, 1)

    def forward(self, x):
        return self.conv2(self.conv1(x))


def test_shared_initializer(tmp_path):
    # both convs read the same 2-value bias B: counted once, at conv1
    g = model([_node("Conv", ["x", "W1", "B"], ["h"], "/conv1/Conv"),
               _node("Conv", ["h", "W2", "B"], ["y"], "/conv2/Conv")],
              [tensor("x", [1, 1, 4, 4])], [tensor("y", [1, 2, 2, 2])],
              [init("W1", [2, 1, 3, 3]), init("W2", [2, 2, 1, 1]), init("B", [2], 0.0)])
    c = compare(layerscope.analyze(TwoConvs(), (1, 1, 4, 4)), save(g, tmp_path))
    _check_every_difference_explained(c)
    rows = _rows(c)
    assert not rows["conv1"].diff
    assert rows["conv2"].diff == {"params": -2, "weight_bytes": -8}
    assert rows["conv2"].rules == ["shared-initializer"]


class ConvRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.conv(x))


def test_fused_activation(tmp_path):
    # onnxruntime's FusedConv(activation=Relu) does conv + bias + relu in one node: the 8 relu
    # FLOPs move to the conv row; relu's 1x2x2x2 tensor (32 bytes) is never written or read
    g = model([_node("FusedConv", ["x", "W", "B"], ["y"], "/conv/Conv", "com.microsoft",
                     activation="Relu")],
              [tensor("x", [1, 1, 4, 4])], [tensor("y", [1, 2, 2, 2])],
              [init("W", [2, 1, 3, 3]), init("B", [2])], extra_opsets=[("com.microsoft", 1)])
    c = compare(layerscope.analyze(ConvRelu(), (1, 1, 4, 4)), save(g, tmp_path))
    _check_every_difference_explained(c)
    rows = _rows(c)
    assert rows["conv"].diff == {"flops": 8} and rows["conv"].rules == ["fused-into"]
    assert rows["relu"].rules == ["fused-activation"] and rows["relu"].b is None
    assert rows["relu"].diff == {"flops": -8, "bytes_read": -32, "bytes_written": -32,
                                 "activation_bytes": -32}


class Bn(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(2)

    def forward(self, x):
        return self.bn(x)


def test_num_batches_tracked(tmp_path):
    g = model([_node("BatchNormalization", ["x", "s", "b", "mean", "var"], ["y"],
                     "/bn/BatchNormalization")],
              [tensor("x", [1, 2, 2, 2])], [tensor("y", [1, 2, 2, 2])],
              [init("s", [2], 1.0), init("b", [2], 0.0), init("mean", [2], 0.0),
               init("var", [2], 1.0)])
    c = compare(layerscope.analyze(Bn(), (1, 2, 2, 2)), save(g, tmp_path))
    _check_every_difference_explained(c)
    bn = _rows(c)["bn"]
    # running mean and var (2 float32 each) in both; num_batches_tracked (int64) in PyTorch
    assert (bn.a["buffer_bytes"], bn.b["buffer_bytes"]) == (24, 16)
    assert bn.diff == {"buffer_bytes": -8} and bn.rules == ["num-batches-tracked"]


class Flat(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc(x.view(x.size(0), -1))


def test_shape_arithmetic(tmp_path):
    # x.view(x.size(0), -1) as the legacy exporter writes it without constant folding:
    # Shape(x) reads x (32 B) and writes 4 int64 (32 B); Gather(shape, 0) reads 32 B, writes
    # one int64 (8 B); Unsqueeze is a view; Concat([n], [-1]) reads 8 B, writes 16 B; Reshape
    # is a view. 72 bytes read, 56 written; PyTorch uses Python integers.
    i64 = TensorProto.INT64
    nodes = [_node("Shape", ["x"], ["s"], "/Shape"),
             _node("Gather", ["s", "zero"], ["n"], "/Gather", axis=0),
             _node("Unsqueeze", ["n", "axes"], ["n1"], "/Unsqueeze"),
             _node("Concat", ["n1", "minus1"], ["shape"], "/Concat", axis=0),
             _node("Reshape", ["x", "shape"], ["flat"], "/Reshape"),
             _node("Gemm", ["flat", "W", "B"], ["y"], "/fc/Gemm", transB=1)]
    inits = [numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
             numpy_helper.from_array(np.array([0], dtype=np.int64), "axes"),
             numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus1"),
             init("W", [2, 8]), init("B", [2])]
    g = model(nodes, [tensor("x", [1, 2, 2, 2])], [tensor("y", [1, 2])], inits,
              value_info=[tensor("flat", [1, 8]), tensor("shape", [2], i64)])
    c = compare(layerscope.analyze(Flat(), (1, 2, 2, 2)), save(g, tmp_path))
    _check_every_difference_explained(c)
    root = _rows(c)["(root)"]
    assert root.rules == ["shape-ops"]
    assert root.diff == {"bytes_read": 72, "bytes_written": 56, "activation_bytes": 56}
    assert not _rows(c)["fc"].diff


# -- hand-built reports: what no exporter produces on demand
def _report(frontend: str, rows: list[LayerRow], peak: int = 0) -> Report:
    t = Totals(**{m: sum(getattr(r, m) for r in rows)
                  for m in ("params", "weight_bytes", "buffer_bytes", "macs", "flops",
                            "bytes_read", "bytes_written", "activation_bytes")})
    t.peak_activation_bytes = peak
    return Report("hand", frontend, [{"shape": [1, 4], "dtype": "float32"}], t, rows)


def test_uncounted_nodes():
    a = _report("torch", [LayerRow("fc", "Linear", 1, 1, [[1, 4]], [[1, 3]], params=15,
                                   weight_bytes=60, macs=12, flops=27, bytes_read=76,
                                   bytes_written=12, activation_bytes=12)])
    b = _report("onnx", [LayerRow("/fc/Gemm", "Gemm", 1, 1, [["?", 4], [3, 4], [3]], [["?", 3]],
                                  params=15, weight_bytes=60)])
    c = compare(a, b)
    fc = _rows(c)["fc"]
    assert fc.rules == ["uncounted"] and "shape inference left their shapes unknown" in \
        fc.explanation
    assert c.unexplained == 0


def test_unexplained_says_exactly_which_numbers_differ():
    row = dict(params=15, weight_bytes=60, macs=12, flops=27, bytes_read=76, bytes_written=12,
               activation_bytes=12)
    a = _report("torch", [LayerRow("fc", "Linear", 1, 1, [[1, 4]], [[1, 3]], **row)])
    b = _report("onnx", [LayerRow("/fc/Gemm", "Gemm", 1, 1, [[1, 4], [3, 4], [3]], [[1, 3]],
                                  **(row | {"macs": 10, "flops": 23}))])
    c = compare(a, b)
    fc = _rows(c)["fc"]
    assert fc.rules == ["unexplained"] and c.unexplained == 3  # the row, MACs and FLOPs totals
    assert fc.explanation == ("Unexplained: MACs -2, FLOPs -4 (no rule accounts for them).")
    assert _totals(c)["macs"].rules == ["unexplained"]


def test_identical_reports():
    r = layerscope.analyze(Lin3(), (1, 4))
    c = compare(r, r)
    assert c.identical and not c.explanations and c.unexplained == 0
    assert all(not r.diff for r in c.rows) and all(not t.diff for t in c.totals)


# ---------------------------------------------------------------- output
def test_json_round_trip_and_formats(tmp_path, mnist_legacy):
    c = compare("mnist-cnn", mnist_legacy)
    d = json.loads(json.dumps(c.to_dict()))
    assert schema_errors(d) == []
    back = load_result(d)
    assert isinstance(back, Comparison) and back.to_dict() == d
    code, out, err = run_cli("compare", "mnist-cnn", mnist_legacy, "--all", "--width", "150")
    assert code == 0, err
    assert "Rows joined by module path" in out and "fc1" in out  # --all: equal rows too
    assert "max-pool indices" in out and "Explanations:" in out
    csv_path = tmp_path / "c.csv"
    assert run_cli("compare", "mnist-cnn", mnist_legacy, "-o", str(csv_path))[0] == 0
    lines = csv_path.read_text().splitlines()
    assert lines[0].startswith("module,a_type,b_type,a_params") and len(lines) == 1 + len(c.rows)


# ---------------------------------------------------------------- bad input
def _bad(tmp_path, kind, good):
    if kind == "missing-onnx":
        return ["mnist-cnn", str(tmp_path / "nope.onnx")], "no such file"
    if kind == "missing-pt":
        return [str(tmp_path / "nope.pt"), good], "no such file"
    if kind == "missing-json":
        return [str(tmp_path / "nope.json"), good], "no such file"
    if kind == "unknown-model":
        return ["resnet5O", good], "unknown model"
    if kind == "not-a-report":
        path = tmp_path / "ops.json"
        from tests.sample_results import ops_table

        path.write_text(json.dumps(ops_table().to_dict()))
        return [str(path), good], "compare needs a report of kind analyze"
    if kind == "bad-width":
        return ["mnist-cnn", good, "--width", "10"], "--width must be at least 40"
    raise AssertionError(kind)


BAD = ["missing-onnx", "missing-pt", "missing-json", "unknown-model", "not-a-report",
       "bad-width"]


@pytest.mark.parametrize("kind", BAD)
def test_bad_input_is_one_line_exit_2(tmp_path, kind, mnist_legacy):
    argv, expected = _bad(tmp_path, kind, mnist_legacy)
    out_file = tmp_path / "out.json"
    code, out, err = run_cli("compare", *argv, "-o", str(out_file))
    assert code == 2 and out == "", out
    assert err.count("\n") == 1 and err.startswith("layerscope: error: "), err
    assert expected in err and "Traceback" not in err
    assert not out_file.exists()


def test_api_raises_user_error(tmp_path):
    with pytest.raises(UserError, match="unknown model"):
        compare("resnet5O", "mnist-cnn")


def test_terminal_table_golden(update_golden):
    from layerscope.renderers.terminal import to_text
    from tests.helpers import check_golden
    from tests.sample_results import compare_result

    check_golden("compare_sample.txt", to_text(compare_result(), width=150), update_golden)
