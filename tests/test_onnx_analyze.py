"""`analyze model.onnx` and `export`: same counts as the PyTorch analysis, hand-worked memory,
views, named inputs, weights that are never loaded."""
import csv
import io
import json
import os
import subprocess
import sys

import onnx
import pytest
import torch.nn as nn
from onnx import helper

from layerscope.analysis import memory
from layerscope.analysis.onnx_export import export_onnx, ort_max_ir_version
from layerscope.analysis.static_onnx import analyze_onnx
from layerscope.core.report import Report
from tests.helpers import check_golden, run_cli
from tests.onnx_graphs import external_tensor, memory_graph, model, save, single, tensor

# torchvision definitions, input 1x3x224x224 (docs/definitions.md, "Reference counts")
REFERENCE = {
    "alexnet": (714_188_480, 61_100_840),
    "resnet50": (4_089_184_256, 25_557_032),
    "mobilenet_v2": (300_774_272, 3_504_872),
}
SUMMED = ("params", "weight_bytes", "buffer_bytes", "macs", "flops", "bytes_read",
          "bytes_written", "activation_bytes")


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    """Export each model once per session (dynamo exporter, BatchNorm kept)."""
    directory = tmp_path_factory.mktemp("onnx_models")
    cache: dict[str, str] = {}

    def get(name: str) -> str:
        if name not in cache:
            path = str(directory / f"{name}.onnx")
            export_onnx(name, path)
            cache[name] = path
        return cache[name]

    return get


@pytest.fixture(scope="session")
def onnx_report(exported):
    cache: dict[str, Report] = {}

    def get(name: str) -> Report:
        if name not in cache:
            cache[name] = analyze_onnx(exported(name))
        return cache[name]

    return get


# ---------------------------------------------------------------- same counts as PyTorch
@pytest.mark.integration
@pytest.mark.parametrize("name", list(REFERENCE))
def test_exported_models_count_like_pytorch(onnx_report, name):
    from layerscope import analyze

    report = onnx_report(name)
    macs, params = REFERENCE[name]
    assert (report.totals.macs, report.totals.params) == (macs, params)
    assert report.frontend == "onnx" and report.op_coverage == 1.0 and not report.uncounted_ops
    torch_totals = analyze(name).totals
    # FLOPs, weight bytes and bytes read agree too; bytes written do not (torch's max-pool also
    # writes indices) nor do activations (torch's in-place ReLU creates no tensor)
    for key in ("macs", "flops", "params", "weight_bytes", "bytes_read"):
        assert getattr(report.totals, key) == getattr(torch_totals, key), key


@pytest.mark.integration
def test_vit_counts_like_pytorch(onnx_report):
    """A transformer graph (MatMul, Gemm, Gather, Transpose, Softmax, one-element scales):
    MACs, parameters and weight bytes equal the PyTorch analysis (README reference counts)."""
    totals = onnx_report("vit_b_16").totals
    assert (totals.macs, totals.params, totals.weight_bytes) == (17_563_828_224, 86_567_656,
                                                                 346_270_624)


def test_rows_join_pytorch_modules_by_scope(onnx_report):
    """The dynamo exporter's name_scopes put each Conv on its module's row, with equal MACs."""
    from layerscope import analyze

    torch_rows = {r.name: r for r in analyze("resnet50").layers}
    convs = [r for r in onnx_report("resnet50").layers if r.type == "Conv"]
    assert len(convs) == 53
    for row in convs:
        assert torch_rows[row.scope].macs == row.macs, row.scope
        assert torch_rows[row.scope].params == row.params, row.scope


@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v2"])
def test_rows_sum_to_totals(onnx_report, name):
    report = onnx_report(name)
    for key in SUMMED:
        assert sum(getattr(r, key) for r in report.layers) == getattr(report.totals, key), key
    assert report.memory["activation_bytes"] == report.totals.activation_bytes
    assert report.memory["arena_bytes"] >= report.totals.peak_activation_bytes


@pytest.mark.integration
def test_views_render_for_an_exported_model(exported, onnx_report):
    path = exported("resnet50")
    code, out, err = run_cli("analyze", path, "--view", "ops")
    assert code == 0, err
    assert "Total operators: 175; unique: 8 (Add, BatchNormalization, Conv, Gemm, MaxPool, " \
           "ReduceMean, Relu, Reshape)" in out
    assert "BatchNormalization │    53" in out
    code, out, _ = run_cli("analyze", path, "--view", "attributes", "--width", "200")
    assert "kernel_shape" in out and "7,7" in out and "group" in out
    code, out, _ = run_cli("analyze", path, "--view", "bandwidth")
    top = max(onnx_report("resnet50").layers, key=lambda r: r.bytes_read + r.bytes_written)
    first_row = next(line for line in out.splitlines() if line.startswith("│"))
    assert first_row.startswith(f"│{top.name} ")
    code, out, _ = run_cli("analyze", path, "--view", "memory")
    assert "Live-set peak: 9,633,792 B" in out and "fragmentation (arena / peak)" in out


# ---------------------------------------------------------------- a hand-worked graph
# tests/onnx_graphs.memory_graph: X(32 B) -> relu A(32) -> reshape B (view of A) -> matmul C(128)
# -> split S1(64), S2(64, unread) -> sigmoid D(64, output); matmul(B, W2) Z(8, output).
# Lifetimes (steps): X [0,0]; A [0,5] (its view B is read at step 5); C [2,3]; S1 [3,4];
# S2 [3,3]; D [4,5]; Z [5,5].  Live per step: 0: X+A = 64; 1: A = 32; 2: A+C = 160;
# 3: A+C+S1+S2 = 288; 4: A+S1+D = 160; 5: A+D+Z = 104.
LIVE_PER_STEP = [64, 32, 160, 288, 160, 104]
HAND = dict(
    macs=128 + 8,  # (2x4)@(4x16) + (2x4)@(4x1)
    flops=8 + 256 + 16 + 16,  # relu 8, matmul 2x128, sigmoid 16, matmul 2x8
    params=64 + 4,  # W, W2 (the int64 shape is not a weight)
    weight_bytes=272,
    bytes_read=32 + (32 + 256) + 128 + 64 + (32 + 16),  # relu, mm, split, sigmoid, mm2
    bytes_written=32 + 128 + 128 + 64 + 8,
    activation_bytes=32 + 128 + 64 + 64 + 64 + 8,  # A, C, S1, S2, D, Z (not the view B)
    peak_activation_bytes=288,
    input_bytes=32,
    output_bytes=64 + 8,
)


@pytest.fixture
def hand_report(tmp_path):
    return analyze_onnx(save(memory_graph(), tmp_path, "hand.onnx"))


def test_hand_graph_totals(hand_report):
    for key, value in HAND.items():
        assert getattr(hand_report.totals, key) == value, key
    assert [r.name for r in hand_report.layers] == ["relu", "reshape", "mm", "split", "sigmoid",
                                                     "mm2"]
    for key in SUMMED:
        assert sum(getattr(r, key) for r in hand_report.layers) == getattr(hand_report.totals, key)


def test_hand_graph_memory(hand_report):
    m = hand_report.memory
    assert (m["activation_bytes"], m["peak_activation_bytes"]) == (360, 288)
    assert (m["peak_step"], m["peak_node"], m["live_tensors_at_peak"]) == (3, "split", 4)
    # largest first: C at 0; S1 at 128, S2 at 192 (both overlap C); D at 0 (C is dead by
    # step 4); A at 256 (overlaps all four); X at 0; Z at 64 -> arena 288 = the peak
    assert (m["arena_bytes"], m["fragmentation"]) == (288, 1.0)
    assert m["weight_bytes"] == 272


def test_live_set_by_step_and_lifetimes():
    steps = [(["X"], ["A"]), (["A", "shape"], ["B"]), (["B", "W"], ["C"]), (["C"], ["S1", "S2"]),
             (["S1"], ["D"]), (["B", "W2"], ["Z"])]
    sizes = {"X": 32, "A": 32, "C": 128, "S1": 64, "S2": 64, "D": 64, "Z": 8}
    buffers = memory.lifetimes(steps, sizes, ["X"], ["D", "Z"], alias={"B": "A"})
    spans = {b.name: (b.start, b.end) for b in buffers}
    assert spans == {"X": (0, 0), "A": (0, 5), "C": (2, 3), "S1": (3, 4), "S2": (3, 3),
                     "D": (4, 5), "Z": (5, 5)}
    assert memory.live_set_peak(buffers, len(steps)) == (288, 3, LIVE_PER_STEP)


def test_arena_can_be_fragmented():
    # step 0: A+B = 150, step 1: B+C = 100, step 2: C+D = 150 -> peak 150. Largest first puts
    # A and D both at 0; B (overlaps A) at 100; C overlaps B [100,150) and D [0,100) -> 150.
    B = memory.Buffer
    buffers = [B("A", 100, 0, 0), B("B", 50, 0, 1), B("C", 50, 1, 2), B("D", 100, 2, 2)]
    arena, offsets = memory.pack_arena(buffers)
    assert offsets == {"A": 0, "D": 0, "B": 100, "C": 150}
    assert arena == 200
    summary = memory.summarize(buffers, ["s0", "s1", "s2"])
    assert summary["peak_activation_bytes"] == 150
    assert summary["fragmentation"] == pytest.approx(200 / 150)


@pytest.mark.parametrize("view", ["layers", "ops", "attributes", "bandwidth", "memory"])
def test_hand_graph_views_golden(tmp_path, update_golden, view):
    path = save(memory_graph(), tmp_path, "hand.onnx")
    code, out, err = run_cli("analyze", path, "--view", view, "--width", "150")
    assert code == 0, err
    check_golden(f"onnx_view_{view}.txt", out, update_golden)


def test_json_round_trip_and_csv_rows(tmp_path):
    path = save(memory_graph(), tmp_path, "hand.onnx")
    code, js, err = run_cli("analyze", path, "--format", "json", "--view", "memory")
    assert code == 0, err
    d = json.loads(js)  # --view changes the table only: JSON stays the Report
    assert Report.from_dict(d).to_dict() == d
    assert d["frontend"] == "onnx" and d["memory"]["arena_bytes"] == 288
    assert d["layers"][3]["attributes"] == {"axis": 0, "num_outputs": 2}
    out = tmp_path / "r.csv"
    assert run_cli("analyze", path, "-o", str(out))[0] == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    for key in SUMMED:
        assert sum(int(r[key]) for r in rows) == d["totals"][key], key


# ---------------------------------------------------------------- inputs: names and symbols
@pytest.mark.parametrize("argv,flops", [
    (["--input", "x=4x8"], 32),
    (["--input", "4x8"], 32),  # no name: the first input
    (["--input", "x=4x8", "--batch-size", "3"], 24),
    (["--input", "x=4x8:float32"], 32),
], ids=["named", "unnamed", "batch-size", "dtype"])
def test_symbolic_dimensions_are_bound_by_input(tmp_path, argv, flops):
    path = save(single("Relu", [tensor("x", ["batch", 8])], ["batch", 8]), tmp_path)
    code, js, err = run_cli("analyze", path, "--format", "json", *argv)
    assert code == 0, err
    d = json.loads(js)
    assert d["totals"]["flops"] == flops
    assert d["inputs"] == [{"name": "x", "shape": [flops // 8, 8], "dtype": "float32"}]


def test_two_inputs_bind_by_name_in_any_order(tmp_path):
    m = single("MatMul", [tensor("a", ["m", "k"]), tensor("b", ["k", "n"])], ["m", "n"])
    report = analyze_onnx(save(m, tmp_path), ["b=5x3", "a=2x5"])
    assert report.totals.macs == 2 * 3 * 5


# ---------------------------------------------------------------- weights that are not loaded
@pytest.mark.integration
def test_external_weights_larger_than_memory_are_never_loaded(tmp_path):
    """A 100,000 x 100,000 float weight (40 GB, in a sparse file that takes no disk) is counted
    from its dims; the analysing process stays far below the weights' size."""
    n = 100_000
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    m = model([node], [tensor("x", [1, n])], [tensor("y", [1, n])],
              [external_tensor("w", [n, n], "w.bin")])
    path = save(m, tmp_path, "big.onnx")
    with open(tmp_path / "w.bin", "wb") as f:
        f.truncate(n * n * 4)
    # Peak RSS of the child: VmHWM (this process image's high-water mark). getrusage's
    # ru_maxrss survives exec on Linux, so it would report the forking pytest process's size.
    script = ("import json, resource, sys\n"
              "from layerscope.analysis.static_onnx import analyze_onnx\n"
              "t = analyze_onnx(sys.argv[1]).totals\n"
              "try:\n"
              "    hwm = [int(l.split()[1]) * 1024 for l in open('/proc/self/status')\n"
              "           if l.startswith('VmHWM:')][0]\n"
              "except OSError:\n"
              "    hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024\n"
              "print(json.dumps([t.params, t.weight_bytes, t.macs, hwm]))\n")
    proc = subprocess.run([sys.executable, "-c", script, path], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert proc.returncode == 0, proc.stderr
    params, weight_bytes, macs, peak_rss = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (params, weight_bytes, macs) == (n * n, 4 * n * n, n * n)
    assert peak_rss < 2 * 1024**3, peak_rss  # torch's import is most of it; weights are 40 GB


# ---------------------------------------------------------------- export
def _bn_channels(module: nn.Module) -> int:
    return sum(m.num_features for m in module.modules() if isinstance(m, nn.BatchNorm2d))


@pytest.mark.integration
def test_export_command_writes_a_verified_model(tmp_path):
    from layerscope import analyze

    out = tmp_path / "mnist.onnx"
    code, _, err = run_cli("export", "mnist-cnn", "-o", str(out))
    assert code == 0, err
    assert "loads in onnxruntime" in err and "dynamo exporter" in err
    assert os.listdir(tmp_path) == ["mnist.onnx"]  # no temporary files left behind
    m = onnx.load(str(out), load_external_data=False)
    assert m.ir_version <= ort_max_ir_version()
    scopes = {p.value for n in m.graph.node for p in n.metadata_props
              if p.key == "pkg.torch.onnx.name_scopes"}
    assert any("conv1" in s for s in scopes)
    ours, theirs = analyze_onnx(str(out)).totals, analyze("mnist-cnn").totals
    assert (ours.macs, ours.params, ours.flops) == (theirs.macs, theirs.params, theirs.flops)


@pytest.mark.integration
@pytest.mark.parametrize("options", [{"exporter": "legacy"}, {"fold_batchnorm": True}],
                         ids=["legacy", "fold-bn"])
def test_folding_batchnorm_keeps_macs_and_drops_bn_parameters(tmp_path, options):
    """Folding each BN (2C parameters) into its Conv adds a C-long bias: params - sum(C).
    The BN statistics are randomised: with a fresh model's (mean 0, beta 0) every folded bias
    is zero, and the exporters drop (onnxscript) or deduplicate (legacy) zero biases."""
    import torch

    from layerscope import analyze
    from layerscope.frontends.zoo import lookup

    torch.manual_seed(0)
    module = lookup("resnet20").build().eval()
    for bn in (m for m in module.modules() if isinstance(m, nn.BatchNorm2d)):
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
        bn.bias.data.uniform_(-1, 1)
    path = str(tmp_path / "r20.onnx")
    result = export_onnx(module, path, inputs=[(1, 3, 32, 32)], **options)
    assert result.batchnorm_folded
    ours, theirs = analyze_onnx(path).totals, analyze(module, (1, 3, 32, 32)).totals
    assert ours.macs == theirs.macs
    assert ours.params == theirs.params - _bn_channels(module)
    assert not [r for r in analyze_onnx(path).layers if r.type == "BatchNormalization"]


@pytest.mark.integration
def test_export_batch_size_and_module_left_as_it_was(tmp_path):
    module = nn.Sequential(nn.Linear(6, 4), nn.ReLU()).train()
    path = str(tmp_path / "lin.onnx")
    result = export_onnx(module, path, inputs=[(1, 6)], batch_size=5)
    assert module.training  # the exporter ran in eval mode; the flag is restored
    assert result.verified_with.startswith("onnxruntime")
    assert analyze_onnx(path).totals.macs == 5 * 6 * 4


def test_ir_version_is_capped_for_onnxruntime(tmp_path):
    from layerscope.analysis.onnx_export import _cap_ir_version, verify_loads

    m = single("Relu", [tensor("x", [2])], [2])
    m.ir_version = onnx.IR_VERSION  # what onnx.helper writes by default
    path = save(m, tmp_path)
    assert _cap_ir_version(path) == min(onnx.IR_VERSION, ort_max_ir_version())
    assert verify_loads(path).startswith("onnxruntime")
