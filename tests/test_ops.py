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
    # which operators make the top 5 depends on the timing (a busy machine reorders them):
    # the call counts are read from the whole table
    whole = ops("mnist-cnn", runs=2, warmup=1, top=1000, sort="total")
    conv = [r for r in whole.rows if r.name == "aten::conv2d"]
    assert conv and all(r.calls == 2 for r in conv)  # per run


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


def _fake_clock(walls):
    """A clock read twice per profiled run (start, end): the runs take ``walls`` seconds."""
    ticks, now = [], 0.0
    for w in walls:
        ticks += [now, now + w]
        now += w + 1.0
    it = iter(ticks)
    return lambda: next(it)


def test_ops_threads_and_noise_section(monkeypatch):
    from layerscope.analysis import op_profile
    from layerscope.core.noise import MachineReading

    monkeypatch.setattr(op_profile, "read_machine", lambda: MachineReading((0.2, 0.2, 0.2), 8, 8))
    before = torch.get_num_threads()
    # runs of 1, 1, 1, 4 s: median 1, mean 1.75, p10 1, p90 = 1 + 0.7 x 3 = 3.1
    table = ops("mnist-cnn", runs=4, warmup=0, threads=1, clock=_fake_clock([1, 1, 1, 4]))
    assert torch.get_num_threads() == before  # restored
    assert table.settings["threads"] == 1
    noise = table.noise
    assert noise["n"] == 4 and noise["threads"] == 1
    assert noise["p90_over_p10"] == pytest.approx(3.1)
    assert noise["mean_over_median"] == pytest.approx(1.75)
    assert [w.split(" ")[0] for w in noise["warnings"]] == ["Noisy", "Mean"]
    # the terminal table and the saved JSON carry it, as profile's do
    from layerscope.core.optable import OpTable
    from layerscope.renderers.terminal import to_text

    again = OpTable.from_dict(json.loads(json.dumps(table.to_dict())))
    assert again.noise == noise
    text = to_text(again, width=150)
    assert "Noise: p90/p10 3.10" in text and "Warning: Noisy measurement" in text
    assert "1 threads" in text


@pytest.mark.parametrize("argv, expected", [
    pytest.param(["--threads", "0"], "--threads", id="zero"),
    pytest.param(["--threads", "x"], "--threads", id="not-a-number"),
])
def test_ops_threads_refused(argv, expected):
    code, _, err = run_cli("ops", "mnist-cnn", *argv)
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1


def test_ops_cli_threads_json():
    code, out, _ = run_cli("ops", "mnist-cnn", "--threads", "1", "--runs", "2", "--warmup", "0",
                           "--format", "json")
    d = json.loads(out)
    assert code == 0 and d["settings"]["threads"] == 1
    assert d["noise"]["n"] == 2 and d["noise"]["threads"] == 1


@pytest.mark.parametrize("width", [80, 100, 160])
def test_op_table_figures_survive_a_long_kernel_name(width):
    """A CUDA kernel's name (hundreds of characters) is cut with an ellipsis; every figure
    column keeps its header and its values at any terminal width from 80 (at 80 columns the
    figures had all collapsed to '…' under a kernel's name)."""
    from rich.console import Console

    from layerscope.core.optable import OpRow
    from layerscope.renderers.terminal import render_table
    from tests.sample_results import ops_table

    t = ops_table()
    kernel = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
              "at::native::func_wrapper<float, at::native::sum_functor<float, float, float>"
              "::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, "
              "float, 4, 4> >(at::native::ReduceOp<float, ...>)")
    t.rows.insert(0, OpRow(kernel, 3, 3.0e-4, 3.0e-4, 1.0e-4, 0.4))
    console = Console(width=width, record=True, file=None, force_terminal=False)
    console.print(render_table(t))
    text = console.export_text()
    for header in ("Self ms", "Total ms", "Calls", "Mean ms", "Share"):
        assert header in text, (header, text)
    for figure in ("0.300", "0.250", "0.090", "40.0%", "62.5%"):
        assert figure in text, (figure, text)
    assert "void at::native::reduce" in text and "…" in text
    assert max(len(line) for line in text.splitlines()) <= width
