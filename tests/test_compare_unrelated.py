"""compare: a layer only one of two PyTorch models has is explained with the right sign and
the right side (a BatchNorm the other model never had is not "folded"), and two models that
share few layers get a typed note saying they look unrelated."""
import json
from collections import OrderedDict

import pytest
import torch.nn as nn

import layerscope
from layerscope.analysis.compare import Comparison, compare
from layerscope.core.results import load_result
from tests.helpers import run_cli


class WithBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.bn(self.conv(x)))


class NoBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.conv(x))


SHAPE = (1, 3, 8, 8)
# bn on a 1x8x8x8 output (512 values): weight + bias 16 params (64 B); running mean + var
# 2 x 8 float32 = 64 B + num_batches_tracked 8 B = 72 buffer bytes; 4 FLOPs a value = 2,048;
# reads the 2,048-byte input + 4 vectors of 8 floats (128 B) = 2,176; writes 2,048
BN = {"params": 16, "weight_bytes": 64, "buffer_bytes": 72, "flops": 2048,
      "bytes_read": 2176, "bytes_written": 2048, "activation_bytes": 2048}


@pytest.mark.parametrize("a,b,sign,words", [
    (WithBN, NoBN, -1, "Only A has this BatchNorm2d: B has no `bn`, so B does without its 16 "
                       "parameters, 72 buffer bytes, 2,048 FLOPs, 2,048 activation bytes"),
    (NoBN, WithBN, +1, "Only B has this BatchNorm2d: A has no `bn`, so B adds its 16 "
                       "parameters, 72 buffer bytes, 2,048 FLOPs, 2,048 activation bytes"),
], ids=["A-has-bn", "B-has-bn"])
def test_a_batchnorm_in_one_model_only_is_explained_the_right_way_round(a, b, sign, words):
    c = compare(layerscope.analyze(a(), SHAPE), layerscope.analyze(b(), SHAPE))
    rows = {r.module: r for r in c.rows}
    assert rows["bn"].rules == ["only-in-one"]
    assert rows["bn"].diff == {m: sign * v for m, v in BN.items()}
    assert rows["bn"].explanation.startswith(words)
    assert "folded" not in " ".join(c.explanations)
    assert c.unexplained == 0
    assert c.unrelated is None  # conv and relu match: 2 of the smaller model's 2 layers


def _linears(*names):
    return nn.Sequential(OrderedDict((n, nn.Linear(4, 4)) for n in names))


# (A's layers, B's layers, (matched, A layers, B layers) or None when related); the models
# look unrelated when matched < half of the smaller model's layers
UNRELATED = [
    (("a", "b"), ("a", "b"), None),
    (("a", "b", "c", "d"), ("a", "b"), None),  # 2 of 2
    (("a", "b"), ("a", "c"), None),  # 1 of 2: exactly half is related
    (("a", "b", "c"), ("a", "d", "e"), (1, 3, 3)),  # 1 of 3
    (("a", "b", "c"), ("x", "y"), (0, 3, 2)),  # none of 2
    (("a", "b", "c", "d", "e"), ("a", "x", "y", "z"), (1, 5, 4)),  # 1 of 4
]


@pytest.mark.parametrize("la,lb,expected", UNRELATED,
                         ids=["same", "superset", "half", "one-of-three", "none", "one-of-four"])
def test_models_sharing_few_layers_are_said_to_look_unrelated(la, lb, expected):
    c = compare(layerscope.analyze(_linears(*la), (1, 4)),
                layerscope.analyze(_linears(*lb), (1, 4)))
    if expected is None:
        assert c.unrelated is None
        return
    u = c.unrelated
    assert (u.matched, u.a_layers, u.b_layers) == expected
    assert u.text.startswith(f"the models look unrelated: {expected[0]} of the smaller "
                             f"model's {min(expected[1:])} layers match")
    back = Comparison.from_dict(c.to_dict())
    assert back.unrelated == u


def test_the_note_is_shown_by_the_table_and_kept_in_json(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import torch.nn as nn\n"
                    "def mlp():\n    return nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))\n"
                    "def other():\n    return nn.Sequential(nn.Identity(), nn.Identity(), "
                    "nn.Linear(4, 4), nn.Linear(4, 4))\n")
    code, out, err = run_cli("compare", f"{path}:mlp", f"{path}:other", "--input", "1x4")
    assert code == 0, err
    assert "Note: the models look unrelated: 0 of the smaller model's 2 layers match" \
        in " ".join(out.split())
    code, out, err = run_cli("compare", f"{path}:mlp", f"{path}:other", "--input", "1x4",
                             "--format", "json", "-o", str(tmp_path / "c.json"))
    assert code == 0, err
    saved = load_result(json.loads((tmp_path / "c.json").read_text()))
    assert (saved.unrelated.matched, saved.unrelated.a_layers, saved.unrelated.b_layers) \
        == (0, 2, 2)
