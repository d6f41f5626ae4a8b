"""layerscope run SCRIPT.py / -m MODULE: the user's own script, unmodified, with its steps split
into phases; its output, argv and exit code as with plain python."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from helpers import run_cli

from layerscope.training.phases import ALWAYS
from tests.warm_start import python_command

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A training script written without layerscope in mind: argparse, DataLoader, Adam, prints per
# epoch, exits with the code it is given. 48 samples in batches of 16: 3 steps an epoch.
SCRIPT = textwrap.dedent("""\
    import argparse
    import sys

    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset

    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--exit", type=int, default=0)
    p.add_argument("--fail-at", type=int, default=0)
    args = p.parse_args()
    print("argv", sys.argv, "name", __name__, "path0", sys.path[0])
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(48, 1, 8, 8, generator=g),
                         torch.randint(0, 4, (48,), generator=g))
    loader = DataLoader(data, batch_size=16, shuffle=True, generator=g)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(),
                          nn.Linear(256, 4))
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    loss_fn = nn.CrossEntropyLoss()
    step = 0
    for epoch in range(args.epochs):
        total = 0.0
        for x, y in loader:
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            try:
                opt.step()
            except Exception:  # a script that swallows errors must still stop at --steps
                print("swallowed")
            step += 1
            total += loss.item()
            if step == args.fail_at:
                raise ValueError("boom at step %d" % step)
        print(f"epoch {epoch + 1} loss {total:.6f}", flush=True)
    sys.exit(args.exit)
    """)
STEPS_PER_EPOCH = 3


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train_me.py"
    path.write_text(SCRIPT)
    return path


def _python(*argv: str, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    env.pop("RANK", None)
    command, env = python_command(argv, env)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


# (id, layerscope options, script arguments, exit code, steps in the report)
CASES = [
    ("two-epochs", [], ["--epochs", "2"], 0, 2 * STEPS_PER_EPOCH),
    ("exit-code-kept", [], ["--epochs", "1", "--exit", "3"], 3, STEPS_PER_EPOCH),
    ("raises-partial-report", [], ["--epochs", "2", "--fail-at", "4"], 1, 4),
    ("steps-stop-early", ["--steps", "2"], ["--epochs", "2"], 0, 2),
    ("warmup", ["--warmup-steps", "2"], ["--epochs", "2"], 0, 2 * STEPS_PER_EPOCH - 2),
]


@pytest.mark.integration
@pytest.mark.parametrize("options,script_args,code,steps", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_script_runs_as_python_runs_it(tmp_path, script, options, script_args, code, steps):
    bare = _python(str(script), *script_args, cwd=tmp_path)
    out = tmp_path / "report.json"
    run = _python("-m", "layerscope", "run", "-o", str(out), *options, str(script),
                  *script_args, cwd=tmp_path)
    assert run.returncode == bare.returncode == code, run.stderr
    if "--steps" in options:  # stopped: the lines printed before the stop, nothing after
        assert bare.stdout.startswith(run.stdout) and "swallowed" not in run.stdout
    else:
        assert run.stdout == bare.stdout  # byte-identical: argv, __name__, sys.path[0], prints
    # its standard error as python's (a traceback, from the script's frame on), then ours
    assert run.stderr.startswith(bare.stderr) and run.stderr.endswith(f"wrote {out}\n")
    if code == 1:
        assert "Traceback (most recent call last)" in run.stderr
        assert "ValueError: boom at step 4" in run.stderr
    d = json.loads(out.read_text())
    b = d["breakdown"]
    assert d["kind"] == "train" and b["steps"] == steps
    # as given, and where it started: what advise --verify runs again
    assert d["script"] == {"name": "train_me.py", "argv": script_args, "path": str(script),
                           "module": False, "cwd": os.path.realpath(tmp_path)}
    assert sum(b["seconds"].values()) == pytest.approx(b["wall_s"], rel=1e-9)
    assert abs(sum(b["seconds"].values()) - b["wall_s"]) <= 0.03 * b["wall_s"]
    for phase in ("data", "forward", "loss", "backward", "optimizer"):
        assert b["seconds"][phase] > 0, phase
    assert set(b["seconds"]) == set(ALWAYS) - {"h2d"}  # a CPU run: no host-to-device phase


@pytest.mark.integration
def test_module_form_gets_the_same_argv_and_path(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "trainer.py").write_text(SCRIPT)
    bare = _python("-m", "pkg.trainer", "--epochs", "1", cwd=tmp_path)
    out = tmp_path / "r.json"
    run = _python("-m", "layerscope", "run", "-o", str(out), "-m", "pkg.trainer", "--epochs",
                  "1", cwd=tmp_path)
    assert run.returncode == bare.returncode == 0, run.stderr
    assert run.stdout == bare.stdout
    d = json.loads(out.read_text())
    assert d["breakdown"]["steps"] == STEPS_PER_EPOCH
    assert d["script"] == {"name": "pkg.trainer", "argv": ["--epochs", "1"],
                           "path": "pkg.trainer", "module": True,
                           "cwd": os.path.realpath(tmp_path)}


def test_outputs_and_report_on_stderr(tmp_path, script, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("run", "--layers", "--memory", "--trace", "t.json", "--html",
                             "r.html", "--tensorboard", "tb", str(script), "--epochs", "1")
    assert code == 0, err
    assert out.startswith("argv")  # the script's output only
    assert "train_me.py --epochs 1 — training" in err and "Forward" in err
    trace = json.loads((tmp_path / "t.json").read_text())
    assert sum(e["ph"] == "X" and e["tid"] == 0 for e in trace["traceEvents"]) == 3
    assert "train_me.py --epochs 1" in (tmp_path / "r.html").read_text()
    assert os.listdir(tmp_path / "tb")


def test_run_leaves_nothing_installed(tmp_path, script, monkeypatch):
    import torch
    from torch.nn.modules import module as M
    from torch.optim import optimizer as O

    monkeypatch.chdir(tmp_path)
    before = (len(M._global_forward_hooks), len(O._global_optimizer_post_hooks),
              torch.autograd._engine_run_backward, sys.argv, list(sys.path))
    code, _, err = run_cli("run", "--format", "json", str(script), "--fail-at", "1")
    assert code == 1 and "ValueError" in err
    assert before == (len(M._global_forward_hooks), len(O._global_optimizer_post_hooks),
                      torch.autograd._engine_run_backward, sys.argv, list(sys.path))


# (id, argv after "run", what the one error line says)
BAD = [
    ("no-script", [], "give the script to run"),
    ("missing-script", ["nope.py"], "no such script nope.py"),
    ("m-without-module", ["-m"], "-m needs a module name"),
    ("python-without-script", ["--", "python"], "give the script after python"),
    ("python-with-its-options", ["--", "python", "-u", "SCRIPT"], "interpreter options"),
    ("python-m-without-module", ["--", "python3", "-m"], "-m needs a module name"),
    ("png-without-o", ["--format", "png", "SCRIPT"], "give -o FILE.png"),
    ("output-in-missing-folder", ["-o", "no/such/r.json", "SCRIPT"], "no such directory"),
]


@pytest.mark.parametrize("argv,message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_command_lines_are_one_line(tmp_path, script, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("run", *[str(script) if a == "SCRIPT" else a for a in argv])
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert out == ""  # the script never ran


def test_an_output_in_a_read_only_folder_is_refused_before_the_script_runs(tmp_path, script,
                                                                            monkeypatch):
    """The report's folder is checked before the script starts: a run of minutes is not lost
    at its end, and the script's exit status is not replaced by the writer's error. (The test
    runs as root, whom permission bits do not stop: the folder is read-only through
    ``os.access``, which the check asks, as a read-only mount answers.)"""
    monkeypatch.chdir(tmp_path)
    ro = tmp_path / "ro"
    ro.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: (
        False if os.path.abspath(path) == str(ro) and mode & os.W_OK else real(path, mode, **kw)))
    for options in (["-o", "ro/r.json"], ["--trace", "ro/t.json"], ["--html", "ro/r.html"]):
        code, out, err = run_cli("run", *options, str(script), "--epochs", "1")
        assert code == 2 and out == "", err  # the script never ran: no "argv ..." line
        assert err.startswith(f"layerscope: error: cannot write {' '.join(options)}: "
                              "Permission denied") and len(err.splitlines()) == 1, err
    assert os.listdir(ro) == []


# a script that ends its process itself after its steps: the report is written first
ABRUPT = textwrap.dedent("""    import os
    import sys

    import torch
    import torch.nn as nn

    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(int(sys.argv[2])):
        opt.zero_grad()
        model(torch.randn(8, 4)).sum().backward()
        opt.step()
    print("steps done", flush=True)
    print("lost: never flushed before os._exit")  # (standard output is a pipe here)
    if sys.argv[1] == "exit":
        os._exit(int(sys.argv[3]))
    if sys.argv[1] == "exec-missing":  # fails: the script goes on, the report comes at its end
        try:
            os.execv("/no/such/program", ["x"])
        except OSError:
            print("exec failed", flush=True)
        opt.step()
        sys.exit(int(sys.argv[3]))
    os.execv(sys.executable, [sys.executable, "-c", "print('replaced')"])
    """)


# (id, how the script ends, steps before, exit code)
ABRUPT_CASES = [
    ("os._exit-0", ["exit", "4", "0"], 4, 0),
    ("os._exit-3", ["exit", "4", "3"], 4, 3),
    ("os.execv", ["exec", "3"], 3, 0),
    ("exec-that-fails", ["exec-missing", "3", "5"], 4, 5),
]


@pytest.mark.integration
@pytest.mark.parametrize("how,steps,code", [c[1:] for c in ABRUPT_CASES],
                         ids=[c[0] for c in ABRUPT_CASES])
def test_a_script_that_ends_with_os_exit_or_exec_still_gets_its_report(tmp_path, how, steps,
                                                                       code):
    (tmp_path / "ends.py").write_text(ABRUPT)
    bare = _python("ends.py", *how, cwd=tmp_path)
    out = tmp_path / "r.json"
    run = _python("-m", "layerscope", "run", "-o", str(out), "ends.py", *how, cwd=tmp_path)
    assert run.returncode == bare.returncode == code, run.stderr
    assert run.stdout == bare.stdout  # unflushed output is lost under both, as python loses it
    assert run.stderr == bare.stderr + f"wrote {out}\n"
    assert json.loads(out.read_text())["breakdown"]["steps"] == steps
    # the report on standard error, without -o
    run = _python("-m", "layerscope", "run", "ends.py", *how, cwd=tmp_path)
    assert run.returncode == code and "Time per phase" in run.stderr, run.stderr


@pytest.mark.parametrize("interpreter", ["python", "python3", "python3.11", "EXE"])
def test_the_interpreter_typed_before_the_script_is_this_one(tmp_path, script, monkeypatch,
                                                              interpreter):
    """``run -- python train.py`` (as the script is run without layerscope) runs it here, the
    same as ``run train.py``: same argv for the script, same report."""
    monkeypatch.chdir(tmp_path)
    exe = sys.executable if interpreter == "EXE" else interpreter
    code, out, err = run_cli("run", "-o", "r.json", "--", exe, str(script), "--epochs", "1")
    assert code == 0, err
    assert f"argv ['{script}', '--epochs', '1']" in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["kind"] == "train" and len(report["step_seconds"]) == 3


def test_python_dash_m_after_the_interpreter_runs_the_module(tmp_path, monkeypatch):
    (tmp_path / "trainmod.py").write_text(SCRIPT)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("run", "-o", "r.json", "--", "python", "-m", "trainmod")
    assert code == 0, err
    assert "name __main__" in out


DDP_SCRIPT = textwrap.dedent("""\
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    torch.manual_seed(dist.get_rank())
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), 0.1)
    for _ in range(5):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    dist.destroy_process_group()
    print("rank", dist.is_available())
    """)


@pytest.mark.slow
def test_torchrun_each_rank_measures_rank0_writes(tmp_path):
    (tmp_path / "ddp.py").write_text(DDP_SCRIPT)
    run = _python("-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                  "29531", "-m", "layerscope", "run", "-o", "out.json", "ddp.py", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    d = json.loads((tmp_path / "out.json").read_text())
    assert d["rank"] == 0 and d["world_size"] == 2
    assert d["breakdown"]["steps"] == 5
    assert d["breakdown"]["seconds"]["backward"] > 0
    # launched by the user's torchrun: recorded, and only rank 0's steps are in the report
    assert d["process_group"] == {"rank": 0, "world_size": 2, "backend": "gloo"}
    assert any("use layerscope run --nproc-per-node 2" in n for n in d["notes"])


def test_a_debug_flag_after_the_script_is_the_scripts(tmp_path, monkeypatch):
    """``--debug`` is layerscope's only before the command: ``run s.py --debug`` gives it to
    the script, and layerscope's own warning keeps its one-line label (with layerscope's
    --debug it would print as Python prints warnings)."""
    (tmp_path / "s.py").write_text(textwrap.dedent("""\
        import sys
        import warnings
        from layerscope.errors import LayerscopeWarning
        print(sys.argv[1:])
        warnings.warn("ours", LayerscopeWarning)
        """))
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("run", "s.py", "--debug")
    assert code == 0 and out == "['--debug']\n", err
    assert err.startswith("layerscope: warning: ours\n"), err


@pytest.mark.integration
def test_the_scripts_warnings_and_logs_are_its_own(tmp_path):
    # other commands print warnings as one "layerscope: warning:" line; a script's are its
    # output and reach stderr as python prints them
    (tmp_path / "warns.py").write_text(textwrap.dedent("""\
        import logging, warnings
        warnings.warn("careful now")
        logging.getLogger("mine").warning("logged %d", 7)
        """))
    bare = _python("warns.py", cwd=tmp_path)
    run = _python("-m", "layerscope", "run", "warns.py", cwd=tmp_path)
    assert run.returncode == bare.returncode == 0, run.stderr
    assert run.stderr.startswith(bare.stderr)  # then the report
    assert "UserWarning: careful now" in run.stderr and "logged 7" in run.stderr
    assert "layerscope: warning" not in run.stderr
