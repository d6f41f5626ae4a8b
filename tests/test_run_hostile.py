"""layerscope run against scripts that do what real scripts do to the process around them:
change directory, fork, close their standard streams, stop their own watch. Each script runs
as ``python SCRIPT.py`` and as ``layerscope run SCRIPT.py``: the same standard output, the
same exit code, the report where the command line said, and no traceback of ours."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.warm_start import python_command

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# two optimizer steps of a tiny model, as every script below trains
TRAIN = textwrap.dedent("""\
    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    def train(steps):
        for _ in range(steps):
            opt.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
            opt.step()
    """)


def _python(*argv: str, cwd, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(name, None)
    command, env = python_command(argv, env)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _both(tmp_path, body: str, *options: str):
    """(bare python run, layerscope run) of a script made of TRAIN and ``body``."""
    (tmp_path / "script.py").write_text(TRAIN + textwrap.dedent(body))
    bare = _python("script.py", cwd=tmp_path)
    run = _python("-m", "layerscope", "run", *options, "script.py", cwd=tmp_path)
    return bare, run


def _steps(path) -> int:
    return json.loads(path.read_text())["breakdown"]["steps"]


@pytest.mark.integration
def test_outputs_are_where_the_command_started_not_where_the_script_went(tmp_path):
    # the script changes directory into a folder holding files of the same names
    sub = tmp_path / "elsewhere"
    sub.mkdir()
    names = ("r.json", "t.json", "h.html")
    for name in names:
        (sub / name).write_text("keep me")
    bare, run = _both(tmp_path, """\
        import os
        os.chdir("elsewhere")
        train(2)
        print("cwd", os.path.basename(os.getcwd()))
        """, "-o", "r.json", "--trace", "t.json", "--html", "h.html", "--tensorboard", "tb")
    assert run.returncode == bare.returncode == 0, run.stderr
    assert run.stdout == bare.stdout
    for name in names:
        assert (sub / name).read_text() == "keep me", name
    assert _steps(tmp_path / "r.json") == 2
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert (tmp_path / "h.html").read_text().startswith("<!")
    assert os.listdir(tmp_path / "tb") and not (sub / "tb").exists()
    # written where the command started, and named as given (it printed the absolute path)
    wrote = [ln for ln in run.stderr.splitlines() if ln.startswith("wrote ")]
    assert sorted(wrote) == ["wrote h.html", "wrote r.json", "wrote t.json"], run.stderr


@pytest.mark.integration
def test_a_forked_child_writes_no_report(tmp_path):
    # the child outlives the parent and trains one more step: its report would replace the
    # parent's (2 steps) if it wrote one
    bare, run = _both(tmp_path, """\
        import os, sys, time
        train(2)
        print("parent", flush=True)
        if os.fork() == 0:
            time.sleep(0.5)
            train(1)
            sys.exit(0)
        """, "-o", "r.json")
    assert run.returncode == bare.returncode == 0, run.stderr
    assert run.stdout == bare.stdout == "parent\n"
    assert _steps(tmp_path / "r.json") == 2
    assert run.stderr.count("wrote") == 1, run.stderr


# (id, what the script does to its streams at the end, layerscope options)
STREAMS = [
    ("stdout-closed", "print('out'); sys.stdout.close()", ["-o", "r.json"]),
    ("stdout-closed-report-on-stderr", "print('out'); sys.stdout.close()", []),
    ("stderr-none", "print('out'); sys.stderr = None", []),
    ("stderr-closed", "print('out'); sys.stderr.close()", ["-o", "r.json"]),
    ("both-none", "print('out', flush=True); sys.stdout = sys.stderr = None", ["-o", "r.json"]),
    ("stdout-closed-report-on-stdout", "print('out'); sys.stdout.close()",
     ["--format", "json", "-o", "-"]),
    ("exit-code-kept", "print('out'); sys.stdout.close(); sys.exit(3)", ["-o", "r.json"]),
]


@pytest.mark.integration
@pytest.mark.parametrize("body,options", [s[1:] for s in STREAMS], ids=[s[0] for s in STREAMS])
def test_a_script_that_closes_its_streams_still_gets_its_report(tmp_path, body, options):
    bare, run = _both(tmp_path, "import sys\ntrain(2)\n" + body + "\n", *options)
    assert run.returncode == bare.returncode, run.stderr
    assert "Traceback" not in run.stderr and "layerscope: error" not in run.stderr, run.stderr
    if "-" in options:  # the report follows the script's output on the original stdout
        assert run.stdout.startswith(bare.stdout)
        assert json.loads(run.stdout[len(bare.stdout):])["breakdown"]["steps"] == 2
    else:
        assert run.stdout == bare.stdout
    if "r.json" in options:
        assert _steps(tmp_path / "r.json") == 2
        assert run.stderr == bare.stderr + "wrote r.json\n"
    elif not options:
        assert "script.py — training" in run.stderr, run.stderr


# rank 0 trains one step and finishes; rank 1 waits for rank 0's report, says so, then sleeps
# until the launcher is stopped
SLEEPER = textwrap.dedent("""\
    import os, time
    if os.environ["RANK"] == "0":
        train(1)
    else:
        done = os.path.join(os.environ["LAYERSCOPE_RANK_REPORTS"], "rank-0.json")
        while not os.path.exists(done):
            time.sleep(0.05)
        open("rank1-waiting", "w").close()
        time.sleep(120)
    """)


@pytest.mark.slow
@pytest.mark.parametrize("signum,code,word", [(15, 143, "terminated"), (2, 130, "interrupted")],
                         ids=["sigterm", "sigint"])
def test_a_stopped_launch_exits_as_a_signal_and_keeps_the_finished_ranks(tmp_path, signum, code,
                                                                          word):
    import time

    (tmp_path / "script.py").write_text(TRAIN + SLEEPER)
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(name, None)
    proc = subprocess.Popen([sys.executable, "-m", "layerscope", "run", "--nproc-per-node", "2",
                             "-o", "r.json", "script.py"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(1200):
            if (tmp_path / "rank1-waiting").exists() or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert (tmp_path / "rank1-waiting").exists(), proc.communicate()[1]
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == code, err
    assert f"layerscope: {word}: the ranks were stopped" in err
    # (on SIGINT the sleeping rank prints its KeyboardInterrupt, as the script does under
    # torchrun; no traceback or error line of layerscope's)
    assert "unexpected" not in err and "SignalException" not in err, err
    assert "layerscope: error" not in err and "layerscope/" not in err, err
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["breakdown"]["steps"] == 1


def test_watch_steps_ends_its_with_block_and_stops_counting():
    import torch

    import layerscope

    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    done = 0
    with layerscope.watch(steps=2) as w:  # the limit ends the block here, nothing escapes
        for _ in range(5):
            opt.zero_grad()
            model(torch.randn(8, 4)).sum().backward()
            opt.step()
            done += 1
    assert done == 1 and w.steps == 2  # the second step's optimizer hook ended the block
    w.mark_step()
    w.mark_step()
    opt.step()
    assert w.steps == 2 and w.report().breakdown["steps"] == 2


# (id, script body, layerscope options, steps in the report)
WATCHING = [
    ("own-watch-joins-the-run", """\
        import layerscope
        with layerscope.watch(steps=50) as w:
            train(3)
        print("inside", w.steps)
        """, [], 3),
    ("own-watch-after-the-run-limit", """\
        import layerscope
        with layerscope.watch() as w:
            train(5)
        print("after")
        """, ["--steps", "2"], 2),
    ("training-in-a-thread", """\
        import threading
        t = threading.Thread(target=train, args=(5,))
        t.start()
        t.join()
        print("joined")
        """, ["--steps", "2"], 2),
]


@pytest.mark.integration
@pytest.mark.parametrize("body,options,steps", [w[1:] for w in WATCHING],
                         ids=[w[0] for w in WATCHING])
def test_the_scripts_own_watch_and_threads_under_run(tmp_path, body, options, steps):
    bare, run = _both(tmp_path, body, "-o", "r.json", *options)
    assert run.returncode == bare.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and "StepLimit" not in run.stderr, run.stderr
    if not options:
        assert run.stdout == bare.stdout
    else:  # stopped at the limit: the script goes on after its with block or its thread
        assert run.stdout.splitlines()[-1] == bare.stdout.splitlines()[-1]
    assert _steps(tmp_path / "r.json") == steps
    assert run.stderr == bare.stderr + "wrote r.json\n"


# (id, launcher variables left in the environment)
STALE = [
    ("rank-alone", {"RANK": "3"}),
    ("rank-and-world-size-without-local-rank", {"RANK": "3", "WORLD_SIZE": "4"}),
    ("world-size-one", {"RANK": "1", "WORLD_SIZE": "1", "LOCAL_RANK": "1"}),
]


@pytest.mark.integration
@pytest.mark.parametrize("variables", [s[1] for s in STALE], ids=[s[0] for s in STALE])
def test_a_stale_rank_does_not_suppress_the_report(tmp_path, variables, monkeypatch):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "script.py").write_text(TRAIN + "train(2)\n")
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    command, env = python_command(["-m", "layerscope", "run", "-o", "r.json", "script.py"], env)
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert f"RANK={variables['RANK']} in the environment but no launcher's" in run.stderr
    assert _steps(tmp_path / "r.json") == 2


@pytest.mark.integration
def test_a_compiled_model_gets_no_warning_about_our_hooks(tmp_path):
    # torch.compile warns about global module hooks, which are layerscope's, not the script's
    bare, run = _both(tmp_path, """\
        import warnings
        model = torch.compile(model, backend="eager")
        train(2)
        warnings.warn("the script's own")
        """, "-o", "r.json")
    assert run.returncode == bare.returncode == 0, run.stderr
    assert "global hooks" not in run.stderr
    assert run.stderr == bare.stderr + "wrote r.json\n"
    assert "UserWarning: the script's own" in run.stderr
    # step 1 compiled: a one-time cost, left out of the measured steps and named
    assert _steps(tmp_path / "r.json") == 1
    d = json.loads((tmp_path / "r.json").read_text())
    assert [(t["kind"], t["step"]) for t in d["transients"]] == [("compile", 1)]


@pytest.mark.integration
def test_a_dataloader_worker_that_exits_is_the_scripts_error(tmp_path):
    # the worker's exit reaches the main process as a signal at any moment, also after the
    # script has ended: every run ends as the script's own error, with its report
    (tmp_path / "script.py").write_text(TRAIN + textwrap.dedent("""\
        import sys
        from torch.utils.data import DataLoader, Dataset
        class Data(Dataset):
            def __len__(self):
                return 8
            def __getitem__(self, i):
                if i == 5:
                    sys.exit(3)
                return torch.randn(4)
        for x in DataLoader(Data(), batch_size=2, num_workers=1):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
        """))
    for _ in range(4):
        run = _python("-m", "layerscope", "run", "-o", "r.json", "script.py", cwd=tmp_path)
        assert run.returncode == 1, run.stderr
        assert "layerscope: error" not in run.stderr, run.stderr
        # the script's traceback (the worker's death as torch raises it), then the report
        assert "Traceback" in run.stderr and run.stderr.endswith("r.json\n"), run.stderr
        assert _steps(tmp_path / "r.json") >= 1


@pytest.mark.integration
def test_a_child_that_exits_after_the_script_ended_is_not_an_error(tmp_path):
    # torch's DataLoader raises from its SIGCHLD handler when a worker exits; one exiting
    # while layerscope writes the report (--plot takes a while) is no error of the run's
    bare, run = _both(tmp_path, """\
        import os, signal, time
        def worker_failed(signum, frame):
            raise RuntimeError("worker exited")
        signal.signal(signal.SIGCHLD, worker_failed)
        train(2)
        if os.fork() == 0:
            time.sleep(0.3)
            os._exit(3)
        """, "-o", "r.json", "--plot", "p.png", "--html", "h.html")
    assert run.returncode == bare.returncode == 0, run.stderr
    assert "layerscope: error" not in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert _steps(tmp_path / "r.json") == 2 and (tmp_path / "p.png").exists()
