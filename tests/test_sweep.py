"""sweep: the grid, failing cells, speed-up and noise flags."""
import json

import pytest
import torch
import torch.nn as nn

import layerscope
from layerscope.analysis.sweep import SweepCell, _compare
from tests.helpers import run_cli


class OddBatchFails(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        if x.shape[0] == 3:
            raise ValueError("batch 3 is not supported")
        return self.fc(x)


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")  # the model's batch check is traced
def test_failing_cell_reports_error_and_sweep_goes_on():
    report = layerscope.sweep(OddBatchFails(), inputs=(1, 4), batch_sizes=[1, 3, 4],
                              backends=["eager", "torchscript"], runs=2, warmup=1)
    cells = {(c.backend, c.batch_size): c for c in report.cells}
    assert len(report.cells) == 6
    assert cells[("eager", 3)].status == "error"
    assert "batch 3 is not supported" in cells[("eager", 3)].error
    assert cells[("eager", 4)].status == "ok" and cells[("torchscript", 4)].status == "ok"
    assert cells[("eager", 1)].speedup == 1.0


def test_cuda_cell_without_gpu_is_an_error_cell():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    report = layerscope.sweep("mnist-cnn", devices=["cpu", "cuda"], runs=1, warmup=0)
    assert [c.status for c in report.cells] == ["ok", "error"]
    assert "no CUDA GPU" in report.cells[1].error


@pytest.mark.integration
def test_eager_cells_carry_the_share_per_layer_type():
    report = layerscope.sweep("mnist-cnn", batch_sizes=[1, 2], runs=2, warmup=1)
    for cell in report.cells:
        types = {d["type"] for d in cell.by_type}
        assert {"Conv2d", "Linear"} <= types


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_every_backends_cells_keep_their_runs_for_diff():
    """Eager cells are timed by profile, whose end-to-end runs were dropped: layerscope diff
    then judged them by their p10-p90 overlap instead of the rank test, unlike the others."""
    report = layerscope.sweep(nn.Linear(4, 2), inputs=(1, 4), batch_sizes=[1],
                              backends=["eager", "torchscript"], runs=5, warmup=1)
    for cell in report.cells:
        assert len(cell.latency["samples_s"]) == cell.latency["n"] == 5, cell.backend
    from layerscope.analysis.diff import diff_results

    d = diff_results([report, report])
    assert {r.basis for r in d.rows} == {"rank test"}


def _cell(batch, median, p10, p90):
    c = SweepCell("cpu", "eager", "float32", None, batch)
    c.latency = {"median_s": median, "p10_s": p10, "p90_s": p90}
    c.throughput_per_s = batch / median
    return c


def test_speedup_is_throughput_ratio_and_noise_is_overlap():
    # base: 1 sample in 10 ms (p10-p90 9-11 ms); b: 4 samples in 20 ms = 5 ms/sample,
    # per-sample range 4.5-5.5 ms: no overlap with 9-11; c: 10.5 ms, range 9.5-12: overlaps
    base, b, c = _cell(1, 0.010, 0.009, 0.011), _cell(4, 0.020, 0.018, 0.022), \
        _cell(1, 0.0105, 0.0095, 0.012)
    _compare([base, b, c])
    assert b.speedup == pytest.approx(2.0) and b.within_noise is False
    assert c.speedup == pytest.approx(10 / 10.5) and c.within_noise is True


@pytest.mark.parametrize("argv,expected", [
    (["--backends", "tensorrt"], "unknown --backends 'tensorrt'"),
    (["--batch-sizes", "1,x"], "--batch-sizes each item must be a whole number"),
    (["--batch-sizes", "0"], "--batch-sizes each item must be at least 1"),
    (["--devices", "tpu"], "unknown --devices 'tpu'"),
], ids=["unknown-backend", "bad-batch-list", "zero-batch", "unknown-device"])
def test_sweep_bad_input(argv, expected):
    code, _, err = run_cli("sweep", "mnist-cnn", *argv)
    assert code == 2 and expected in err and err.count("\n") == 1, err


@pytest.mark.integration
def test_sweep_cli_json(tmp_path):
    out = tmp_path / "s.json"
    code, _, err = run_cli("sweep", "mnist-cnn", "--batch-sizes", "1,2", "--runs", "2",
                           "--backends", "eager,onnxruntime", "-o", str(out))
    assert code == 0, err
    d = json.loads(out.read_text())
    assert d["kind"] == "sweep" and len(d["cells"]) == 4
    assert all(c["status"] == "ok" for c in d["cells"]), d["cells"]


def test_eager_type_shares_add_to_at_most_the_whole_run_and_sweep_has_noise():
    # the types' shares once added to 106% (shares of the bare median, times from the
    # instrumented runs); now shares of the same instrumented runs, rows never overlapping
    report = layerscope.sweep("mnist-cnn", batch_sizes=[1], threads=[1], runs=3, warmup=1)
    cell = report.cells[0]
    assert 0.0 < sum(d["share"] for d in cell.by_type) <= 1.0 + 1e-9
    assert report.noise["threads"] == 1 and report.noise["n"] == 3
    assert json.loads(json.dumps(report.to_dict()))["noise"] == report.noise
