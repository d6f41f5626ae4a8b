"""`layerscope env` and the environment every report records."""
from __future__ import annotations

import json

import numpy
import pytest

from layerscope.core.environment import _cudnn_version, environment
from layerscope.renderers.tables import environment_rows
from tests.helpers import run_cli
from tests.sample_results import ENV


def test_env_prints_ram_os_and_package_versions():
    code, out, _ = run_cli("env")
    assert code == 0
    labels = [line.split()[0] for line in out.splitlines()]
    for label in ("CPU", "RAM", "OS", "Python", "torch", "CUDA", "numpy", "onnx", "onnxruntime"):
        assert label in labels, label
    assert f"numpy        {numpy.__version__}" in out


def test_env_json_is_the_reports_environment():
    code, out, _ = run_cli("env", "--format", "json")
    env = json.loads(out)
    assert code == 0 and env == json.loads(json.dumps(environment()))
    assert env["ram_bytes"] > 0 and env["numpy"] == numpy.__version__
    assert isinstance(env["gpus"], list)
    code, out, _ = run_cli("analyze", "mnist-cnn", "--format", "json")
    assert json.loads(out)["environment"] == env


@pytest.mark.parametrize("raw,text", [(92400, "9.24.0"), (90100, "9.1.0"), (8902, "8.9.2"),
                                      (None, None)], ids=["cudnn9.24", "cudnn9.1", "cudnn8.9",
                                                          "none"])
def test_cudnn_version(raw, text):
    assert _cudnn_version(raw) == text


def test_older_reports_show_only_what_they_recorded():
    rows = dict(environment_rows(ENV))  # recorded before RAM, cuDNN and package versions
    assert "RAM" not in rows and "numpy" not in rows and rows["torchvision"] == "0.29.1"
    assert "layerscope" not in rows  # recorded from 0.4.0 on
    assert environment_rows(dict(ENV, layerscope="0.4.0"))[0] == ("layerscope", "0.4.0")
    rows = dict(environment_rows(dict(ENV, ram_bytes=8 * 2**30, onnx=None)))
    assert rows["RAM"] == "8.0 GiB" and rows["onnx"] == "not installed"
