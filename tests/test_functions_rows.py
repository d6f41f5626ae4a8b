"""``analyze --functions``: a container's "(own ops)" row split into one row per
torch function its forward calls, rows still summing exactly to the totals, the default output
untouched and nothing left installed."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import layerscope
from layerscope.analysis.capture.functions import function_name
from layerscope.frontends import zoo
from tests.helpers import run_cli

X = (1, 2, 4, 4)  # 32 elements, 128 bytes in float32
# conv 2->2, 3x3, padding 1, no bias: 32 outputs x (2 x 9) = 576 MACs, 1152 FLOPs
CONV_MACS = 32 * 2 * 9


def _conv():
    return nn.Conv2d(2, 2, 3, padding=1, bias=False)


class Residual(nn.Module):
    """y = relu(conv(x)) + x"""

    def __init__(self):
        super().__init__()
        self.conv = _conv()

    def forward(self, x):
        return F.relu(self.conv(x)) + x


class TwoRelus(nn.Module):
    """relu(conv(x)) + x.relu(): two relu calls aggregate into one row."""

    def __init__(self):
        super().__init__()
        self.conv = _conv()

    def forward(self, x):
        return F.relu(self.conv(x)) + x.relu()


class InPlace(nn.Module):
    """y = conv(x); y += x; flatten(y)"""

    def __init__(self):
        super().__init__()
        self.conv = _conv()

    def forward(self, x):
        y = self.conv(x)
        y += x
        return torch.flatten(y, 1)


class OwnWeight(nn.Module):
    """x @ w with w a parameter of the container itself (2x4 @ 4x3)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(4, 3))
        self.lin = nn.Linear(3, 3, bias=False)

    def forward(self, x):
        return self.lin(x @ self.w)


# model, input shape, expected rows (name, type, calls, macs, flops) in report order.
# Elementwise ops cost 1 FLOP per output element (ops/aten.py): relu 32, add 32.
CASES = {
    "residual": (Residual, X, [("(root) (relu)", "relu", 1, 0, 32),
                               ("(root) (add)", "add", 1, 0, 32),
                               ("conv", "Conv2d", 1, CONV_MACS, 2 * CONV_MACS)]),
    "two-relus": (TwoRelus, X, [("(root) (relu)", "relu", 2, 0, 32 + 32),
                                ("(root) (add)", "add", 1, 0, 32),
                                ("conv", "Conv2d", 1, CONV_MACS, 2 * CONV_MACS)]),
    # y += x reaches the mode as Tensor.add_ (aten.add_, 32 FLOPs); flatten of a contiguous
    # tensor is a view
    "in-place-and-flatten": (InPlace, X, [("(root) (add_)", "add_", 1, 0, 32),
                                          ("(root) (flatten)", "flatten", 1, 0, 0),
                                          ("conv", "Conv2d", 1, CONV_MACS, 2 * CONV_MACS)]),
    # x @ w: 2 x 4 x 3 = 24 MACs; the container's own parameter (12) stays in its (own ops) row;
    # lin: 2 x 3 x 3 = 18 MACs
    "own-weight": (OwnWeight, (2, 4), [("(root) (matmul)", "matmul", 1, 24, 48),
                                       ("(root)", "OwnWeight", 1, 0, 0),
                                       ("lin", "Linear", 1, 18, 36)]),
    # a nested block: its rows carry its path
    "nested": (lambda: nn.Sequential(Residual()), X,
               [("0 (relu)", "relu", 1, 0, 32), ("0 (add)", "add", 1, 0, 32),
                ("0.conv", "Conv2d", 1, CONV_MACS, 2 * CONV_MACS)]),
}


@pytest.mark.parametrize("build,shape,expected", CASES.values(), ids=CASES.keys())
def test_function_rows_are_hand_derived(build, shape, expected):
    report = layerscope.analyze(build(), inputs=shape, functions=True)
    got = [(r.name, r.type, r.calls, r.macs, r.flops) for r in report.layers]
    assert got == expected
    assert all(r.self_only for r in report.layers if r.name.startswith(("(root)", "0 ")))
    assert report.settings["functions"] is True


def test_only_the_remainder_is_labelled_own_ops():
    from layerscope.views.common import row_label

    report = layerscope.analyze(OwnWeight(), inputs=(2, 4), functions=True)
    assert [row_label(r) for r in report.layers] == ["(root) (matmul)", "(root) (own ops)", "lin"]


def test_function_rows_keep_shapes_and_params():
    report = layerscope.analyze(Residual(), inputs=X, functions=True)
    add = report.layers[1]
    assert (add.input_shapes, add.output_shapes) == ([list(X), list(X)], [list(X)])
    # add reads two 128-byte tensors and writes one; its result is a new 128-byte activation
    assert (add.bytes_read, add.bytes_written, add.activation_bytes) == (256, 128, 128)
    own = layerscope.analyze(OwnWeight(), inputs=(2, 4), functions=True).layers[1]
    assert (own.params, own.weight_bytes) == (12, 48)


class Masked(nn.Module):
    """Boolean indexing: a data-dependent shape, so the capture falls back to a real run."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        return y[y > 0].sum() + x.abs().sum()


def test_real_run_fallback_splits_too():
    report = layerscope.analyze(Masked(), inputs=torch.ones(2, 4), functions=True)
    assert [(r.name, r.calls) for r in report.layers] == [
        ("(root) (gt)", 1), ("(root) (getitem)", 1), ("(root) (sum)", 2), ("(root) (abs)", 1),
        ("(root) (add)", 1), ("lin", 1)]
    # gt and abs: 1 FLOP per element of the 2x4 tensors; the scalar add: 1
    r = {row.name: row for row in report.layers}
    assert (r["(root) (gt)"].flops, r["(root) (abs)"].flops, r["(root) (add)"].flops) == (8, 8, 1)
    assert sum(row.flops for row in report.layers) == report.totals.flops


def test_training_splits_the_backward_ops_too():
    report = layerscope.analyze(Residual(), inputs=X, functions=True, mode="training")
    r = {row.name: row for row in report.layers}
    # relu's backward is threshold_backward, 1 FLOP per element; add's backward passes the
    # gradient through (no op)
    assert (r["(root) (relu)"].backward_flops, r["(root) (add)"].backward_flops) == (32, 0)
    assert "(root)" not in r  # nothing left over for an (own ops) row
    assert sum(row.backward_flops for row in report.layers) == report.totals.backward_flops


def test_function_name():
    assert [function_name(f) for f in (torch.Tensor.__add__, F.relu, torch.Tensor.__matmul__,
                                       torch.Tensor.__iadd__, torch.Tensor.add_,
                                       torch.flatten)] == \
        ["add", "relu", "matmul", "iadd", "add_", "flatten"]


FIELDS = ("macs", "flops", "params", "weight_bytes", "buffer_bytes", "bytes_read",
          "bytes_written", "activation_bytes")


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["inference", "training"])
def test_resnet20_more_rows_same_totals(mode):
    plain = layerscope.analyze("resnet20", mode=mode)
    split = layerscope.analyze("resnet20", mode=mode, functions=True)
    # 9 blocks: (own ops) -> (relu) + (add); the root: (own ops) -> (relu) + (flatten)
    assert (len(plain.layers), len(split.layers)) == (61, 71)
    assert split.totals == plain.totals
    fields = FIELDS + (("backward_macs", "backward_flops", "backward_bytes_read",
                        "backward_bytes_written") if mode == "training" else ())
    for f in fields:
        assert sum(getattr(r, f) for r in split.layers) == getattr(split.totals, f), f
    assert "functions" not in plain.settings
    names = {r.name for r in split.layers}
    assert {"layer1.0 (relu)", "layer1.0 (add)", "(root) (flatten)"} <= names
    assert not {r.name for r in plain.layers if not r.self_only} - names  # leaves unchanged


@pytest.mark.integration
def test_leaves_nothing_installed():
    model = zoo.lookup("resnet20").build()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    layerscope.analyze(model, inputs=(2, 3, 32, 32), functions=True, mode="training")
    assert torch._C._len_torch_function_stack() == 0
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    assert all(p.grad is None for p in model.parameters())
    model(torch.zeros(1, 3, 32, 32))  # still runs


def test_cli_analyze_functions():
    code, out, err = run_cli("analyze", "resnet20", "--functions", "--format", "json")
    assert (code, err) == (0, "")
    d = json.loads(out)
    assert len(d["layers"]) == 71 and d["settings"]["functions"] is True
    code, out, _ = run_cli("analyze", "resnet20", "--functions")
    # the row's name says what it is: no "(own ops)" after it (the OwnWeight remainder keeps it)
    assert code == 0 and "layer1.0 (add) " in out and "(add) (own ops)" not in out
