"""profile --kernels: the profiler window joined to modules, and --nvtx.

The CPU cases run the real torch.profiler on small models written here; their expected ops are
derived by hand from what each layer computes (a Linear with bias is one addmm forward; its
backward is one mm for the weight's gradient, one more for the input's when the input needs a
gradient, and a sum for the bias). The CUDA cases are torch's own FunctionEvent objects built
by hand with known times, so busy and idle can be derived exactly."""
from __future__ import annotations

import json
import sys
from collections import Counter

import pytest
import torch
import torch.nn as nn
from torch.autograd import DeviceType
from torch.autograd.profiler_util import EventList, FunctionEvent

from layerscope.analysis import kernels as K
from layerscope.analysis.profiler_ranges import RANGE_PREFIX
from layerscope.core.records.kernels import OUTSIDE, UNATTRIBUTED


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.fc(x))


class NestedMLP(nn.Module):
    """An MLP with a nested block (PyTorch examples' shape)."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(4, 3)
        self.block = Block()
        self.out = nn.Linear(3, 2)

    def forward(self, x):
        return self.out(self.block(self.inp(x)))


class Functional(nn.Module):
    """A torch function in the root's own code, outside any submodule."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return torch.tanh(self.fc(x))


def _window(model, backward, steps=2):
    """The events of a kernels window, and its rows and steps."""
    x = torch.randn(5, 4)
    captured = {}
    real_join = K.join

    def spy(events, cuda, **kw):
        captured["events"] = events
        return real_join(events, cuda, **kw)

    K.join = spy
    try:
        kb = K.kernel_window("m", model, (x,), None, "cpu", steps=steps, backward=backward)
    finally:
        K.join = real_join
    return captured["events"], kb


def _ops_of(events):
    """{(module, phase): Counter of op names} over the window, layerscope's ranges left out."""
    out: dict = {}
    for e, (module, phase), _ in K.attribute(events):
        if K._ours(e.name):
            continue
        name = OUTSIDE if module is None else module[len(RANGE_PREFIX):]
        out.setdefault((name, phase), Counter())[e.name] += 1
    return out


class Checkpointed(NestedMLP):
    """The block under activation checkpointing: its forward runs again in the backward."""

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        return self.out(checkpoint(self.block, self.inp(x), use_reentrant=False))


# (model, backward, {(module, phase): {op: count per step}}): hand-derived
CASES = {
    "nested-mlp-forward": (NestedMLP, False, {
        ("inp (Linear)", "forward"): {"aten::addmm": 1, "aten::linear": 1},
        ("block.fc (Linear)", "forward"): {"aten::addmm": 1},
        ("block.act (ReLU)", "forward"): {"aten::relu": 1},
        ("out (Linear)", "forward"): {"aten::addmm": 1},
    }),
    "functional-outside-submodule": (Functional, False, {
        ("fc (Linear)", "forward"): {"aten::addmm": 1},
        ("(root) (Functional)", "forward"): {"aten::tanh": 1},
    }),
    "nested-mlp-backward": (NestedMLP, True, {
        ("inp (Linear)", "forward"): {"aten::addmm": 1},
        # the input x needs no gradient: one mm (the weight's), a sum (the bias')
        ("inp (Linear)", "backward"): {"AddmmBackward0": 1, "aten::mm": 1, "aten::sum": 1},
        # inside the network both gradients: two mms
        ("block.fc (Linear)", "backward"): {"AddmmBackward0": 1, "aten::mm": 2},
        ("block.act (ReLU)", "backward"): {"ReluBackward0": 1,
                                           "aten::threshold_backward": 1},
        ("out (Linear)", "backward"): {"AddmmBackward0": 1, "aten::mm": 2},
        # the gradients' seeds (ones_like) are made by layerscope, outside the model
        (OUTSIDE, "other"): {"aten::ones_like": 1},
    }),
    "checkpoint-recompute": (Checkpointed, True, {
        ("block.fc (Linear)", "forward"): {"aten::addmm": 1},
        # the recomputed forward runs inside the backward, in the block's module ranges
        ("block.fc (Linear)", "backward"): {"aten::addmm": 1, "aten::mm": 2},
        ("block.act (ReLU)", "backward"): {"aten::relu": 1, "aten::threshold_backward": 1},
        ("out (Linear)", "backward"): {"aten::mm": 2},
    }),
    "functional-backward": (Functional, True, {
        ("(root) (Functional)", "backward"): {"TanhBackward0": 1, "aten::tanh_backward": 1},
        ("fc (Linear)", "backward"): {"AddmmBackward0": 1, "aten::mm": 1},
    }),
}


@pytest.mark.parametrize("case", CASES)
def test_ops_land_in_their_module(case):
    make, backward, expected = CASES[case]
    steps = 2
    events, kb = _window(make(), backward, steps)
    got = _ops_of(events)
    for key, ops in expected.items():
        assert key in got, f"{key} not among {sorted(got)}"
        for op, n in ops.items():
            assert got[key][op] == n * steps, (key, op, got[key])
    assert kb.steps == steps and kb.note == K.CPU_NOTE
    assert all(r.kernels is None and r.kernel_s is None for r in kb.rows)


@pytest.mark.parametrize("case", CASES)
def test_every_op_in_exactly_one_row(case):
    """The rows' op counts and self times sum to those of every CPU event in the steps (the
    module ranges and steps themselves excepted), step by step."""
    make, backward, _ = CASES[case]
    events, kb = _window(make(), backward, steps=3)
    _check_every_op_once(events, kb, 3)


def _check_every_op_once(events, kb, n_steps):
    """The rows' and steps' op counts and self times are those of the window's CPU events."""
    cpu = [e for e in events if e.device_type == DeviceType.CPU and not e.is_async]
    steps = sorted((e for e in cpu if e.name.startswith(K.STEP_PREFIX)),
                   key=lambda e: e.time_range.start)
    assert len(steps) == n_steps == kb.steps == len(kb.per_step)
    total_ops = total_self = 0.0
    for st, s in zip(kb.per_step, steps):
        inside = [e for e in cpu if not K._ours(e.name)
                  and s.time_range.start <= e.time_range.start <= s.time_range.end]
        assert st.cpu_ops == len(inside)
        assert st.cpu_self_s == pytest.approx(sum(e.self_cpu_time_total for e in inside) / 1e6,
                                              rel=1e-9, abs=1e-12)
        total_ops += len(inside)
        total_self += st.cpu_self_s
    assert sum(r.cpu_ops for r in kb.rows) == total_ops
    assert sum(r.cpu_self_s for r in kb.rows) == pytest.approx(total_self, rel=1e-9)
    keys = [(r.module, r.phase) for r in kb.rows]
    assert len(keys) == len(set(keys))  # one row per (module, phase)


# ---- CUDA, from hand-built events -----------------------------------------------------------
def _event(i, name, start, end, *, device=False, thread=1, seq=-1):
    return FunctionEvent(id=i, name=name, thread=thread, start_us=start, end_us=end,
                         fwd_thread=thread, sequence_nr=seq,
                         device_type=DeviceType.CUDA if device else DeviceType.CPU)


def _cuda_events():
    """One step [0, 100] µs: module "a" runs op A [10, 20] (launch [12, 15], correlation 7:
    kernel [30, 35]); op B [50, 60] outside modules (launch [55, 58], correlation 8: kernel
    [58, 70]); a copy [80, 90] (correlation 9) that no op claims."""
    step = _event(1, f"{K.STEP_PREFIX}0", 0, 100)
    rng = _event(2, f"{RANGE_PREFIX}a (Linear)", 5, 25)
    a = _event(3, "aten::addmm", 10, 20)
    la = _event(7, "cudaLaunchKernel", 12, 15)
    b = _event(4, "aten::add", 50, 60)
    lb = _event(8, "cudaLaunchKernel", 55, 58)
    ka = _event(7, "gemm", 30, 35, device=True)
    kb = _event(8, "add_kernel", 58, 70, device=True)
    kc = _event(9, "Memcpy HtoD", 80, 90, device=True)
    a.append_kernel("gemm", 0, 5.0)
    b.append_kernel("add_kernel", 0, 12.0)
    events = EventList([step, rng, a, la, b, lb, ka, kb, kc])
    events._populate_cpu_children()
    return list(events)


def _with_device_annotations():
    """_cuda_events plus Kineto's device-side mirrors of the step and the module range
    (gpu_user_annotation spans): ranges, not work, so every figure stays as it was."""
    events = _cuda_events()
    step = next(e for e in events if e.name.startswith(K.STEP_PREFIX))
    rng = next(e for e in events if e.name.startswith(RANGE_PREFIX))
    mirrors = [_event(11, step.name, 1, 99, device=True), _event(12, rng.name, 28, 36, device=True)]
    for m in mirrors:
        m.is_user_annotation = True
    rng.append_kernel(rng.name, 0, 8.0)
    step.append_kernel(step.name, 0, 98.0)
    return events + mirrors


@pytest.mark.parametrize("make", [_cuda_events, _with_device_annotations],
                         ids=["kernels", "with-device-annotations"])
def test_cuda_rows_and_idle_by_hand(make):
    rows, steps = K.join(make(), cuda=True)
    by = {(r.module, r.phase): r for r in rows}
    a = by[("a", "forward")]
    assert (a.type, a.cpu_ops, a.kernels, a.short_kernels) == ("Linear", 1, 1, 1)
    assert a.cpu_self_s == pytest.approx(7e-6)  # 10 µs less its 3 µs launch call
    assert a.kernel_s == pytest.approx(5e-6) and a.launch_s == pytest.approx(3e-6)
    out = by[(OUTSIDE, "other")]
    assert (out.cpu_ops, out.kernels, out.short_kernels) == (1, 1, 0)
    assert out.kernel_s == pytest.approx(12e-6) and out.launch_s == pytest.approx(3e-6)
    lost = by[(UNATTRIBUTED, "other")]
    assert lost.kernel_s == pytest.approx(10e-6)
    # the rows' kernel time is the window's: 5 + 12 + 10 µs
    assert sum(r.kernel_s for r in rows) == pytest.approx(27e-6)
    (st,) = steps
    assert st.wall_s == pytest.approx(100e-6) and st.kernels == 3
    assert st.kernel_s == pytest.approx(27e-6)
    # busy 5 + 12 + 10; host: [0, 15) before kernel 7's launch returned, [35, 58) before
    # kernel 8's; other: [15, 30) (launched, not yet started), kernel 9 had no launch call:
    # its gap [70, 80), and the tail [90, 100)
    assert st.busy_s == pytest.approx(27e-6)
    assert st.idle_host_s == pytest.approx((15 + 23) * 1e-6)
    assert st.idle_other_s == pytest.approx((15 + 10 + 10) * 1e-6)
    assert st.busy_s + st.idle_host_s + st.idle_other_s == pytest.approx(st.wall_s)


@pytest.mark.parametrize("name,launch", [
    ("cudaLaunchKernel", True), ("cudaLaunchKernelExC", True), ("cuLaunchKernel", True),
    ("cudaMemcpyAsync", True), ("cudaMemsetAsync", True), ("cudaGraphLaunch", True),
    ("cudaDeviceSynchronize", False), ("cudaMalloc", False), ("aten::cudnn_convolution", False),
])
def test_launch_calls(name, launch):
    assert K.is_launch(name) is launch


# ---- the report, the CLI, the views ---------------------------------------------------------
def test_profile_report_has_kernels_and_round_trips(tmp_path):
    from layerscope.analysis.profiling import profile
    from layerscope.core.report import Report

    r = profile(NestedMLP(), [(2, 4)], runs=2, warmup=0, roofline=False, kernels=True,
                backward=True)
    k = r.kernels
    assert k is not None and k.backward and k.steps == K.DEFAULT_STEPS
    assert r.settings["kernels"] is True
    back = Report.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back.kernels == r.kernels.to_dict()


def test_cli_profile_kernels_json_and_html(tmp_path, capsys):
    from layerscope.cli.main import main

    out = tmp_path / "r.json"
    assert main(["profile", "mnist-cnn", "--kernels", "--runs", "2", "--warmup", "0",
                 "--no-roofline", "-q", "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    rows = data["kernels"]["rows"]
    assert {r["module"] for r in rows} >= {"conv1", "fc2"}
    assert data["kernels"]["note"] == K.CPU_NOTE
    html = tmp_path / "r.html"
    assert main(["render", str(out), "-o", str(html)]) == 0
    text = html.read_text()
    assert "Kernels per module" in text and "Profiled steps" in text


@pytest.mark.parametrize("argv,words", [
    (["--loop", "digits", "--synthetic", "--kernels"],
     "--loop takes the model's input from the data set: --kernels does not apply"),
    (["--decode", "2", "--nvtx"], "--nvtx"),
])
def test_cli_refuses(argv, words, capsys):
    from layerscope.cli.main import main

    assert main(["profile", "mnist-cnn", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


def test_view_tables_from_hand_rows():
    from layerscope.core.records.kernels import KernelBreakdown
    from layerscope.views.kernels import kernel_table, step_table

    rows, steps = K.join(_cuda_events(), cuda=True)
    kb = KernelBreakdown(steps=1, device="cuda", backward=False, short_kernel_us=10.0,
                         rows=rows, per_step=steps)
    t = kernel_table(kb)
    assert [c.text for c in t.rows[0]][:3] == ["a", "Linear", "forward"]
    assert t.foot[6] == "0.027"  # 27 µs of kernels, in ms
    s = step_table(kb)
    assert [c.text for c in s.rows[0]][6:] == ["0.027", "0.038", "0.035"]


# ---- --nvtx ---------------------------------------------------------------------------------
def test_nvtx_names_balance(monkeypatch):
    from layerscope.analysis import nvtx
    from layerscope.analysis.profiling import profile

    log: list[tuple[str, str | None]] = []
    monkeypatch.setattr(nvtx, "available", lambda: True)
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: log.append(("push", name)))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: log.append(("pop", None)))
    r = profile(NestedMLP(), [(2, 4)], runs=1, warmup=0, roofline=False, nvtx=True,
                kernels=True)
    depth = 0
    for what, _ in log:
        depth += 1 if what == "push" else -1
        assert depth >= 0
    assert depth == 0
    names = {name for what, name in log if what == "push"}
    assert names >= {"layerscope::forward", "layerscope::kernels", "module::(root) (NestedMLP)",
                     "module::inp (Linear)", "module::block.act (ReLU)"}
    assert nvtx.NVTX_NOTE in r.notes


def test_nvtx_without_cuda_is_a_note(monkeypatch):
    from layerscope.analysis import nvtx
    from layerscope.analysis.profiling import profile

    pushed = []
    monkeypatch.setattr(nvtx, "available", lambda: False)
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", pushed.append)
    r = profile(NestedMLP(), [(2, 4)], runs=1, warmup=0, roofline=False, nvtx=True)
    assert pushed == [] and nvtx.NO_CUDA_NOTE in r.notes


def test_nvtx_pops_what_a_raising_forward_left(monkeypatch):
    from layerscope.analysis import nvtx

    class Boom(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            self.fc(x)
            raise RuntimeError("boom")

    log = []
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: log.append(1))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: log.append(-1))
    m = Boom()
    with pytest.raises(RuntimeError), nvtx.NvtxRanges(m):
        m(torch.ones(1, 2))
    assert sum(log) == 0 and len(log) == 4


def test_hand_sample_validates_and_renders():
    """A CUDA sample (tests/sample_results.py): the schema accepts it, and the HTML page shows
    both tables with the unattributed row."""
    from importlib import resources

    import jsonschema

    from layerscope.renderers.html import render_html
    from tests.sample_results import kernels_profile
    from tests.test_schema import _problems

    schema = json.loads(resources.files("layerscope.schema")
                        .joinpath("report.schema.json").read_text())
    r = kernels_profile()
    d = json.loads(json.dumps(r.to_dict()))
    assert _problems(jsonschema.Draft202012Validator(schema), d) == []
    page = render_html(r)
    assert "Kernels per module" in page and UNATTRIBUTED in page and "Idle: host ms" in page


def test_cpu_view_leaves_out_the_device_columns():
    from layerscope.core.records.kernels import KernelBreakdown
    from layerscope.views.kernels import kernel_table, step_table

    _, kb = _window(Functional(), backward=False, steps=1)
    assert isinstance(kb, KernelBreakdown)
    t, s = kernel_table(kb), step_table(kb)
    assert [c.label for c in t.columns] == ["Module", "Type", "Phase", "CPU ops", "CPU self ms"]
    assert all(len(r) == 5 for r in t.rows) and len(t.foot) == 5
    assert [c.label for c in s.columns] == ["Step", "Wall ms", "CPU ops", "CPU op self ms"]
    assert K.CPU_NOTE in t.title and K.CPU_NOTE in s.title


# ---- train --kernels ------------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.parametrize("steps,profiled", [(5, 3), (2, 1)], ids=["window", "run-too-short"])
def test_train_kernels(tmp_path, steps, profiled):
    """Three training steps after the first are profiled (fewer when the run ends first); the
    model's modules get forward and backward rows; data, loss and optimizer are "other"."""
    from layerscope.training.loop import train

    r = train(recipe="digits-cnn", steps=steps, synthetic=True, evaluate=False, kernels=True,
              out=str(tmp_path / "run"))
    k = r.kernels
    assert k is not None and k.steps == profiled and k.backward
    keys = {(row.module, row.phase) for row in k.rows}
    assert {("conv1", "forward"), ("conv1", "backward"), ("fc2", "backward"),
            (OUTSIDE, "other")} <= keys
    assert sum(row.cpu_ops for row in k.rows) == sum(s.cpu_ops for s in k.per_step)
    assert sum(row.cpu_self_s for row in k.rows) == pytest.approx(
        sum(s.cpu_self_s for s in k.per_step), rel=1e-9)
    saved = json.loads((tmp_path / "run" / "report.json").read_text())
    assert saved["kernels"]["steps"] == profiled


def test_train_kernels_refuses_profile_torch(capsys):
    from layerscope.cli.main import main

    assert main(["train", "--steps", "2", "--synthetic", "--kernels", "--profile", "torch"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--kernels runs torch.profiler itself over three steps: leave out "
                        "--profile torch") and len(err.splitlines()) == 1


@pytest.mark.integration
@pytest.mark.parametrize("cuda", [True, False], ids=["cuda", "no-cuda"])
def test_train_nvtx_phases_and_modules(tmp_path, monkeypatch, cuda):
    """A step range, the phase table's names in the loop's order, the model's modules inside
    forward; balanced. Without CUDA: nothing pushed, a note."""
    from layerscope.analysis import nvtx
    from layerscope.training.loop import train

    log: list[str | None] = []
    monkeypatch.setattr(nvtx, "available", lambda: cuda)
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: log.append(name))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: log.append(None))
    r = train(recipe="digits-cnn", steps=2, synthetic=True, evaluate=False, nvtx=True,
              out=str(tmp_path / "run"))
    if not cuda:
        assert log == [] and nvtx.NO_CUDA_NOTE in r.notes
        return
    depth, stack, pushed = 0, [], []
    for name in log:
        if name is None:
            stack.pop()
        else:
            pushed.append((name, tuple(stack)))
            stack.append(name)
        depth = len(stack)
    assert depth == 0
    step = [n for n, _ in pushed if n.startswith("layerscope::")][:7]
    assert step == ["layerscope::step", "layerscope::data", "layerscope::h2d",
                    "layerscope::forward", "layerscope::loss", "layerscope::backward",
                    "layerscope::optimizer"]
    conv = next(inside for n, inside in pushed if n == "module::conv1 (Conv2d)")
    assert conv[:2] == ("layerscope::step", "layerscope::forward")


# ---- run --kernels / --nvtx: the user's own script ------------------------------------------
# pytorch/examples' regression, in small: an MLP fitted with SGD, one print per step
REGRESSION = """\
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
steps = int(sys.argv[1])
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 4), torch.randn(16, 1)
for i in range(steps):
    opt.zero_grad()
    loss = F.smooth_l1_loss(model(x), y)
    loss.backward()
    opt.step()
    print(f"step {i}")
"""


def _run_script(tmp_path, monkeypatch, steps, *flags):
    """run FLAGS -o r.json on the regression script of ``steps`` steps: (exit code, stdout,
    stderr, the JSON report, the events the kernels window joined)."""
    from helpers import run_cli

    (tmp_path / "regression.py").write_text(REGRESSION)
    monkeypatch.chdir(tmp_path)
    captured: dict = {}
    real_join = K.join

    def spy(events, cuda, **kw):
        captured["events"] = events
        return real_join(events, cuda, **kw)

    monkeypatch.setattr(K, "join", spy)
    code, out, err = run_cli("run", *flags, "-o", "r.json", "regression.py", str(steps))
    report = json.loads((tmp_path / "r.json").read_text())
    return code, out, err, report, captured.get("events")


@pytest.mark.parametrize("steps,profiled", [(6, 3), (2, 1)], ids=["window", "script-too-short"])
def test_run_kernels(tmp_path, monkeypatch, steps, profiled):
    """Three steps after the first are profiled (fewer when the script ends first, noted); the
    model's modules get forward and backward rows; every CPU op of the window is in one row;
    the script's output is its own."""
    from layerscope.core.records.kernels import KernelBreakdown

    code, out, _, report, events = _run_script(tmp_path, monkeypatch, steps, "--kernels")
    assert code == 0 and out == "".join(f"step {i}\n" for i in range(steps))
    kb = KernelBreakdown.from_dict(report["kernels"])
    assert kb.steps == profiled and kb.backward and kb.note == K.CPU_NOTE
    keys = {(r.module, r.phase) for r in kb.rows}
    assert {("0", "forward"), ("1", "forward"), ("2", "forward"), ("0", "backward"),
            ("2", "backward"), (OUTSIDE, "other")} <= keys
    assert {r.type for r in kb.rows if r.module == "0"} == {"Linear"}
    _check_every_op_once(events, kb, profiled)
    partial = [n for n in report["notes"] if n.startswith("--kernels:")]
    assert partial == ([] if profiled == 3 else [
        "--kernels: the script ended 1 step into the kernel window: the kernels section covers "
        "1 of 3 steps"])
    assert report["config"]["kernels"] is True


def test_run_kernels_window_after_the_warmup(tmp_path, monkeypatch):
    """--warmup-steps 4 of 6: the window opens at the end of step 4 and sees 2 steps end."""
    _, _, _, report, events = _run_script(tmp_path, monkeypatch, 6, "--kernels",
                                          "--warmup-steps", "4")
    assert report["kernels"]["steps"] == 2


def test_run_kernels_script_ends_before_the_window(tmp_path, monkeypatch):
    code, out, _, report, events = _run_script(tmp_path, monkeypatch, 1, "--kernels")
    assert code == 0 and out == "step 0\n" and events is None and "kernels" not in report
    assert ("--kernels: the script ended after 1 step, before the kernel window opened (it "
            "opens at the end of step 1): no kernels section") in report["notes"]


# pytorch/examples' regression as written: no torch.optim optimizer, the update by hand
MANUAL_UPDATE = REGRESSION.replace("opt = torch.optim.SGD(model.parameters(), lr=0.1)\n", "") \
    .replace("    opt.zero_grad()\n", "    model.zero_grad()\n") \
    .replace("    opt.step()\n", "    with torch.no_grad():\n"
             "        for p in model.parameters():\n            p -= 0.1 * p.grad\n")


@pytest.mark.parametrize("flags, covered", [((), None), (("--step-on", "backward"), 3)])
def test_run_kernels_without_an_optimizer(tmp_path, monkeypatch, flags, covered):
    """No optimizer step: steps that end at backward passes are provisional and never move
    the window, which the note says with the option that makes them steps; with
    --step-on backward the window covers 3 steps."""
    monkeypatch.setattr(sys.modules[__name__], "REGRESSION", MANUAL_UPDATE)
    code, out, _, report, events = _run_script(tmp_path, monkeypatch, 6, "--kernels", *flags)
    assert code == 0 and out == "".join(f"step {i}\n" for i in range(6))
    assert report.get("kernels", {}).get("steps") == covered
    no_window = ("--kernels: no optimizer.step() was seen, and the kernel window opens at the "
                 "step ends an optimizer step marks: no kernels section; use --step-on backward "
                 "(steps end where a backward() returns)")
    assert (no_window in report["notes"]) == (covered is None)


def test_run_kernels_refuses_nproc_per_node(tmp_path, monkeypatch):
    from helpers import run_cli

    (tmp_path / "regression.py").write_text(REGRESSION)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("run", "--kernels", "--nproc-per-node", "2", "regression.py", "2")
    assert code == 2 and out == "" and err.strip().endswith(
        "--kernels profiles the steps of one process: leave out --nproc-per-node (the window "
        "is not merged across ranks)") and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("cuda", [True, False], ids=["cuda", "no-cuda"])
def test_run_nvtx_steps_phases_and_modules(tmp_path, monkeypatch, cuda):
    """A step range per step (start/end: a step may end inside a phase), the phases nested and
    balanced, the model's modules inside forward once the model is known; the script's output
    is its own. Without CUDA: nothing pushed, a note."""
    from layerscope.analysis import nvtx

    log: list[tuple[str, object]] = []
    monkeypatch.setattr(nvtx, "available", lambda: cuda)
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: log.append(("push", name)))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: log.append(("pop", None)))
    monkeypatch.setattr(torch.cuda.nvtx, "range_start",
                        lambda name: log.append(("start", name)) or len(log))
    monkeypatch.setattr(torch.cuda.nvtx, "range_end", lambda rid: log.append(("end", rid)))
    code, out, _, report, _ = _run_script(tmp_path, monkeypatch, 3, "--nvtx")
    assert code == 0 and out == "step 0\nstep 1\nstep 2\n"
    if not cuda:
        assert log == [] and nvtx.NO_CUDA_NOTE in report["notes"]
        return
    stack: list[str] = []
    pushed = []
    for what, name in log:
        if what == "push":
            pushed.append((name, tuple(stack)))
            stack.append(str(name))
        elif what == "pop":
            stack.pop()
    assert stack == []
    starts = [i + 1 for i, (what, _) in enumerate(log) if what == "start"]
    ends = [rid for what, rid in log if what == "end"]
    assert sorted(ends) == starts and len(starts) >= 3  # every step range ended
    names = {n for n, _ in pushed}
    assert {"layerscope::forward", "layerscope::backward", "layerscope::optimizer",
            "module::(root) (Sequential)", "module::0 (Linear)"} <= names
    linear = next(inside for n, inside in pushed if n == "module::0 (Linear)")
    assert linear[0] == "layerscope::forward"
