"""The manual (docs/ and mkdocs.yml) builds with `mkdocs build --strict`: a broken link, a page
missing from the navigation or an API name mkdocstrings cannot find fails the suite."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_docs_build_strict(tmp_path):
    missing = [m for m in ("mkdocs", "material", "mkdocstrings")
               if importlib.util.find_spec(m) is None]
    if missing:
        reason = f"{', '.join(missing)} not installed: pip install -e .[docs]"
        print(reason)
        pytest.skip(reason)
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f",
                          str(REPO / "mkdocs.yml"), "-d", str(site)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (site / "index.html").is_file()
    # every page of the navigation is built, and the API page holds the documented functions
    for page in ("getting-started", "static-cost", "troubleshooting", "api", "architecture"):
        assert (site / page / "index.html").is_file(), page
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert 'id="layerscope.analysis.analyze.analyze"' in api
