"""The release: one version everywhere, a wheel that holds every file the package reads, and
(slow) that wheel installed into a fresh virtual environment runs outside the source tree.

The version is written once, in ``layerscope/core/version.py``; pyproject.toml reads it at build
time (``[tool.setuptools.dynamic]``), and ``layerscope --version``, ``layerscope.__version__``, the
installed metadata and every report's ``environment`` derive from it. The JSON ``schema_version``
is the format's own version and moves separately.
"""
from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import layerscope
from layerscope.core.environment import environment
from layerscope.core.version import __version__
from layerscope.renderers.html import render_html
from tests.helpers import run_cli
from tests.sample_results import analyze_report

ROOT = Path(__file__).resolve().parent.parent
VERSION_FILE = ROOT / "layerscope" / "core" / "version.py"
MNIST_CNN_PARAMS = "1,199,882"  # tests/golden/analyze_mnist_training.txt

# Tracked files under layerscope/ that the wheel leaves out on purpose, each with its reason.
EXCLUDED_FROM_WHEEL: dict[str, str] = {}


# ----------------------------------------------------------------------- one version, everywhere
def test_the_version_is_written_once_as_a_literal():
    """setuptools reads a literal without importing the package (no torch at build time), and no
    other module assigns a version of its own."""
    from packaging.version import Version

    tree = ast.parse(VERSION_FILE.read_text(encoding="utf-8"))
    literals = [node.value.value for node in tree.body if isinstance(node, ast.Assign)
                and [getattr(t, "id", None) for t in node.targets] == ["__version__"]
                and isinstance(node.value, ast.Constant)]
    assert literals == [__version__] and str(Version(__version__)) == __version__
    others = [str(p.relative_to(ROOT)) for p in (ROOT / "layerscope").rglob("*.py")
              if p != VERSION_FILE and re.search(r"^__version__\s*=", p.read_text("utf-8"), re.M)]
    assert others == []


def test_pyproject_reads_the_version_from_version_py():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "layerscope.core.version.__version__"}


@pytest.mark.integration
def test_setuptools_reads_the_version_without_importing_anything():
    pytest.importorskip("setuptools")
    code = ("import sys; from setuptools.config.expand import read_attr; "
            "v = read_attr('layerscope.core.version.__version__', root_dir='.'); "
            "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('layerscope', 'torch'));"
            " print(v, loaded)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert out.split() == [__version__, "[]"]


def test_cli_api_metadata_and_reports_agree():
    code, out, _ = run_cli("--version")
    assert code == 0 and out == f"layerscope {__version__}\n"
    assert layerscope.__version__ == __version__
    try:
        installed = importlib.metadata.version("layerscope")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("layerscope is not installed (run from a source tree): no metadata to compare")
    assert installed == __version__, (
        f"the installed metadata says {installed}: reinstall after a version change (make venv)")
    assert environment()["layerscope"] == __version__
    code, out, _ = run_cli("analyze", "mnist-cnn", "--format", "json")
    report = json.loads(out)
    assert code == 0 and report["environment"]["layerscope"] == __version__
    assert report["schema_version"] != __version__  # the format's version, not the package's
    code, out, _ = run_cli("env")
    assert code == 0 and out.splitlines()[0].split() == ["layerscope", __version__]
    html = render_html(analyze_report())
    assert f'<meta name="generator" content="layerscope {__version__}">' in html


# ------------------------------------------------------------------------------- the wheel
def _tracked(*paths: str) -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    out = subprocess.run(["git", "ls-files", "-z", "--", *paths], cwd=ROOT, capture_output=True,
                         check=True).stdout
    return sorted(p for p in out.decode().split("\0") if p and (ROOT / p).is_file())


def _copy_tracked(dest: Path) -> Path:
    """The tracked files as they are in the working tree: what a clean checkout builds."""
    for rel in _tracked("."):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
    return dest


def _build(src: Path, out: Path, *args: str) -> tuple[Path, str]:
    done = subprocess.run([sys.executable, "-m", "build", *args, "-o", str(out), str(src)],
                          capture_output=True, text=True, timeout=900)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    wheels = sorted(out.glob("*.whl"))
    assert len(wheels) == 1, log[-3000:]
    return wheels[0], log


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory) -> tuple[Path, str]:
    pytest.importorskip("build")
    tmp = tmp_path_factory.mktemp("wheel")
    return _build(_copy_tracked(tmp / "src"), tmp / "dist", "--wheel", "--no-isolation")


@pytest.mark.integration
def test_the_wheel_holds_every_tracked_file_of_the_package(built_wheel):
    wheel, _ = built_wheel
    with zipfile.ZipFile(wheel) as z:
        shipped = {n for n in z.namelist() if not n.split("/")[0].endswith(".dist-info")}
    tracked = set(_tracked("layerscope"))
    assert set(EXCLUDED_FROM_WHEEL) <= tracked, "an exclusion names a file no longer tracked"
    missing = sorted(tracked - shipped - set(EXCLUDED_FROM_WHEEL))
    assert missing == [], ("tracked but not in the wheel (add its pattern to "
                           f"[tool.setuptools.package-data] in pyproject.toml): {missing}")
    assert sorted(shipped & set(EXCLUDED_FROM_WHEEL)) == []
    assert sorted(shipped - tracked) == [], "the wheel ships files git does not track"


@pytest.mark.integration
def test_the_wheels_metadata(built_wheel):
    wheel, log = built_wheel
    name = f"layerscope-{__version__}.dist-info"
    assert wheel.name == f"layerscope-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(f"{name}/METADATA").decode()
        entry_points = z.read(f"{name}/entry_points.txt").decode()
    assert f"\nVersion: {__version__}\n" in meta and "\nLicense-Expression: MIT\n" in meta
    assert "layerscope = layerscope.cli.main:entry" in entry_points
    # nothing pyproject.toml says is deprecated (a TOML-table license was)
    stale = [line for line in log.splitlines()
             if "deprecated" in line.lower() and ("project." in line or "tool." in line)]
    assert stale == []


# ----------------------------------------------------------- slow: a user's install, from scratch
def _run(*cmd: str | Path, cwd: Path, timeout: int = 1800, check: bool = True) -> str:
    """A command with this checkout off the path and no virtual environment active."""
    drop = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0 or not check, f"{cmd}: {(done.stdout + done.stderr)[-3000:]}"
    return done.stdout


@pytest.mark.slow
def test_the_wheel_installs_into_a_fresh_venv_and_runs_outside_the_repo(tmp_path):
    pytest.importorskip("build")
    # as `make dist` builds: an isolated build environment (setuptools only, no torch)
    wheel, _ = _build(_copy_tracked(tmp_path / "src"), tmp_path / "dist")
    here = tmp_path / "elsewhere"  # no layerscope/ folder here: only the installed copy
    here.mkdir()
    venv = tmp_path / "venv"
    py, cli = venv / "bin" / "python", venv / "bin" / "layerscope"
    try:
        _run(sys.executable, "-m", "venv", venv, cwd=here)
        # the Makefile's torch pair (on these machines' disk); elsewhere pip resolves the ranges
        _run(py, "-m", "pip", "install", "-q", "torch==2.14.1", "torchvision==0.29.1", cwd=here,
             check=False)
        _run(py, "-m", "pip", "install", "-q", wheel, cwd=here)

        where = _run(py, "-c", "import layerscope, importlib.metadata as m; "
                               "print(layerscope.__file__, m.version('layerscope'))", cwd=here)
        assert Path(where.split()[0]).is_relative_to(venv) and where.split()[1] == __version__
        assert _run(cli, "--version", cwd=here) == f"layerscope {__version__}\n"
        assert MNIST_CNN_PARAMS in _run(cli, "analyze", "mnist-cnn", cwd=here)
        out = _run(cli, "env", cwd=here)
        assert out.splitlines()[0].split() == ["layerscope", __version__] and "torch" in out
        # the package's data files at work: the schema (render validates), the HTML template
        # and its assets
        _run(cli, "analyze", "mnist-cnn", "-o", "r.json", cwd=here)
        _run(cli, "render", "r.json", "-o", "r.html", cwd=here)
    finally:  # torch makes the venv several GB, and pytest keeps its last temporary folders
        shutil.rmtree(venv, ignore_errors=True)
    html = (here / "r.html").read_text(encoding="utf-8")
    assert f"layerscope {__version__}" in html and "</html>" in html
    report = json.loads((here / "r.json").read_text(encoding="utf-8"))
    assert report["environment"]["layerscope"] == __version__
