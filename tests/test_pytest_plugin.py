"""The pytest plugin (layerscope.integrations.pytest_plugin), run as a user runs it: pytest in a
subprocess on a test file that uses the ``layerscope_profile`` fixture. The slowdown is made,
not waited for: the slow model sleeps 5 ms in its forward, far beyond any noise."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tomllib

from layerscope.integrations.pytest_plugin import baseline_name, earlier_name

ROOT = Path(__file__).resolve().parents[1]

PERF_TEST = '''
import os
import time

import pytest
import torch.nn as nn


class Slow(nn.Module):
    def forward(self, x):
        if os.environ.get("PERF_SLOW") == "1":
            time.sleep(0.005)
        return x


def model():
    return nn.Sequential(nn.Linear(16, 16), Slow(), nn.ReLU())


@pytest.mark.layerscope_profile(fail_if=["end_to_end>+0%"])
def test_speed(layerscope_profile):
    r = layerscope_profile(model(), "4x16", runs=8, warmup=1, roofline=False)
    assert r.kind == "profile"
'''


def _pytest(folder: Path, *args: str, slow: bool = False) -> subprocess.CompletedProcess:
    env = dict(os.environ, PERF_SLOW="1" if slow else "0", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH"))
                                          if p))
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "-p", "layerscope.integrations.pytest_plugin", "-o", "addopts=",
                           "-q", "test_perf.py", *args], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def perf(tmp_path):
    (tmp_path / "test_perf.py").write_text(textwrap.dedent(PERF_TEST))
    return tmp_path


@pytest.mark.integration
def test_first_run_stores_the_baseline_then_a_slowdown_fails_and_update_replaces_it(perf):
    base = perf / "baseline"
    stored = base / baseline_name("test_perf.py::test_speed", 0)
    first = _pytest(perf, "--layerscope-baseline", str(base), slow=False)
    assert first.returncode == 0, first.stdout + first.stderr
    assert stored.is_file() and '"kind": "profile"' in stored.read_text()
    before = stored.read_text()

    slower = _pytest(perf, "--layerscope-baseline", str(base), slow=True)
    assert slower.returncode == 1, slower.stdout + slower.stderr
    assert "slower than the baseline beyond the noise" in slower.stdout
    assert "end_to_end>+0%: end to end +" in slower.stdout
    assert stored.read_text() == before  # a comparison never rewrites the baseline

    updated = _pytest(perf, "--layerscope-baseline", str(base), "--layerscope-update",
                      slow=True)
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert stored.read_text() != before

    # against the slow baseline the fast model is faster: '>' expressions do not fail
    faster = _pytest(perf, "--layerscope-baseline", str(base), slow=False)
    assert faster.returncode == 0, faster.stdout + faster.stderr


@pytest.mark.integration
def test_without_a_baseline_folder_nothing_is_compared_or_written(perf):
    done = _pytest(perf, slow=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in perf.iterdir()) == ["test_perf.py"]


@pytest.mark.integration
@pytest.mark.parametrize("args, message", [
    (("--layerscope-fail-if", "step>>5"), "--fail-if 'step>>5': expected"),
    (("--layerscope-update",), "--layerscope-update replaces the stored results"),
])
def test_bad_options_are_usage_errors(perf, args, message):
    done = _pytest(perf, *args)
    assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage error
    assert message in done.stderr


# the id's readable part, then the first 12 hex digits of the SHA-256 of the exact id
@pytest.mark.parametrize("nodeid, index, name", [
    ("tests/test_a.py::test_b", 0, "tests_test_a.py_test_b-"
                                   + hashlib.sha256(b"tests/test_a.py::test_b").hexdigest()[:12]
                                   + ".json"),
    ("tests/test_a.py::test_b[x-1]", 1, "tests_test_a.py_test_b_x-1-"
     + hashlib.sha256(b"tests/test_a.py::test_b[x-1]").hexdigest()[:12] + "-2.json"),
    ("", 0, "test-" + hashlib.sha256(b"").hexdigest()[:12] + ".json"),
])
def test_baseline_names(nodeid, index, name):
    assert baseline_name(nodeid, index) == name


# ids that read alike once a file name's unsafe characters are replaced, that differ only in
# case (one file on a case-insensitive file system), or only after the readable part
ALIKE = ["t.py::test[a/b]", "t.py::test[a_b]", "t.py::test[a b]", "t.py::test[a:b]",
         "t.py::test[A_B]", "t.py::test[" + "x" * 300 + "]", "t.py::test[" + "x" * 299 + "y]"]


def test_baseline_names_tell_every_test_apart():
    """Before: test[a/b], test[a_b] and test[a b] shared test_a_b_.json (compared with each
    other; --layerscope-update let the last overwrite the others)."""
    names = [baseline_name(i, k) for i in ALIKE for k in (0, 1)]
    assert len({n.lower() for n in names}) == len(names)
    assert all(len(n.encode()) <= 255 and "/" not in n for n in names)


PARAMS_TEST = '''
import pytest
import torch.nn as nn


@pytest.mark.parametrize("p", ["a/b", "a_b", "a b"])
def test_speed(layerscope_profile, p):
    layerscope_profile(nn.Linear(4, 4), "2x4", runs=3, warmup=0, roofline=False)
'''


@pytest.mark.integration
def test_parametrized_ids_that_read_alike_get_a_baseline_each(tmp_path):
    (tmp_path / "test_perf.py").write_text(PARAMS_TEST)
    done = _pytest(tmp_path, "--layerscope-baseline", "base")
    assert done.returncode == 0, done.stdout + done.stderr
    stored = sorted(p.name for p in (tmp_path / "base").iterdir())
    assert stored == sorted(baseline_name(f"test_perf.py::test_speed[{p}]", 0)
                            for p in ("a/b", "a_b", "a b"))


@pytest.mark.integration
def test_a_baseline_stored_under_the_earlier_name_is_not_silently_replaced(perf):
    """A baseline folder from before the names changed: the test fails, naming both files,
    rather than storing a new baseline and comparing nothing."""
    base = perf / "baseline"
    first = _pytest(perf, "--layerscope-baseline", str(base))
    assert first.returncode == 0, first.stdout + first.stderr
    (stored,) = base.iterdir()
    stored.rename(base / earlier_name("test_perf.py::test_speed", 0))
    again = _pytest(perf, "--layerscope-baseline", str(base))
    assert again.returncode == 1 and "stored under the earlier name" in again.stdout
    assert sorted(p.name for p in base.iterdir()) == ["test_perf.py_test_speed.json"]


# a test file that imports nothing heavy: a usage error must stop the session at its start
MARKED = '''
import pytest


@pytest.mark.layerscope_profile(fail_if=FAIL_IF)
def test_speed(layerscope_profile):
    raise AssertionError("a test ran")
'''

# (id, the marker's fail_if (source text), the options, what the one line says)
USAGE = [
    ("fail-if-int", "123", (), "fail_if must be a list of layerscope diff --fail-if"),
    ("fail-if-bogus", "['bogus']", (), "--fail-if 'bogus': expected"),
    ("fail-if-list-of-int", "[5]", (), "fail_if must be a list"),
    ("fail-if-dict", "{'a': 1}", (), "fail_if must be a list"),
    ("fail-if-spaces", "[' ' * 3000]", (), "(3000 characters): expected"),
    ("baseline-is-a-file", "None", ("--layerscope-baseline", "a-file"),
     "--layerscope-baseline a-file is a file, not a folder"),
    ("option-spaces", "None", ("--layerscope-fail-if", " " * 3000), "(3000 characters)"),
]


@pytest.mark.integration
@pytest.mark.parametrize("fail_if,args,message", [u[1:] for u in USAGE],
                         ids=[u[0] for u in USAGE])
def test_usage_errors_stop_the_session_at_its_start_in_one_line(tmp_path, fail_if, args,
                                                                  message):
    """Before: a bad marker failed (or errored) each test that used it, once it ran, and a
    baseline path that is a file failed every test."""
    (tmp_path / "test_perf.py").write_text(MARKED.replace("FAIL_IF", fail_if))
    (tmp_path / "a-file").write_text("kept")
    done = _pytest(tmp_path, *args)
    assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage error
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert "a test ran" not in done.stdout
    assert (tmp_path / "a-file").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "test_perf.py"]


def test_pytest_finds_the_plugin_through_its_entry_point():
    with open(ROOT / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    assert project["entry-points"]["pytest11"] == {
        "layerscope": "layerscope.integrations.pytest_plugin"}
