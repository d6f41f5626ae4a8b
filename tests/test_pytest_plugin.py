"""The pytest plugin (layerscope.integrations.pytest_plugin), run as a user runs it: pytest in a
subprocess on a test file that uses the ``layerscope_profile`` fixture. The slowdown is made,
not waited for: the slow model sleeps 5 ms in its forward, far beyond any noise."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tomllib

from layerscope.integrations.pytest_plugin import baseline_name

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


def test_without_a_baseline_folder_nothing_is_compared_or_written(perf):
    done = _pytest(perf, slow=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in perf.iterdir()) == ["test_perf.py"]


@pytest.mark.parametrize("args, message", [
    (("--layerscope-fail-if", "step>>5"), "--fail-if 'step>>5': expected"),
    (("--layerscope-update",), "--layerscope-update replaces the stored results"),
])
def test_bad_options_are_usage_errors(perf, args, message):
    done = _pytest(perf, *args)
    assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage error
    assert message in done.stderr


@pytest.mark.parametrize("nodeid, index, name", [
    ("tests/test_a.py::test_b", 0, "tests_test_a.py_test_b.json"),
    ("tests/test_a.py::test_b[x-1]", 1, "tests_test_a.py_test_b_x-1-2.json"),
    ("", 0, "test.json"),
])
def test_baseline_names(nodeid, index, name):
    assert baseline_name(nodeid, index) == name


def test_pytest_finds_the_plugin_through_its_entry_point():
    with open(ROOT / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    assert project["entry-points"]["pytest11"] == {
        "layerscope": "layerscope.integrations.pytest_plugin"}
