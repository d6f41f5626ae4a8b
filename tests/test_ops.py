"""layerscope ops: the operator table and the Chrome trace with module ranges."""
import gzip
import json

import pytest
import torch

from layerscope.analysis.op_profile import ops
from tests.helpers import run_cli


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_trace_is_chrome_json_with_module_ranges(tmp_path, suffix):
    path = tmp_path / f"trace{suffix}"
    table = ops("mnist-cnn", runs=2, warmup=1, trace=str(path))
    opener = gzip.open if suffix.endswith(".gz") else open
    with opener(path, "rt") as f:
        trace = json.load(f)
    names = {e.get("name") for e in trace["traceEvents"]}
    for module in ("(root) (MnistCNN)", "conv1 (Conv2d)", "fc2 (Linear)"):
        assert f"module::{module}" in names
    # every complete event has a start and a duration (Chrome trace "X" events)
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    assert spans and all("ts" in e and "dur" in e for e in spans)
    assert table.trace == str(path)
    # the ranges existed only while profiling
    assert not torch.nn.modules.module._global_forward_hooks
    assert not torch.nn.modules.module._global_forward_pre_hooks


def test_op_table_rows_are_sorted_and_shares_bounded():
    table = ops("mnist-cnn", runs=2, warmup=1, top=5, sort="total", memory=True)
    totals = [r.total_s for r in table.rows]
    assert totals == sorted(totals, reverse=True) and len(table.rows) == 5
    assert all(0 <= r.share <= 1 for r in table.rows)
    assert all(r.memory_bytes is not None for r in table.rows)
    conv = [r for r in table.rows if "conv" in r.name]
    assert conv and all(r.calls == 2 for r in conv if r.name == "aten::conv2d")  # per run


def test_ops_cli_json(tmp_path):
    out = tmp_path / "ops.json"
    code, _, err = run_cli("ops", "mnist-cnn", "--runs", "2", "--group-by-shape", "-o", str(out))
    assert code == 0, err
    d = json.loads(out.read_text())
    assert d["kind"] == "ops" and d["rows"] and d["rows"][0]["input_shapes"]


def test_ops_bad_trace_directory(tmp_path):
    code, _, err = run_cli("ops", "mnist-cnn", "--runs", "1", "--trace",
                           str(tmp_path / "missing" / "t.json"))
    assert code == 2 and "cannot write trace" in err
