"""The command line: formats, golden tables, and one clear line for every bad input."""
import csv
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from layerscope.core.report import Report
from tests.helpers import check_golden, run_cli


def test_table_golden(update_golden, tmp_path):
    # a file in tmp_path, never os.devnull: writing there used to replace /dev/null
    out = tmp_path / "table.txt"
    code, _, err = run_cli("analyze", "resnet20", "--depth", "2", "--width", "200",
                           "-o", str(out), "--format", "table")
    assert code == 0, err
    check_golden("analyze_resnet20_depth2.txt", out.read_text(), update_golden)


def test_training_table_golden(update_golden):
    from layerscope import analyze
    from layerscope.renderers.terminal import to_text

    report = analyze("mnist-cnn", mode="training", optimizer="momentum")
    check_golden("analyze_mnist_training.txt", to_text(report, width=200), update_golden)


def test_csv_rows_sum_to_totals(tmp_path):
    out = tmp_path / "r.csv"
    code, _, err = run_cli("analyze", "resnet20", "-o", str(out))
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    code, js, _ = run_cli("analyze", "resnet20", "--format", "json")
    totals = json.loads(js)["totals"]
    for column in ("macs", "flops", "params", "weight_bytes", "bytes_read", "bytes_written",
                   "activation_bytes"):
        assert sum(int(r[column]) for r in rows) == totals[column], column


def test_json_round_trips_through_report(tmp_path):
    out = tmp_path / "r.json"
    assert run_cli("analyze", "mobilenet_v2", "--depth", "1", "-o", str(out))[0] == 0
    d = json.loads(out.read_text())
    assert Report.from_dict(d).to_dict() == d


@pytest.mark.integration
def test_activations_command_writes_npz(tmp_path):
    out = tmp_path / "acts.npz"
    code, stdout, err = run_cli("activations", "mnist-cnn", "--layers", "Conv2d|fc.*",
                                "-o", str(out), "--format", "json")
    assert code == 0, err
    arrays = np.load(out)
    assert sorted(arrays.files) == ["conv1", "conv2", "fc1", "fc2"]
    assert arrays["conv2"].shape == (1, 64, 24, 24)
    stats = {s["name"]: s for s in json.loads(stdout)["layers"]}
    a = arrays["fc1"]
    assert stats["fc1"]["mean"] == pytest.approx(float(a.mean()), rel=1e-5)
    assert stats["fc1"]["zero_fraction"] == pytest.approx(float((a == 0).mean()))


BAD_INPUTS = [
    ("unknown-model", ["analyze", "resnt50"], "Did you mean: resnet50"),
    ("malformed-input", ["analyze", "resnet50", "--input", "1x3xa"], "malformed --input"),
    ("zero-dim", ["analyze", "resnet50", "--input", "0x3x224x224"], "must be at least 1, got 0"),
    ("unknown-dtype", ["analyze", "resnet50", "--input", "1x3x224x224:float8"], "unknown dtype"),
    ("rejected-shape", ["analyze", "resnet50", "--input", "1x1x224x224"],
     "resnet50 rejected input 1x1x224x224: RuntimeError: Given groups=1"),
    ("vit-wrong-size", ["analyze", "vit_b_16", "--input", "1x3x100x100"], "Wrong image height"),
    ("negative-depth", ["analyze", "resnet20", "--depth", "-1"], "--depth must be 0 or more"),
    ("bad-batch", ["analyze", "resnet20", "--batch-size", "0"], "--batch-size must be at least 1"),
    ("missing-module", ["analyze", "no_such_pkg.mod:build"], "cannot import module"),
    ("missing-attr", ["analyze", "tests.models:nope"], "has no attribute"),
    ("not-a-module", ["analyze", "tests.models:not_a_module"], "not a torch.nn.Module"),
    ("bad-regex", ["activations", "resnet20", "--layers", "("], "not a valid regular expression"),
    ("no-match", ["activations", "resnet20", "--layers", "Transformer"], "matches no layer"),
    ("unknown-option", ["analyze", "resnet20", "--frobnicate"], "unrecognized arguments"),
]


@pytest.mark.parametrize("argv,expected", [b[1:] for b in BAD_INPUTS],
                         ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_is_one_line(argv, expected):
    code, out, err = run_cli(*argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("layerscope: error: "), err
    assert expected in err
    assert "Traceback" not in err


@pytest.mark.parametrize("kind", ["random-bytes", "empty", "directory", "truncated", "missing"])
def test_bad_files_are_one_line(tmp_path, kind):
    path = tmp_path / "model.pt"
    if kind == "random-bytes":
        path.write_bytes(os.urandom(256))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "directory":
        path.mkdir()
    elif kind == "truncated":
        import torch

        torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), str(path))
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    code, _, err = run_cli("analyze", str(path), "--input", "1x2")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err


def test_no_partial_output_on_error(tmp_path):
    out = tmp_path / "r.json"
    code, _, _ = run_cli("analyze", "resnet50", "--input", "1x1x8x8", "-o", str(out))
    assert code == 2 and not out.exists() and os.listdir(tmp_path) == []


@pytest.mark.integration
def test_console_script_and_module_entry_points():
    proc = subprocess.run([sys.executable, "-m", "layerscope", "analyze", "resnt50"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stdout == ""
