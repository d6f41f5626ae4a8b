"""The tier check of tests/conftest.py, run on small test files in a child pytest (pytester):
an unmarked test that starts a Python, a shell or a worker process fails, naming it; a marked
one passes; a system probe is not counted; ``LAYERSCOPE_TEST_RECORD`` records instead of
failing. And the warm start of the docs' examples (tests/warm_start.py) gives what a cold start
gives: the output, the exit status, the folder and the environment, for a ``layerscope``
command and for ``python SCRIPT`` / ``python -m MODULE``, and a signal sent to the client is the
command's."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.doc_examples import example_env
from tests.warm_start import ENV_CPU_LOG, Server

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.integration  # every test here starts a child pytest or a server
CONFTEST = Path(__file__).with_name("conftest.py")
HEAD = "import multiprocessing, os, subprocess, sys\nimport pytest\n"

# test body, marked, the child's outcome, a line its output must hold
CASES = [
    ("subprocess.run([sys.executable, '-c', 'pass'])", False, "failed",
     "starts a process in its call"),
    ("subprocess.run([sys.executable, '-c', 'pass'])", True, "passed", None),
    ("subprocess.run(['bash', '-c', 'true'])", False, "failed", "(bash -c true)"),
    ("subprocess.run(['uname', '-p'], capture_output=True)", False, "passed", None),
    ("p = multiprocessing.get_context('fork').Process(target=int); p.start(); p.join()", False,
     "failed", "multiprocessing"),
    ("pid = os.fork()\n    if pid == 0: os._exit(0)\n    os.waitpid(pid, 0)", False, "failed",
     "os.fork()"),
    ("assert 1 + 1 == 2", False, "passed", None),
]


@pytest.mark.parametrize("body,marked,outcome,says", CASES,
                         ids=["python", "python-marked", "shell", "probe", "multiprocessing",
                              "fork", "in-process"])
def test_an_unmarked_test_that_starts_a_process_fails(pytester, body, marked, outcome, says):
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8"))
    mark = "@pytest.mark.integration\n" if marked else ""
    pytester.makepyfile(test_child=f"{HEAD}\n{mark}def test_it():\n    {body}\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    result.assert_outcomes(**{outcome: 1})
    if says:
        result.stdout.fnmatch_lines([f"*{says}*"])


def test_a_fixtures_process_fails_the_setup_and_the_record_counts_instead(pytester):
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8"))
    pytester.makepyfile(test_child=HEAD + '''
@pytest.fixture(scope="module")
def started():
    subprocess.run([sys.executable, "-c", "pass"])

def test_it(started):
    pass
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*starts a process in its setup*"])
    record = pytester.path / "record.jsonl"
    os.environ["LAYERSCOPE_TEST_RECORD"] = str(record)
    try:
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    finally:
        del os.environ["LAYERSCOPE_TEST_RECORD"]
    result.assert_outcomes(passed=1)
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(r["phase"], bool(r["starts"])) for r in lines] == [("setup", True), ("call", False)]
    assert all(r["wall"] >= 0 and r["cpu"] >= 0 and r["children_cpu"] >= 0 for r in lines)


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    env = {**example_env(home), ENV_CPU_LOG: str(home / "warm-cpu.log")}
    server = Server(tmp_path_factory.mktemp("warm"), env)
    yield env, server.env(env), server.python
    server.close()


# a shell command, as a page's example is run
COMMANDS = [
    "layerscope --version",
    "layerscope analyze no-such-model",  # exit 2, one line on stderr
    "layerscope --version | tr a-z A-Z",  # a pipe
    "layerscope analyze mnist-cnn --format json -o r.json && test -s r.json && echo written",
    "cd sub && layerscope analyze mnist-cnn --format csv -o here.csv && ls",  # the folder
    "NO_COLOR=1 layerscope env --format json | python -c 'import json,sys; "
    "print(json.load(sys.stdin)[\"layerscope\"] != \"\")'",  # the environment
]


@pytest.mark.parametrize("command", COMMANDS)
def test_the_warm_start_gives_what_a_cold_start_gives(warm, command, tmp_path):
    cold_env, warm_env, _ = warm
    seen = []
    for env in (cold_env, warm_env):
        folder = tmp_path / str(len(seen))
        (folder / "sub").mkdir(parents=True)
        p = subprocess.run(["bash", "-c", "set -o pipefail\n" + command], cwd=folder, env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
        seen.append((p.returncode, p.stdout, p.stderr))
    assert seen[0] == seen[1]


def test_the_client_runs_cold_without_a_server(tmp_path):
    from tests.warm_start import ENV_SOCKET, write_client

    client = write_client(tmp_path)
    env = {**os.environ, ENV_SOCKET: str(tmp_path / "nobody.sock")}
    p = subprocess.run([str(client), "--version"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0 and p.stdout.startswith("layerscope ")
    assert sys.executable in client.read_text().splitlines()[0]


HELPER = "import sys\nprint('helper', __name__, sys.argv[1:])\n"
# (id, the script, the shell command that runs it with {python}); each prints what the
# interpreter set up, or ends in a way whose status and output a cold start defines
SCRIPTS = [
    ("argv-path-main", "import os, sys, helper\nprint(sys.argv, sys.path[0] == os.getcwd(), "
     "__name__, __file__ == os.path.abspath('s.py'), __spec__, sys.modules['__main__'].__file__ "
     "== __file__, sys.flags.optimize)\n", "{python} s.py a 'b c'"),
    ("module", "", "{python} -m helper x y"),
    ("exit-message", "import sys\nsys.exit('bye')\n", "{python} s.py"),
    ("exit-code", "import sys\nprint('out')\nsys.exit(3)\n", "{python} s.py"),
    ("traceback", "def f():\n    raise ValueError('x')\nf()\n", "{python} s.py"),
    ("keyboard-interrupt", "raise KeyboardInterrupt\n", "{python} s.py"),
    ("thread-and-atexit", "import atexit, threading, time\natexit.register(print, 'atexit')\n"
     "threading.Thread(target=lambda: (time.sleep(0.3), print('thread'))).start()\n"
     "print('main')\n", "{python} s.py"),
    ("broken-pipe", "for i in range(200000):\n    print(i)\n", "{python} s.py | head -n 2"),
    ("stdout-closed", "import sys\nprint('x')\nsys.stdout.close()\n", "{python} s.py"),
    ("stdin-and-stderr", "import sys\nprint(sys.stdin.read().upper(), file=sys.stderr)\n",
     "echo hello | {python} s.py"),
    ("startup-variable-differs", "import os, torch\nprint(os.environ['OMP_NUM_THREADS'], "
     "torch.get_num_threads())\n", "OMP_NUM_THREADS=1 {python} s.py"),
    ("os-exit-loses-what-is-buffered", "import os\nprint('kept', flush=True)\nprint('lost?')\n"
     "os._exit(4)\n", "{python} s.py"),
    ("streams", "import sys\nfor s in (sys.stdin, sys.stdout, sys.stderr):\n    print(repr(s), "
     "type(s.buffer).__name__, s.line_buffering, s.write_through, s.errors, s.newlines, "
     "s.__class__ is type(sys.__stdout__), file=sys.stderr)\n", "{python} s.py < /dev/null"),
    ("other-form-runs-cold", "", "{python} -c 'import sys; print(sys.argv)' 1 2"),
]


@pytest.mark.parametrize("script,command", [s[1:] for s in SCRIPTS], ids=[s[0] for s in SCRIPTS])
def test_the_warm_python_gives_what_a_cold_python_gives(warm, script, command, tmp_path):
    cold_env, warm_env, client = warm
    seen = []
    for env, python in ((cold_env, sys.executable), (warm_env, client)):
        folder = tmp_path / str(len(seen))
        folder.mkdir()
        (folder / "s.py").write_text(script)
        (folder / "helper.py").write_text(HELPER)
        p = subprocess.run(["bash", "-c", "set -o pipefail\n" + command.format(python=python)],
                           cwd=folder, env=env, capture_output=True, text=True, timeout=300)
        seen.append((p.returncode, p.stdout, p.stderr.replace(str(folder), "FOLDER")))
    assert seen[0] == seen[1]
    assert seen[0][1] or seen[0][2]  # it ran and said something


# the script says it is ready, then waits; the signal is sent to the client's pid alone
WAITER = ("import pathlib, signal, sys, time\n"
          "signal.signal(signal.SIGUSR1, lambda n, f: (print('usr1', flush=True), sys.exit(5)))\n"
          "pathlib.Path('ready').touch()\ntime.sleep(60)\n")


def _heeded(signum):
    """For Popen's preexec_fn: the child starts with ``signum`` at its default disposition
    when this process ignores it (a shell's background job ignores SIGINT, and an ignored
    signal stays ignored across exec), so that a signal test means the same everywhere."""
    if signal.getsignal(signum) != signal.SIG_IGN:
        return None
    return lambda: signal.signal(signum, signal.SIG_DFL)


def test_a_signal_the_client_ignores_stays_ignored_as_in_a_cold_start(warm, tmp_path):
    """A command started with SIGINT ignored (a background job of a shell) keeps it ignored,
    cold or warm: the client tells the server which signals it was started ignoring."""
    cold_env, warm_env, client = warm
    (tmp_path / "s.py").write_text(
        "import signal\nprint(signal.getsignal(signal.SIGINT) == signal.SIG_IGN)\n")
    seen = [subprocess.run([python, "s.py"], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)
                           ).stdout
            for env, python in ((cold_env, sys.executable), (warm_env, client))]
    assert seen == ["True\n"] * 2


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGUSR1],
                         ids=["sigint", "sigterm", "sigusr1"])
def test_a_signal_to_the_client_is_the_commands(warm, signum, tmp_path):
    cold_env, warm_env, client = warm
    seen = []
    for env, python in ((cold_env, sys.executable), (warm_env, client)):
        folder = tmp_path / str(len(seen))
        folder.mkdir()
        (folder / "s.py").write_text(WAITER)
        proc = subprocess.Popen([python, "s.py"], cwd=folder, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                preexec_fn=_heeded(signum))
        try:
            deadline = time.monotonic() + 300
            while not (folder / "ready").exists() and proc.poll() is None \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
            proc.send_signal(signum)
            out, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
        seen.append((proc.returncode, out, err.replace(str(folder), "FOLDER")))
    assert seen[0] == seen[1]
    assert seen[0][0] == {signal.SIGINT: -signal.SIGINT, signal.SIGTERM: -signal.SIGTERM,
                          signal.SIGUSR1: 5}[signum]


def test_the_warm_python_is_warm(warm, tmp_path):
    """The comparisons above are of a warm start: the client's script finds torch imported (a
    client that fell back to a cold start would pass them all)."""
    cold_env, warm_env, client = warm
    (tmp_path / "s.py").write_text("import sys\nprint('torch' in sys.modules)\n")
    log = Path(warm_env[ENV_CPU_LOG])
    before = log.read_text().split() if log.exists() else []
    seen = [subprocess.run([python, "s.py"], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300).stdout
            for env, python in ((cold_env, sys.executable), (warm_env, client))]
    assert seen == ["False\n", "True\n"]
    # the server notes the command's CPU seconds, which the per-test record adds to the test's
    (cpu,) = log.read_text().split()[len(before):]
    assert float(cpu) >= 0  # (a command this small may take less than a clock tick)


# what a script finds of the interpreter when it starts under `layerscope run`
STATE = """\
import json, os, signal, sys, threading
names = ("SIGINT", "SIGTERM", "SIGHUP", "SIGPIPE", "SIGCHLD", "SIGXFSZ", "SIGUSR1", "SIGQUIT")
json.dump({"modules": sorted(sys.modules), "threads": threading.active_count(),
           "signals": [str(signal.getsignal(getattr(signal, n))) for n in names],
           "blocked": sorted(map(int, signal.pthread_sigmask(signal.SIG_BLOCK, []))),
           "path": sys.path, "argv": sys.argv, "flags": str(sys.flags),
           "streams": [(repr(s), type(s.buffer).__name__, s.line_buffering, s.write_through,
                        s.errors) for s in (sys.stdin, sys.stdout, sys.stderr)],
           "main": sorted(vars(sys.modules["__main__"])), "cwd": os.getcwd(),
           "parent": os.getppid()},
          open("state.json", "w"))
"""


def test_a_script_under_layerscope_run_finds_what_a_cold_start_gives(tmp_path, monkeypatch):
    """The tests of ``layerscope run`` run the command through the shared server
    (``python_command``): the script then finds the interpreter as a cold ``python -m layerscope
    run`` leaves it, the modules imported included (the server imports none the command would
    not have imported before the script starts)."""
    from tests.warm_start import COLD_RUN, python_command

    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent.parent), OMP_NUM_THREADS="1")
    seen = []
    for cold in ("1", "0"):
        monkeypatch.setenv(COLD_RUN, cold)
        folder = tmp_path / cold
        folder.mkdir()
        (folder / "s.py").write_text(STATE)
        command, run_env = python_command(["-m", "layerscope", "run", "s.py"], env)
        p = subprocess.run(command, cwd=folder, env=run_env, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        state = json.loads((folder / "state.json").read_text().replace(str(folder), "FOLDER"))
        seen.append(state)
    # the first run is the test's child, the second the server's (a warm start)
    assert [state.pop("parent") == os.getpid() for state in seen] == [True, False]
    assert seen[0] == seen[1]
    assert "torch" in seen[0]["modules"]
