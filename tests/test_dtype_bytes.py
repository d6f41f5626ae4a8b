"""``--dtype`` casts the model conceptually: parameter, buffer, gradient and optimizer-state bytes
count in that dtype (floating tensors only), in the rows and in the totals, on the fake-tensor
path and on the real-run path (TorchScript)."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn

import layerscope
from tests.helpers import run_cli

MNIST_PARAMS = 1_199_882  # conv1 320 + conv2 18,496 + fc1 1,179,776 + fc2 1,290


def _linear_bn() -> nn.Module:
    # Linear(4, 2): 8 weights + 2 biases = 10 params; BatchNorm1d(2): 2 + 2 params, buffers
    # running_mean (2), running_var (2) floating, num_batches_tracked one int64 (8 B, not cast).
    return nn.Sequential(nn.Linear(4, 2), nn.BatchNorm1d(2))


@pytest.mark.parametrize("dtype,itemsize", [(None, 4), ("float32", 4), ("bfloat16", 2),
                                            ("float16", 2), ("float64", 8)],
                         ids=["default", "fp32", "bf16", "fp16", "fp64"])
def test_rows_and_totals_follow_dtype(dtype, itemsize):
    r = layerscope.analyze(_linear_bn(), inputs=(3, 4), dtype=dtype)
    rows = {row.name: row for row in r.layers}
    assert rows["0"].params == 10 and rows["0"].weight_bytes == 10 * itemsize
    assert rows["1"].weight_bytes == 4 * itemsize
    assert rows["1"].buffer_bytes == 4 * itemsize + 8
    assert r.totals.weight_bytes == 14 * itemsize
    assert r.totals.buffer_bytes == 4 * itemsize + 8


@pytest.mark.parametrize("dtype,itemsize", [(None, 4), ("bfloat16", 2)], ids=["fp32", "bf16"])
def test_training_gradient_and_adam_state_follow_dtype(dtype, itemsize):
    r = layerscope.analyze(nn.Linear(4, 2), inputs=(3, 4), dtype=dtype, mode="training")
    assert r.totals.gradient_bytes == 10 * itemsize
    assert r.totals.optimizer_state_bytes == 2 * 10 * itemsize  # exp_avg + exp_avg_sq


def test_torchscript_real_run_follows_dtype(tmp_path):
    path = tmp_path / "linear.pt"
    torch.jit.save(torch.jit.script(nn.Linear(4, 2)), str(path))
    r = layerscope.analyze(str(path), inputs=(3, 4), dtype="bfloat16")
    assert r.totals.weight_bytes == 20


def test_mnist_cnn_bf16_cli():
    code, out, _ = run_cli("analyze", "mnist-cnn", "--dtype", "bfloat16", "--format", "json")
    assert code == 0
    totals = json.loads(out)["totals"]
    assert totals["params"] == MNIST_PARAMS
    assert totals["weight_bytes"] == 2 * MNIST_PARAMS == 2_399_764
    code, out, _ = run_cli("analyze", "mnist-cnn", "--dtype", "bfloat16", "--width", "200")
    assert "Params size (MB): 2.40" in out


def test_model_is_not_cast():
    model = _linear_bn()
    layerscope.analyze(model, inputs=(3, 4), dtype="bfloat16")
    assert all(p.dtype == torch.float32 for p in model.parameters())
