"""TorchScript models (torch.jit.script / torch.jit.trace, saved with torch.jit.save) are
attributed per submodule like the eager module they came from."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
import torchvision

import layerscope
from layerscope.analysis import capture, static

COSTED = {"Conv1d", "Conv2d", "Linear"}


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.drop = nn.Dropout(0.1)
        self.id = nn.Identity()

    def forward(self, x):
        return self.id(self.drop(torch.relu(self.fc(x)) + 1))


class Custom(nn.Module):
    """A submodule called twice back to back, one called in a loop, an ``if`` on data, a
    ModuleList and a ModuleDict (called through attribute chains), modules with no ops."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.inner = Inner()
        self.blocks = nn.ModuleList([nn.Linear(16, 16) for _ in range(2)])
        self.heads = nn.ModuleDict({"a": nn.Linear(16, 8), "b": nn.Linear(16, 8)})
        self.conv = nn.Conv1d(2, 2, 3, padding=1)
        self.act = nn.ReLU()

    def forward(self, x):
        x = self.fc(self.fc(x))
        for _ in range(3):
            x = self.inner(x)
        for block in self.blocks:
            x = block(x)
        if bool(x.sum() > -1e9):
            x = self.act(x)
        x = self.heads["a"](x) + self.heads["b"](x)
        return self.conv(x)


CUSTOM_SHAPE = (1, 2, 16)
RESNET_SHAPE = (1, 3, 224, 224)


def _save(module: nn.Module, how: str, shape, path) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if how == "script":
            ts = torch.jit.script(module)
        else:
            ts = torch.jit.trace(module, torch.randn(shape), check_trace=False)
    torch.jit.save(ts, str(path))
    return str(path)


@pytest.fixture(scope="module")
def resnet():
    torch.manual_seed(0)
    return torchvision.models.resnet18().eval()


@pytest.fixture(scope="module")
def custom():
    torch.manual_seed(0)
    return Custom().eval()


def _rows(report) -> dict:
    return {row.name: row for row in report.layers}


def _check_like_eager(eager_report, ts_report) -> None:
    eager, script = _rows(eager_report), _rows(ts_report)
    assert ts_report.frontend == "torchscript"
    costed = [name for name, row in eager.items() if row.type in COSTED]
    assert costed
    for name in costed:
        assert name in script, name
        assert script[name].type == eager[name].type
        assert script[name].macs == eager[name].macs, name
        assert script[name].flops == eager[name].flops, name
        assert script[name].calls == eager[name].calls, name
        assert script[name].input_shapes == eager[name].input_shapes, name
        assert script[name].output_shapes == eager[name].output_shapes, name
    assert ts_report.totals.macs == eager_report.totals.macs
    assert sum(r.macs for r in ts_report.layers) == ts_report.totals.macs
    assert sum(r.flops for r in ts_report.layers) == ts_report.totals.flops
    root = script.get("(root)")
    assert root is None or root.macs == 0  # nothing left on the root


@pytest.mark.integration
@pytest.mark.parametrize("how", ["script", "trace"])
def test_resnet18_like_eager(resnet, how, tmp_path):
    path = _save(resnet, how, RESNET_SHAPE, tmp_path / f"resnet18_{how}.pt")
    eager = layerscope.analyze(resnet, inputs=RESNET_SHAPE)
    script = layerscope.analyze(path, inputs=RESNET_SHAPE)
    _check_like_eager(eager, script)
    # every row, containers and BatchNorm included
    eager_rows, script_rows = _rows(eager), _rows(script)
    assert set(eager_rows) == set(script_rows)
    for name, row in eager_rows.items():
        assert (script_rows[name].macs, script_rows[name].flops, script_rows[name].calls) == (
            row.macs, row.flops, row.calls), name


@pytest.mark.parametrize("how", ["script", "trace"])
def test_custom_model_like_eager(custom, how, tmp_path):
    path = _save(custom, how, CUSTOM_SHAPE, tmp_path / f"custom_{how}.pt")
    eager = layerscope.analyze(custom, inputs=CUSTOM_SHAPE)
    script = layerscope.analyze(path, inputs=CUSTOM_SHAPE)
    _check_like_eager(eager, script)
    rows = _rows(script)
    assert rows["fc"].calls == 2  # called twice back to back
    assert rows["inner.fc"].calls == 3  # called in a loop
    assert rows["inner.drop"].calls == 3 and rows["inner.drop"].output_shapes == [[1, 2, 16]]
    assert rows["blocks.1"].macs == rows["blocks.0"].macs > 0
    assert rows["heads.a"].macs == rows["heads.b"].macs > 0
    if how == "script":  # the traced graph has no ``if`` and no ops of its condition
        assert rows["act"].calls == 1
        assert rows["(root)"].flops == _rows(eager)["(root)"].flops > 0


def test_script_capture_has_no_warnings_and_module_types(custom):
    cap = capture.capture(torch.jit.script(custom), [capture.InputSpec(CUSTOM_SHAPE)], fake=False)
    assert cap.warnings == []
    assert cap.modules["inner.fc"].type == "Linear"
    assert cap.modules[""].calls == 1 and cap.modules[""].input_shapes == [list(CUSTOM_SHAPE)]


def test_module_already_run_optimized(custom):
    """Executors keep their optimized (inlined) plan once run; the analysis copy must not."""
    scripted = torch.jit.script(custom)
    with torch.no_grad():
        for _ in range(3):
            scripted(torch.randn(CUSTOM_SHAPE))
    eager = layerscope.analyze(custom, inputs=CUSTOM_SHAPE)
    _check_like_eager(eager, layerscope.analyze(scripted, inputs=CUSTOM_SHAPE))


def test_training_backward_attributed(custom):
    scripted = torch.jit.script(custom)
    eager = _rows(layerscope.analyze(custom, inputs=CUSTOM_SHAPE, mode="training"))
    script = layerscope.analyze(scripted, inputs=CUSTOM_SHAPE, mode="training")
    rows = _rows(script)
    for name, row in eager.items():
        if row.type in COSTED:
            assert rows[name].backward_macs == row.backward_macs > 0, name
    assert sum(r.backward_macs for r in script.layers) == script.totals.backward_macs


def test_falls_back_to_root_when_profiler_busy(custom):
    """Another profiler running: no attribution, no crash, a warning, the same totals."""
    scripted = torch.jit.script(custom)
    eager = capture.capture(custom, [capture.InputSpec(CUSTOM_SHAPE)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            cap = capture.capture(scripted, [capture.InputSpec(CUSTOM_SHAPE)], fake=False)
    assert cap.warnings and "root" in cap.warnings[0]
    rows = {r.name: r for r in static.layer_rows(cap)}
    total = sum(s.forward.macs for s in eager.modules.values())
    assert rows["(root)"].macs == total == sum(r.macs for r in rows.values())
    assert rows["fc"].macs == 0


def test_frozen_torchscript_is_counted_and_explained(tmp_path):
    # torch.jit.freeze inlines the weights as constants: the ops are still counted exactly
    from layerscope.frontends import zoo

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frozen = torch.jit.freeze(torch.jit.script(zoo.lookup("mnist-cnn").build().eval()))
        torch.jit.save(frozen, str(tmp_path / "frozen.pt"))
    report = layerscope.analyze(str(tmp_path / "frozen.pt"), inputs=(1, 1, 28, 28))
    # conv1 32*1*9*26^2, conv2 64*32*9*24^2, fc1 9216*128, fc2 128*10
    assert report.totals.macs == 32 * 9 * 26**2 + 64 * 32 * 9 * 24**2 + 9216 * 128 + 128 * 10
    assert report.totals.params == 0 and any("frozen" in n for n in report.notes)


def _raw_trace_events(monkeypatch) -> list[dict]:
    """The complete events of every profiler trace written while the test runs."""
    import json

    from layerscope.analysis.capture.script import profiler

    seen: list[dict] = []
    real_read = profiler.read_trace

    def read(path):
        with open(path, encoding="utf-8") as f:
            seen.extend(e for e in json.load(f)["traceEvents"] if e.get("ph") == "X")
        return real_read(path)

    monkeypatch.setattr(profiler, "read_trace", read)
    return seen


def test_trace_holds_only_calls_and_op_markers(custom, monkeypatch):
    """The profiler records the interpreter's calls and one marker per op, not the aten events
    of every op: with those, a TorchScript AlexNet whose linear layers compute in 64 x 64
    segments (~100,000 ops) wrote a trace of GBs and took minutes to read."""
    events = _raw_trace_events(monkeypatch)
    cap = capture.capture(torch.jit.script(custom), [capture.InputSpec(CUSTOM_SHAPE)],
                          fake=False)
    assert cap.warnings == []
    markers = [e for e in events if e["name"].startswith("layerscope::op#")]
    assert len(markers) == cap.op_calls
    assert not [e for e in events if e["name"].startswith("aten::")]
    # the rest are the interpreter's method and function calls (forward, relu, _conv_forward)
    others = {e["name"] for e in events if e not in markers} - {"PyTorch Profiler (0)"}
    assert "forward" in others and all(name.isidentifier() for name in others), others


def test_public_profiler_attributes_the_same(custom, monkeypatch):
    """Where torch cannot record only some scopes, the public profiler records everything and
    the attribution is the same."""
    from layerscope.analysis.capture.script import profiler

    scripted = torch.jit.script(custom)
    scoped = _rows(layerscope.analyze(scripted, inputs=CUSTOM_SHAPE))
    monkeypatch.setattr(profiler.TraceRecorder, "_start_scoped", lambda self: False)
    events = _raw_trace_events(monkeypatch)
    public = _rows(layerscope.analyze(scripted, inputs=CUSTOM_SHAPE))
    assert [e for e in events if e["name"].startswith("aten::")]  # that path did run
    assert scoped.keys() == public.keys()
    for name, row in scoped.items():
        assert (row.macs, row.flops, row.calls, row.input_shapes, row.output_shapes) == (
            public[name].macs, public[name].flops, public[name].calls,
            public[name].input_shapes, public[name].output_shapes), name
