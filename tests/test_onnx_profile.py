"""profile model.onnx: onnxruntime's per-node latency joined with the static rows."""
import json

import pytest
import torch

from layerscope.analysis.ort_profile import _node_times
from layerscope.frontends import zoo
from tests.helpers import run_cli


@pytest.fixture(scope="module")
def mnist_onnx(tmp_path_factory):
    path = tmp_path_factory.mktemp("ort") / "mnist.onnx"
    model = zoo.lookup("mnist-cnn").build().eval()
    torch.onnx.export(model, (torch.randn(1, 1, 28, 28),), str(path), dynamo=False,
                      opset_version=17)
    return str(path)


def test_node_events_split_into_runs_and_warmup_dropped():
    # three model_run windows (us): [0,100], [200,300], [400,500]; warm-up = 1 run
    events = [{"cat": "Session", "name": "model_run", "ts": t, "dur": 100} for t in (0, 200, 400)]
    events += [
        {"cat": "Node", "name": "conv_kernel_time", "ts": 10, "dur": 50,
         "args": {"op_name": "Conv"}},
        {"cat": "Node", "name": "conv_kernel_time", "ts": 210, "dur": 40,
         "args": {"op_name": "Conv"}},
        {"cat": "Node", "name": "relu_kernel_time", "ts": 260, "dur": 5,
         "args": {"op_name": "Relu"}},
        {"cat": "Node", "name": "conv_kernel_time", "ts": 410, "dur": 30,
         "args": {"op_name": "Conv"}},
        {"cat": "Node", "name": "conv_fence_before", "ts": 420, "dur": 1},  # not a kernel event
    ]
    runs = _node_times(events, warmup=1)
    assert [sorted(r) for r in runs] == [["conv", "relu"], ["conv"]]
    assert runs[0]["conv"][0] == pytest.approx(40e-6) and runs[1]["conv"][0] == pytest.approx(30e-6)
    assert runs[0]["relu"][1] == "Relu"


def test_profile_onnx_joins_every_node(mnist_onnx, tmp_path):
    out = tmp_path / "p.json"
    code, _, err = run_cli("profile", mnist_onnx, "--runs", "4", "--warmup", "2",
                           "--no-roofline", "-o", str(out))
    assert code == 0, err
    d = json.loads(out.read_text())
    assert d["kind"] == "profile" and d["frontend"] == "onnx"
    assert d["end_to_end"]["n"] == 4
    convs = [r for r in d["layers"] if r["type"] == "Conv"]
    assert len(convs) == 2 and all(r["time"]["n"] == 4 and r["time"]["median_s"] > 0
                                   for r in convs)
    assert not any("(fused)" in r["type"] for r in d["layers"])  # optimisations off
    assert sum(r["macs"] for r in d["layers"]) == d["totals"]["macs"] == \
        32 * 9 * 26**2 + 64 * 32 * 9 * 24**2 + 9216 * 128 + 128 * 10


def test_fused_nodes_are_reported_as_such(mnist_onnx, tmp_path):
    out = tmp_path / "p.json"
    code, _, err = run_cli("profile", mnist_onnx, "--runs", "2", "--optimization", "all",
                           "--no-roofline", "-o", str(out))
    assert code == 0, err
    d = json.loads(out.read_text())
    fused = [r for r in d["layers"] if r["type"].endswith("(fused)")]
    if fused:  # onnxruntime fuses Conv+Relu on CPU at this level
        assert any("fused" in n for n in d["notes"])
        assert all(r["macs"] == 0 for r in fused)


@pytest.mark.parametrize("argv,expected", [
    (["--backward"], "do not apply"),
    (["--runs", "0"], "--runs must be at least 1"),
], ids=["backward", "zero-runs"])
def test_profile_onnx_bad_input(mnist_onnx, argv, expected):
    code, _, err = run_cli("profile", mnist_onnx, *argv)
    assert code == 2 and expected in err and err.count("\n") == 1, err
