"""The tier check of tests/conftest.py, run on small test files in a child pytest (pytester):
an unmarked test that starts a Python, a shell or a worker process fails, naming it; a marked
one passes; a system probe is not counted; ``LAYERSCOPE_TEST_RECORD`` records instead of
failing. And the warm start of the docs' examples (tests/warm_start.py) gives what a cold start
gives: the output, the exit status, the folder and the environment."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doc_examples import example_env
from tests.warm_start import Server

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
    env = example_env(home)
    server = Server(tmp_path_factory.mktemp("warm"), env)
    yield env, server.env(env)
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
    cold_env, warm_env = warm
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
