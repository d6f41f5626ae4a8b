"""--memory-limit (run, train): an allocation that would take the live tensor bytes above the
limit raises torch.OutOfMemoryError before it is made, and the report's post-mortem says what
was alive, by module and kind, and what asked. Expected bytes are derived by hand from the
shapes (float32: 4 bytes, int64: 8)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap

import pytest
import torch
import torch.nn as nn
from helpers import run_cli

from layerscope.analysis.memory_oom import asked_bytes as _asked_bytes
from layerscope.analysis.memory_track import LimitGuard
from tests.warm_start import python_command

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The MNIST example's shape: a two-layer net, SGD, a batch that grows 8x a step (1, 8, 64,
# 512); --halve-on-oom catches the out-of-memory error and retries with half the batch.
SCRIPT = textwrap.dedent("""\
    import sys

    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(784, 256)
            self.fc2 = nn.Linear(256, 10)

        def forward(self, x):
            x = torch.flatten(x, 1)
            x = F.relu(self.fc1(x))
            return self.fc2(x)


    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    catch = "--halve-on-oom" in sys.argv
    batch = 1
    for step in range(4):
        while True:
            try:
                data, target = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
                loss = F.nll_loss(F.log_softmax(model(data), dim=1), target)
                break
            except torch.OutOfMemoryError:
                if not catch:
                    raise
                data = target = None  # the batch that did not fit
                batch //= 2
                print(f"out of memory: batch {batch}")
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step} batch {batch}")
        batch *= 8
    """)

# The same script without layerscope, made to fail where --memory-limit 2.9MB stops it: fc1's
# F.linear on the 512-sample batch raises torch.OutOfMemoryError (what a GPU would raise).
BARE = textwrap.dedent("""\
    import runpy, sys
    import torch, torch.nn.functional as F
    linear = F.linear
    def failing(x, w, b=None):
        if x.shape[0] == 512 and w.shape[0] == 256:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return linear(x, w, b)
    F.linear = failing
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
    """)

LIMIT = "2.9MB"
FC1 = 784 * 256 * 4 + 256 * 4  # 803,840
FC2 = 256 * 10 * 4 + 10 * 4  # 10,280
BATCH = 512 * 784 * 4  # the batch fc1 fails on: 1,605,632
# at fc1's addmm on 512 samples: the parameters (no gradients: zero_grad set them to None), the
# batch (the model's input), the targets (512 int64) and the last step's loss (a float32 scalar)
LIVE = [("", "inputs", BATCH), ("fc1", "parameters", FC1), ("fc2", "parameters", FC2),
        ("", "temporaries", 512 * 8 + 4)]


def _python(*argv: str, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    env.pop("RANK", None)
    command, env = python_command(argv, env)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def _frames(stderr: str, script: str) -> list[tuple[str, str]]:
    """(line, function) of the traceback's frames in ``script``."""
    return re.findall(rf'File "[^"]*{re.escape(script)}", line (\d+), in (\S+)', stderr)


def _frame_list(lines: list[str]) -> list[tuple[str, str, str]]:
    """(file, line, function) of a traceback's frames, torch's nn.Module call frames left
    out."""
    return [f for f in re.findall(r'File "([^"]*)", line (\d+), in (\S+)', "\n".join(lines))
            if not f[0].endswith(os.path.join("torch", "nn", "modules", "module.py"))]


@pytest.fixture
def script(tmp_path):
    (tmp_path / "bare.py").write_text(BARE)
    path = tmp_path / "mnist.py"
    path.write_text(SCRIPT)
    return path


@pytest.mark.integration
def test_oom_in_forward_leaves_the_scripts_traceback_and_a_post_mortem(tmp_path, script):
    bare = _python("bare.py", str(script), cwd=tmp_path)
    out = tmp_path / "r.json"
    run = _python("-m", "layerscope", "run", "--memory-limit", LIMIT, "-o", str(out), "--",
                  str(script), cwd=tmp_path)
    assert run.returncode == bare.returncode == 1, run.stderr
    assert run.stdout == bare.stdout == "step 0 batch 1\nstep 1 batch 8\nstep 2 batch 64\n"
    # the script's own traceback: its frames as without layerscope, torch's op innermost
    assert _frames(run.stderr, "mnist.py") == _frames(bare.stderr, "mnist.py") != []
    traceback = run.stderr.split("Traceback")[1].split("torch.OutOfMemoryError")[0]
    assert "layerscope/" not in traceback
    lines = run.stderr.splitlines()
    error = next(i for i, line in enumerate(lines) if line.startswith("torch.OutOfMemoryError"))
    innermost = [line for line in lines[:error] if line.lstrip().startswith("File ")][-1]
    assert re.search(r'linear\.py", line \d+, in forward', innermost)
    assert error == len(lines) - 3
    assert lines[-3].startswith("torch.OutOfMemoryError: layerscope --memory-limit: tried to "
                                "allocate 524288 bytes in fc1 (addmm, forward)")
    # then the summary, after the traceback
    assert lines[-2] == ("layerscope: out of memory in fc1 (forward, step 4) asking 0.5 MB with "
                         "2.4 MB live of a 2.9 MB limit: inputs of (top level) hold 66.2%")
    pm = json.loads(out.read_text())["post_mortem"]
    assert {k: v for k, v in pm.items() if k != "by_module_kind"} == {
        "error": "torch.OutOfMemoryError", "limit_bytes": 2_900_000,
        "asked_bytes": 512 * 256 * 4, "op": "addmm", "module": "fc1", "phase": "forward",
        "live_bytes": sum(b for _, _, b in LIVE), "step": 4}
    assert [(r["module"], r["kind"], r["bytes"]) for r in pm["by_module_kind"]] == LIVE
    assert pm["live_bytes"] + pm["asked_bytes"] > pm["limit_bytes"] >= pm["live_bytes"]
    # the terminal and HTML views show the live set as a table
    code, _, _ = run_cli("render", str(out), "-o", str(tmp_path / "r.html"))
    assert code == 0
    html = (tmp_path / "r.html").read_text()
    assert "Out of memory in fc1 (forward, addmm, step 4)" in html and "share of live" in html
    code, shown, _ = run_cli("render", str(out), "--width", "120")
    assert code == 0 and "Out of memory in fc1 (forward, addmm, step 4)" in shown


@pytest.mark.integration
def test_a_script_that_catches_the_oom_goes_on(tmp_path, script):
    out = tmp_path / "r.json"
    run = _python("-m", "layerscope", "run", "--memory-limit", LIMIT, "-o", str(out), "--",
                  str(script), "--halve-on-oom", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    # 512 samples do not fit, 256 do: the batch that failed was freed when the script let go
    assert run.stdout.splitlines()[-2:] == ["out of memory: batch 256", "step 3 batch 256"]
    d = json.loads(out.read_text())
    assert "post_mortem" not in d and d["breakdown"]["steps"] == 4
    assert d["config"]["memory_limit"] == 2_900_000
    caught = [n for n in d["notes"] if "caught by the script" in n]
    assert caught == ["an out-of-memory error (--memory-limit 2900000 bytes) was raised in fc1 "
                      "(forward, addmm asking 524288 bytes with 2423852 live) and caught by the "
                      "script, which went on"]


@pytest.mark.integration
def test_without_the_flag_nothing_is_watched(tmp_path, script):
    out = tmp_path / "r.json"
    run = _python("-m", "layerscope", "run", "-o", str(out), str(script), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    d = json.loads(out.read_text())
    assert "post_mortem" not in d and "memory_limit" not in d["config"]
    assert not any("out-of-memory" in n for n in d["notes"])


def test_train_with_a_tiny_limit(tmp_path):
    """The train report carries the post-mortem, as run's does: in RUN_DIR/report.json, -o's
    file and the terminal table; the summary line on stderr; exit status 1."""
    run_dir, out = tmp_path / "run", tmp_path / "r.json"
    code, _, err = run_cli("train", "digits-cnn", "--synthetic", "--quiet", "--memory-limit",
                           "1MB", "--out", str(run_dir), "-o", str(out))
    assert code == 1
    lines = [line for line in err.strip().splitlines() if not line.startswith("wrote ")]
    assert len(lines) == 1 and lines[0].startswith("layerscope: out of memory in ")
    assert "post-mortem in" not in lines[0]
    report = json.loads(out.read_text())
    assert json.loads((run_dir / "report.json").read_text()) == report
    assert not (run_dir / "post_mortem.json").exists()
    pm = report["post_mortem"]
    assert pm["limit_bytes"] == 1_000_000 and pm["phase"] == "forward"
    assert sum(r["bytes"] for r in pm["by_module_kind"]) == pm["live_bytes"]
    assert pm["live_bytes"] <= 1_000_000 < pm["live_bytes"] + pm["asked_bytes"]
    # the first step (batch 64) does not fit: no step measured, no final model
    assert report["breakdown"]["steps"] == 0 and report["step_seconds"] == []
    assert "training stopped out of memory in step 1; the breakdown covers the steps before " \
           "it" in report["notes"]
    assert not (run_dir / "model.pt").exists()
    code, shown, _ = run_cli("render", str(out), "--width", "120")
    assert code == 0 and f"Out of memory in (top level) (forward, {pm['op']}, step 1)" in shown


def test_train_out_of_memory_before_the_first_step(tmp_path):
    """A limit the model's own parameters pass: the report of no step, with the post-mortem,
    on standard output (no -o)."""
    code, shown, err = run_cli("train", "digits-cnn", "--synthetic", "--quiet",
                               "--memory-limit", "10KB", "--out", str(tmp_path / "run"),
                               "--format", "json")
    assert code == 1 and err.startswith("layerscope: out of memory in ")
    report = json.loads(shown)
    assert report["post_mortem"]["limit_bytes"] == 10_000 and report["epochs"] == []
    assert report["notes"][-1].startswith("training stopped out of memory before its first step")


# A script whose allocation the CPU allocator itself refuses (2**50 bytes: beyond the address
# space on any Linux), at the top level and inside a module's forward, as a PyTorch example
# would call it.
HUGE = textwrap.dedent("""\
    import sys

    import torch
    import torch.nn as nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            x = self.fc(x)
            return x.new_empty(2**50, dtype=torch.uint8)


    def main():
        print("start")
        if sys.argv[1] == "top":
            torch.empty(2**50, dtype=torch.uint8)
        Net()(torch.ones(2, 4))


    main()
    """)


@pytest.mark.integration
@pytest.mark.parametrize("where", ["top", "forward"])
@pytest.mark.parametrize("limit", ["2000TB", "10TB"], ids=["allocator-fails", "guard-refuses"])
def test_the_traceback_is_the_bare_scripts(tmp_path, where, limit):
    """Under --memory-limit the traceback has the bare script's frames: nothing of the guard
    that ran the op (its __torch_dispatch__, torch's wrappers around it, torch's op inside it);
    with the allocator's own failure (the limit is above 2**50 bytes) the same last line too."""
    (tmp_path / "s.py").write_text(HUGE)
    bare = _python("s.py", where, cwd=tmp_path)
    out = tmp_path / "r.json"
    run = _python("-m", "layerscope", "run", "--memory-limit", limit, "-o", str(out), "--",
                  "python", "s.py", where, cwd=tmp_path)
    assert run.returncode == bare.returncode == 1, run.stderr
    assert run.stdout == bare.stdout == "start\n"
    expected = bare.stderr.splitlines()
    assert "can't allocate memory" in expected[-1] and expected[0].startswith("Traceback")
    shown = run.stderr.splitlines()
    error = next(i for i, line in enumerate(shown) if "allocate" in line and ": " in line
                 and not line.startswith(" "))
    assert [line for line in shown[error + 1:] if "Traceback" in line or "File " in line] == []
    # torch's Module.__call__ takes its hooks' path under any global hook (layerscope's
    # forward hooks): its own frames there are torch's, with or without the guard
    assert _frame_list(shown[:error]) == _frame_list(expected[:-1]) != []
    if where == "top":
        assert shown[:error] == expected[:-1]
    if limit == "2000TB":
        assert shown[error] == expected[-1]
    else:
        assert shown[error].startswith("torch.OutOfMemoryError: layerscope --memory-limit: "
                                       f"tried to allocate {2**50} bytes")
    assert json.loads(out.read_text())["post_mortem"]["asked_bytes"] == 2**50


def test_train_within_the_limit_ends(tmp_path):
    """A run that fits ends with its report: after its steps train counts its step's FLOPs on
    fake tensors, which hold no memory (the guard asking their meta sizes hung)."""
    run_dir = tmp_path / "run"
    code, _, err = run_cli("train", "digits-cnn", "--synthetic", "--steps", "1", "--no-eval",
                           "--quiet", "--batch-size", "8", "--memory-limit", "100MB",
                           "--out", str(run_dir))
    assert code == 0, err
    report = json.loads((run_dir / "report.json").read_text())
    assert report["config"]["memory_limit"] == 100_000_000 and report["efficiency"] is not None


@pytest.mark.parametrize("command", [["run"], ["train", "digits-cnn"]], ids=["run", "train"])
@pytest.mark.parametrize("value,message", [
    ("0", "--memory-limit must be from 1 byte to 2**63-1 bytes, got '0'"),
    ("lots", "--memory-limit must be a size such as 80GB"),
], ids=["zero", "not-a-size"])
def test_bad_limit_is_one_line(tmp_path, script, command, value, message):
    code, out, err = run_cli(*command, "--memory-limit", value, *(
        [str(script)] if command == ["run"] else []))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err


def test_a_real_allocation_failure_gets_a_post_mortem():
    """Below the limit the allocator itself fails (CPU: a RuntimeError): the post-mortem has
    the live set then and the bytes its message names."""
    guard = LimitGuard(2**63 - 1)
    with guard:
        layer = nn.Linear(10, 10)  # 440 bytes
        with pytest.raises(RuntimeError) as failed:
            torch.empty(2**62, dtype=torch.uint8)
    pm = guard.post_mortem_of(failed.value)
    assert pm["error"] == "RuntimeError" and pm["asked_bytes"] == 2**62
    assert [(r["module"], r["kind"], r["bytes"]) for r in pm["by_module_kind"]] == [
        ("", "temporaries", 440)]  # never called: not known as a module's parameters
    assert guard.post_mortem_of(ValueError("no")) is None
    del layer


@pytest.mark.parametrize("message,asked", [
    ("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity", 20 * 2**20),
    ("DefaultCPUAllocator: can't allocate memory: you tried to allocate 4096 bytes.", 4096),
    ("out of memory", None),
], ids=["cuda", "cpu", "unknown"])
def test_bytes_asked_read_from_the_message(message, asked):
    assert _asked_bytes(message) == asked


def test_views_are_free_and_data_dependent_ops_are_checked_after():
    """A view makes no new storage; ``nonzero`` has no meta kernel (its size depends on the
    values), so it runs and is refused right after, its output dropped."""
    guard = LimitGuard(1000)
    with guard:
        x = torch.ones(200, dtype=torch.uint8)  # 200 bytes
        v = x.view(10, 20)
        assert guard.total == 200
        with pytest.raises(torch.OutOfMemoryError):
            torch.nonzero(x)  # 200 x 1 int64: 1600 bytes
    pm = guard.post_mortems[-1]
    assert (pm["op"], pm["asked_bytes"], pm["live_bytes"]) == ("nonzero", 1600, 200)
    assert pm["by_module_kind"] == [{"module": "", "kind": "temporaries", "bytes": 200}]
    del v


def test_the_option_is_declared_once_for_run_and_train():
    from layerscope.cli.main import build_parser
    from layerscope.core import options

    parser = build_parser()
    subs = next(a for a in parser._actions if a.dest == "command").choices
    found = {name: [(a.help, a.default, a.metavar) for a in sub._actions
                    if "--memory-limit" in a.option_strings] for name, sub in subs.items()}
    assert {k for k, v in found.items() if v} == {"run", "train"}
    assert found["run"] == found["train"] == [(options.MEMORY_LIMIT_HELP, None, "SIZE")]
    assert subs["run"].parse_args(["--memory-limit", "2GiB", "s.py"]).memory_limit == 2**30 * 2
    assert subs["train"].parse_args(["mnist-cnn", "--memory-limit", "512MB"]).memory_limit \
        == 512 * 10**6


# The MNIST example's loop, failing out of memory in its third step, without --memory-limit:
# in forward the CPU allocator itself (2**50 bytes in the head), in backward a CUDA-style
# torch.OutOfMemoryError from an autograd function, in the loss and the optimizer's step a
# MemoryError.
REAL_OOM = textwrap.dedent("""\
    import sys

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    WHERE = sys.argv[1]


    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            if grad.shape[0] == 64 and WHERE == "backward":
                raise torch.OutOfMemoryError(
                    "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total "
                    "capacity of 79.19 GiB")
            return grad * 2


    class Head(nn.Module):
        def forward(self, x):
            if x.shape[0] == 64 and WHERE == "forward":
                x.new_empty(2**50, dtype=torch.uint8)
            return Scale.apply(x)


    class Loss(nn.CrossEntropyLoss):
        def forward(self, out, target):
            if out.shape[0] == 64 and WHERE == "loss":
                raise MemoryError()
            return super().forward(out, target)


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(8, 4)
            self.head = Head()

        def forward(self, x):
            return self.head(self.fc1(x))


    class SGD(torch.optim.SGD):
        def step(self, closure=None):
            if batch == 64 and WHERE == "optimizer":
                raise MemoryError()
            return super().step(closure)


    model, loss_fn = Net(), Loss()
    optimizer = SGD(model.parameters(), lr=0.01)
    for batch in (8, 8, 64):
        loss = loss_fn(model(torch.randn(batch, 8)), torch.zeros(batch, dtype=torch.long))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"batch {batch}")
    """)


@pytest.mark.integration
@pytest.mark.parametrize("where,error,asked,module", [
    ("forward", "RuntimeError", 2**50, "head"),
    ("backward", "torch.OutOfMemoryError", 20 * 2**20, ""),
    ("loss", "MemoryError", None, "(top level)"),
    ("optimizer", "MemoryError", None, ""),
])
def test_a_real_oom_without_the_flag_gets_a_post_mortem(tmp_path, where, error, asked, module):
    """No tensor is tracked: the report says the run ended out of memory, with the error, the
    bytes its message names, the phase and the step (from the error's traceback and the
    steps seen), and that the module x kind table needs --memory-limit."""
    (tmp_path / "oom.py").write_text(REAL_OOM)
    out = tmp_path / "r.json"
    bare = _python("oom.py", where, cwd=tmp_path)
    run = _python("-m", "layerscope", "run", "-o", str(out), "oom.py", where, cwd=tmp_path)
    assert run.returncode == bare.returncode == 1, run.stderr
    assert run.stdout == bare.stdout == "batch 8\nbatch 8\n"
    pm = json.loads(out.read_text())["post_mortem"]
    # the loss module is called outside the model: it is the top level of its own call
    assert pm == {"error": error, "limit_bytes": None, "asked_bytes": asked, "op": None,
                  "module": "" if module == "(top level)" else module, "phase": where,
                  "live_bytes": None, "by_module_kind": [], "step": 3}
    shown_where = f"{module or '(top level)'} ({where}, step 3)"
    asking = f" asking {asked / 1e6:.1f} MB" if asked is not None else ""
    assert (f"layerscope: out of memory in {shown_where}{asking} ({error}): what was alive is "
            "tracked only with --memory-limit SIZE (any size, e.g. above the machine's memory: "
            "every tensor is then counted by module and kind)") in run.stderr.splitlines()
    code, shown, _ = run_cli("render", str(out), "--width", "200")
    assert code == 0 and f"out of memory in {shown_where}" in shown
    assert "alive at the failure" not in shown  # no empty table on the terminal
    code, _, _ = run_cli("render", str(out), "-o", str(tmp_path / "r.html"))
    assert code == 0 and "tracked only with --memory-limit SIZE" in (
        tmp_path / "r.html").read_text()
