"""layerscope memory SCRIPT.py: the memory of the script's own second training step (its model,
optimizer, loss and data, real tensors), by module and kind at the peak; the script's output and
exit code as ``layerscope run`` keeps them; on CUDA, the caching allocator's and the driver's
figures beside the tracked peak (tested here on faked ``torch.cuda`` statistics)."""
from __future__ import annotations

import json
import sys
import textwrap

import pytest
import torch
from helpers import run_cli

# The PyTorch MNIST example's network and loop (Adam instead of Adadelta), on 64 random
# samples in batches of --batch-size: zero_grad, forward, nll_loss, backward, step.
SCRIPT = textwrap.dedent("""\
    import argparse
    import sys
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 32, 3, 1)
            self.conv2 = nn.Conv2d(32, 64, 3, 1)
            self.dropout1 = nn.Dropout(0.25)
            self.dropout2 = nn.Dropout(0.5)
            self.fc1 = nn.Linear(9216, 128)
            self.fc2 = nn.Linear(128, 10)

        def forward(self, x):
            x = F.relu(self.conv1(x))
            x = F.relu(self.conv2(x))
            x = F.max_pool2d(x, 2)
            x = self.dropout1(x)
            x = torch.flatten(x, 1)
            x = F.relu(self.fc1(x))
            x = self.dropout2(x)
            x = self.fc2(x)
            return F.log_softmax(x, dim=1)


    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--exit", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(args.samples, 1, 28, 28),
                         torch.randint(0, 10, (args.samples,)))
    loader = DataLoader(data, batch_size=args.batch_size)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for batch_idx, (x, target) in enumerate(loader):
        optimizer.zero_grad()
        output = model(x)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        print(f"step {batch_idx}")
    print("done")
    sys.exit(args.exit)
    """)

# Hand-derived float32 bytes of each module's parameters (weights + biases):
# conv1 32*1*3*3 + 32 = 320, conv2 64*32*3*3 + 64 = 18,496, fc1 9216*128 + 128 = 1,179,776,
# fc2 128*10 + 10 = 1,290 numbers, 4 bytes each.
PARAMS = {"conv1": 320 * 4, "conv2": 18_496 * 4, "fc1": 1_179_776 * 4, "fc2": 1_290 * 4}
# Adam keeps exp_avg and exp_avg_sq (each the parameter's size) and a float32 0-d `step` tensor
# per parameter (2 parameters per module): 2 x parameters + 2 x 4 bytes.
ADAM = {m: 2 * b + 2 * 4 for m, b in PARAMS.items()}


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "mnist_train.py"
    path.write_text(SCRIPT)
    return path


def _rows(report: dict) -> dict[tuple[str, str], int]:
    return {(r["module"], r["kind"]): r["bytes"] for r in report["by_module_kind"]}


@pytest.mark.integration
@pytest.mark.parametrize("form", ["dashdash", "python", "bare"])
def test_mnist_script_step_by_module_and_kind(tmp_path, script, monkeypatch, form):
    import torch.nn.modules.module as M
    from torch.optim import optimizer as O

    monkeypatch.chdir(tmp_path)
    before = (len(M._global_forward_hooks), len(M._global_forward_pre_hooks),
              len(O._global_optimizer_post_hooks), len(O._global_optimizer_pre_hooks),
              torch.autograd._engine_run_backward, sys.argv)
    argv = {"dashdash": ["--", str(script), "--batch-size", "16"],
            "python": ["--", "python", str(script), "--batch-size", "16"],
            "bare": [str(script)]}[form]  # --batch-size's default is 16
    code, out, err = run_cli("memory", "-o", "r.json", *argv)
    assert code == 0, err
    # the script's own output: the warm-up step's line; stopped cleanly after the tracked one
    assert out == "step 0\n"
    assert before == (len(M._global_forward_hooks), len(M._global_forward_pre_hooks),
                      len(O._global_optimizer_post_hooks), len(O._global_optimizer_pre_hooks),
                      torch.autograd._engine_run_backward, sys.argv)
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["kind"] == "memory" and r["mode"] == "training" and r["optimizer"] == "Adam"
    assert r["batch_size"] == 16 and r["inputs"] == ["16x1x28x28:float32"]
    rows = _rows(r)
    for module, nbytes in PARAMS.items():
        assert rows[(module, "parameters")] == nbytes, module
        assert rows[(module, "optimizer_state")] == ADAM[module], module
        # the peak is in the optimizer's step: every gradient is alive
        assert rows[(module, "gradients")] == nbytes, module
    assert r["peak_phase"] == "optimizer"
    # the batch 16x1x28x28 float32 and its 16 int64 labels, as collated (the dataset tensor
    # they were sliced from existed before the step: not counted)
    assert rows[("", "inputs")] == 16 * 28 * 28 * 4 + 16 * 8
    assert rows[("", "outputs")] == 16 * 10 * 4  # log_softmax's [16, 10]
    assert sum(rows.values()) == r["peak_bytes"] == r["measured_peak_bytes"]
    assert max(p["bytes"] for p in r["timeline"]) == r["peak_bytes"]
    assert {p["phase"] for p in r["timeline"]} >= {"data", "forward", "loss", "backward",
                                                    "optimizer"}
    rec = r["reconciliation"]
    assert rec["measured_peak_bytes"] == r["peak_bytes"]
    assert rec["static_peak_bytes"] is None and rec["difference"] is None
    assert "allocated_peak_bytes" not in rec  # a CPU run


def test_terminal_report_goes_to_stderr(tmp_path, script, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("memory", str(script))
    assert code == 0 and out == "step 0\n", err
    assert "alive at the peak (Optimizer)" in err and "the script's second training step" in err


def test_exit_code_and_short_scripts(tmp_path, script, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # one batch only: no second step to track; the script's own exit code (0) is no report
    code, out, err = run_cli("memory", "--", str(script), "--samples", "16")
    assert code == 2 and out == "step 0\ndone\n"
    assert "after 1 optimizer step(s): memory tracks the second training step" in err
    code, out, err = run_cli("memory", "--", str(script), "--samples", "16", "--exit", "3")
    assert code == 3 and "ended with exit code 3" in err


# (id, argv after "memory": every word after the script is the script's, memory's own options
# before it; the file memory writes its report to)
SCRIPT_ARGS = [
    ("its-batch-size", ["-o", "r.json", "SCRIPT", "--batch-size", "8"], "r.json"),
    ("its-options-that-are-also-memorys", ["-o", "r.json", "SCRIPT", "--batch-size=8",
                                           "--mode", "x", "-o", "theirs.json"], "r.json"),
    ("memorys-options-first", ["--mode", "training", "--format=json", "--output", "m.json",
                               "SCRIPT", "--batch-size", "8"], "m.json"),
    ("after-the-interpreter", ["-om.json", "python", "SCRIPT", "--batch-size", "8"], "m.json"),
]


@pytest.mark.parametrize("argv,report", [c[1:] for c in SCRIPT_ARGS],
                         ids=[c[0] for c in SCRIPT_ARGS])
def test_words_after_the_script_are_the_scripts(tmp_path, monkeypatch, argv, report):
    """``memory train.py --batch-size 8`` gives ``--batch-size 8`` to the script (as ``run``
    and python do), not to memory's own --batch-size (which a script refuses)."""
    text = SCRIPT.replace('parser.add_argument("--exit"', 'parser.add_argument("--mode")\n'
                          'parser.add_argument("-o")\nparser.add_argument("--exit"')
    (tmp_path / "mnist_train.py").write_text(text)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("memory", *["mnist_train.py" if a == "SCRIPT" else a for a in argv])
    assert code == 0 and out == "step 0\n", err
    r = json.loads((tmp_path / report).read_text())
    assert r["batch_size"] == 8 and r["inputs"] == ["8x1x28x28:float32"]
    assert not (tmp_path / "theirs.json").exists()  # the script's -o, which it only parses


def test_a_forward_called_directly_is_named_as_the_reason_for_no_report(tmp_path,
                                                                          monkeypatch):
    """pytorch/examples' forward-forward calls ``self.forward(x)``: no module call holds the
    optimizer's parameters, so no step can be charged to modules. The one line says that (not
    that the script stopped after one step: it ran all its steps, its output its own)."""
    (tmp_path / "direct.py").write_text(textwrap.dedent("""\
        import torch
        import torch.nn as nn
        layer = nn.Linear(4, 2)
        opt = torch.optim.Adam(layer.parameters())
        for i in range(3):
            opt.zero_grad()
            layer.forward(torch.randn(8, 4)).pow(2).mean().backward()
            opt.step()
            print(i)
        """))
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("memory", "direct.py")
    assert code == 2 and out == "0\n1\n2\n", err
    assert len(err.splitlines()) == 1 and "forward ran outside module calls" in err, err


# (id, argv after "memory", what the one error line says)
BAD = [
    ("input-with-script", ["--input", "1x1x28x28", "SCRIPT"], "--input is for a model given by"),
    ("batch-size-before-script", ["--batch-size", "8", "SCRIPT"],
     "--batch-size is for a model given by name"),
    ("fit-with-script", ["--fit", "1GB", "SCRIPT"], "--fit is for a model given by name"),
    ("model-with-extra", ["mnist-cnn", "extra"], "unexpected arguments extra"),
    ("python-without-script", ["--", "python"], "give the script after python"),
    ("cuda-without-measure", ["mnist-cnn", "--device", "cuda"], "add --measure"),
    ("unknown-device", ["mnist-cnn", "--measure", "--device", "tpu"], "unknown --device"),
]


@pytest.mark.parametrize("argv,message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_command_lines_are_one_line(tmp_path, script, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("memory", *[str(script) if a == "SCRIPT" else a for a in argv])
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert out == ""  # the script never ran


def test_measure_on_cuda_without_a_gpu_is_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, out, err = run_cli("memory", "mnist-cnn", "--measure", "--device", "cuda")
    assert code == 2 and out == "" and "no CUDA GPU is available here" in err


# ---- CUDA: the caching allocator's and the driver's figures, on faked statistics -------------
GIB = 2 ** 30


class _FakeCuda:
    """torch.cuda's statistics functions as a device would answer them; records the calls."""

    def __init__(self, allocated, reserved, free, total, mem_info_fails=False):
        self.allocated, self.reserved, self.free, self.total = allocated, reserved, free, total
        self.fails = mem_info_fails
        self.calls: list[str] = []

    def install(self, monkeypatch):
        for name in ("synchronize", "reset_peak_memory_stats", "max_memory_allocated",
                     "max_memory_reserved", "mem_get_info"):
            monkeypatch.setattr(torch.cuda, name, getattr(self, name))

    def synchronize(self, device=None):
        self.calls.append("synchronize")

    def reset_peak_memory_stats(self, device=None):
        self.calls.append("reset")

    def max_memory_allocated(self, device=None):
        return self.allocated

    def max_memory_reserved(self, device=None):
        return self.reserved

    def mem_get_info(self, device=None):
        if self.fails:
            raise RuntimeError("not supported")
        return self.free, self.total


# (id, allocated peak, reserved peak, free, total, driver answers, tracked peak)
CUDA_CASES = [
    ("driver-answers", 3 * GIB, 4 * GIB, 74 * GIB, 80 * GIB, True, 2 * GIB),
    ("no-fragmentation", GIB, GIB, 78 * GIB, 80 * GIB, True, GIB),
    ("mig-no-mem-info", 2 * GIB, 3 * GIB, 0, 0, False, GIB + 5),
]


@pytest.mark.parametrize("allocated,reserved,free,total,answers,tracked",
                         [c[1:] for c in CUDA_CASES], ids=[c[0] for c in CUDA_CASES])
def test_cuda_reconciliation_on_faked_statistics(monkeypatch, allocated, reserved, free, total,
                                                 answers, tracked):
    from layerscope.analysis.memory_cuda import cuda_figures, fill_cuda
    from layerscope.core.records.memory import Reconciliation

    fake = _FakeCuda(allocated, reserved, free, total, mem_info_fails=not answers)
    fake.install(monkeypatch)
    got = []
    with cuda_figures(torch.device("cuda", 0), got.append):
        assert fake.calls == ["synchronize", "reset"]  # peaks reset before the step
    assert fake.calls == ["synchronize", "reset", "synchronize"]  # read after it finished
    (figures,) = got
    rec = Reconciliation(static_peak_bytes=None, measured_peak_bytes=tracked, difference=None)
    fill_cuda(rec, figures)
    assert rec.allocated_peak_bytes == allocated and rec.reserved_peak_bytes == reserved
    assert rec.fragmentation_bytes == reserved - allocated
    assert rec.cuda_unexplained_bytes == allocated - tracked
    assert rec.driver_used_bytes == (total - free if answers else None)
    assert f"{allocated - tracked:,} bytes unexplained" in rec.notes[-1]
    assert ("beyond the reserved peak" in rec.notes[-1]) == answers
    d = rec.to_dict()
    assert ("driver_used_bytes" in d) == answers and d["fragmentation_bytes"] == reserved - \
        allocated


def test_cuda_figures_in_the_terminal_facts():
    from layerscope.analysis.memory_cuda import fill_cuda
    from layerscope.core.records.memory import MemoryReport, MemoryRow, Reconciliation
    from layerscope.views.memory import facts, heading

    rec = Reconciliation(static_peak_bytes=None, measured_peak_bytes=GIB, difference=None)
    fill_cuda(rec, {"allocated_peak": 2 * GIB, "reserved_peak": 3 * GIB,
                    "driver_used": 5 * GIB})
    r = MemoryReport(model="train.py", mode="training", peak_bytes=GIB, peak_phase="optimizer",
                     peak_t=0, by_module_kind=[MemoryRow("", "parameters", GIB)], timeline=[],
                     reconciliation=rec)
    shown = dict(facts(r))
    assert "fragmentation" in shown["CUDA allocated / reserved peak"]
    assert "Measured peak (CPU)" not in shown  # no static run to compare with
    assert "measured (the script's own step)" in heading(r)[1]


# A loop with a transform module called by the dataset (before any forward of the model), a loss
# module, keyword arguments to forward, gradient clipping and SGD with momentum.
SCRIPT_MODULES = textwrap.dedent("""\
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, Dataset


    class Scale(nn.Module):  # a transform, as torchvision's are modules
        def forward(self, x):
            return x * 0.5


    class Data(Dataset):
        def __init__(self):
            self.x = torch.randn(24, 32)
            self.scale = Scale()

        def __len__(self):
            return 24

        def __getitem__(self, i):
            return {"features": self.scale(self.x[i]), "label": i % 4}


    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(32, 64)
            self.head = nn.Linear(64, 4, bias=False)

        def forward(self, features):
            return self.head(torch.relu(self.body(features)))


    model = Model()
    criterion = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for batch in DataLoader(Data(), batch_size=8):
        opt.zero_grad()
        loss = criterion(model(features=batch["features"]), batch["label"])
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    """)


def test_the_model_is_the_module_the_optimizer_steps(tmp_path, monkeypatch):
    (tmp_path / "loop.py").write_text(SCRIPT_MODULES)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("memory", "-o", "r.json", "loop.py")
    assert code == 0, err
    r = json.loads((tmp_path / "r.json").read_text())
    rows = _rows(r)
    body, head = (32 * 64 + 64) * 4, 64 * 4 * 4  # hand-derived float32 parameter bytes
    assert rows[("body", "parameters")] == body and rows[("head", "parameters")] == head
    # SGD with momentum: one buffer the size of each parameter
    assert rows[("body", "optimizer_state")] == body and rows[("head", "optimizer_state")] == head
    assert r["optimizer"] == "SGD" and r["batch_size"] == 8
    # the batch (8x32 float32 features, 8 int64 labels) came in by keyword: inputs all the same
    assert rows[("", "inputs")] == 8 * 32 * 4 + 8 * 8
    assert not any(m in ("scale", "criterion") for m, _ in rows)  # not the model's modules
    assert sum(rows.values()) == r["peak_bytes"]


THREADED = textwrap.dedent("""\
    import threading
    import torch

    def train():
        model = torch.nn.Linear(8, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(5):
            loss = model(torch.randn(4, 8)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()

    t = threading.Thread(target=train)
    t.start()
    t.join()
    print("joined")
    """)


def test_a_training_loop_in_a_thread_ends_quietly_after_the_tracked_step(tmp_path,
                                                                         monkeypatch):
    """The StepLimit that stops the script after its second step ended the thread with
    python's "Exception in thread" traceback (layerscope run ends it quietly); the script
    goes on after the thread, and "wrote" names the output as given."""
    import threading

    monkeypatch.chdir(tmp_path)
    (tmp_path / "threaded.py").write_text(THREADED)
    hook = threading.excepthook
    code, out, err = run_cli("memory", "-o", "m.json", "threaded.py")
    assert code == 0, err
    assert out == "joined\n"
    assert "StepLimit" not in err and "Exception in thread" not in err, err
    assert err == "wrote m.json\n"
    assert threading.excepthook is hook  # put back
    assert json.loads((tmp_path / "m.json").read_text())["optimizer"] == "SGD"
