"""training.script_runner: a user's script run as python runs it, inside any context manager,
called as a library function (no command line): its exit code, how it ended, and the
interpreter's state (sys.argv, sys.path[0], __main__) as it was afterwards."""
from __future__ import annotations

import contextlib
import sys

import pytest

from layerscope.core.errors import UserError
from layerscope.training.script_runner import check_startable, execute

# script body -> (exit code, what ``failure`` holds, a phrase of its standard error)
CASES = [
    ("returns", "pass", 0, [], ""),
    ("sys-exit-0", "import sys; sys.exit(0)", 0, [], ""),
    ("sys-exit-3", "import sys; sys.exit(3)", 3, ["exit code 3"], ""),
    ("sys-exit-message", "import sys; sys.exit('bad input')", 1, ["exit code 1"], "bad input"),
    ("raises", "raise ValueError('boom')", 1, ["ValueError: boom"], "ValueError: boom"),
    ("interrupted", "raise KeyboardInterrupt", 130, ["KeyboardInterrupt"], "KeyboardInterrupt"),
]


class Entered(contextlib.AbstractContextManager):
    """A stand-in for a watch: records that the script ran inside it."""

    def __init__(self):
        self.events = []

    def __enter__(self):
        self.events.append("enter")
        return self

    def __exit__(self, *exc):
        self.events.append("exit")
        return False


@pytest.mark.parametrize("name,body,code,failure,stderr", CASES, ids=[c[0] for c in CASES])
def test_a_script_ends_as_python_would_end_it(name, body, code, failure, stderr, tmp_path,
                                              capsys):
    script = tmp_path / "script.py"
    script.write_text("import sys\n"
                      "open(sys.argv[1], 'w').write(' '.join(sys.argv) + '|' + __name__)\n"
                      + body + "\n")
    seen = tmp_path / "seen.txt"
    argv, path0, main = list(sys.argv), sys.path[0], sys.modules["__main__"]
    watch, ended = Entered(), []

    assert execute(str(script), [str(seen)], False, watch, ended) == code

    assert ended == failure
    assert stderr in capsys.readouterr().err
    assert watch.events == ["enter", "exit"]
    assert seen.read_text() == f"{script} {seen}|__main__"
    assert (sys.argv, sys.path[0], sys.modules["__main__"]) == (argv, path0, main)


@pytest.mark.parametrize("target,is_module,message", [
    ("broken.py", False, r"broken.py line 1: .*: not a Python script python can run"),
    ("no_such_module_here", True, r"-m: no module named 'no_such_module_here'"),
], ids=["not-python", "unknown-module"])
def test_a_script_that_cannot_start_is_the_callers_input_error(target, is_module, message,
                                                               tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.py").write_text("def (\n")
    watch = Entered()
    for start in (lambda: check_startable(target, is_module),
                  lambda: execute(target, [], is_module, watch)):
        with pytest.raises(UserError, match=message):
            start()
    assert watch.events == []  # it never started: nothing was measured
