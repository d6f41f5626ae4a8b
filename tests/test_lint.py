"""The habits `make test` keeps: ruff (lint rules in pyproject.toml) and mypy (strict on
layerscope/core, layerscope/schema and layerscope/frontends) pass; golden files are checked,
never silently written."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool(module: str) -> list[str]:
    """The tool from this interpreter's environment (the venv), else from PATH."""
    try:
        __import__(module)
    except ImportError:
        path = shutil.which(module)
        if path is None:
            pytest.skip(f"{module} is not installed (pip install -e '.[test]')")
        return [path]
    return [sys.executable, "-m", module]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_ruff_check_passes():
    done = _run([*_tool("ruff"), "check", "layerscope", "tests"])
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_passes():
    done = _run(_tool("mypy"))  # files and flags: [tool.mypy] in pyproject.toml
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("exists,update,passes", [
    (False, False, False),  # a missing golden file fails (it used to be written and pass)
    (False, True, True),  # --update-golden creates it
    (True, False, True),
    (True, True, True),
], ids=["missing", "missing-update", "same", "same-update"])
def test_check_golden_fails_on_a_missing_file_unless_updating(tmp_path, exists, update, passes):
    from tests.helpers import check_golden

    if exists:
        (tmp_path / "g.txt").write_text("text", encoding="utf-8")
    if passes:
        check_golden("g.txt", "text", update, golden=tmp_path)
    else:
        with pytest.raises(AssertionError, match="no golden file"):
            check_golden("g.txt", "text", update, golden=tmp_path)
        assert not (tmp_path / "g.txt").exists()
    assert (tmp_path / "g.txt").exists() == passes


def test_check_golden_fails_on_a_difference(tmp_path):
    from tests.helpers import check_golden

    (tmp_path / "g.txt").write_text("old", encoding="utf-8")
    with pytest.raises(AssertionError, match="differs"):
        check_golden("g.txt", "new", False, golden=tmp_path)
