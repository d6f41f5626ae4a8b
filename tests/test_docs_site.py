"""The manual (docs/ and mkdocs.yml) builds with `mkdocs build --strict`: a broken link, a page
missing from the navigation or an API name mkdocstrings cannot find fails the suite."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.integration
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
    # no page fetches a stylesheet, font or script from another host (it would not load offline)
    for page in site.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        remote = re.findall(r'<(?:link|script)[^>]*(?:href|src)="(?:https?:)?//[^"]*"', html)
        assert not remote, (page.relative_to(site), remote[:3])


def test_the_site_loads_nothing_from_another_host():
    """The manual reads offline: mkdocs-material's default theme loads its fonts from Google;
    ``font: false`` keeps the system's."""
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["theme"]["font"] is False


def test_getting_started_lists_every_command():
    """Getting started's table of what each command does has a row for every subcommand of the
    CLI (a command added without a row fails here)."""
    from layerscope.cli.main import _command_names, build_parser

    text = (REPO / "docs" / "getting-started.md").read_text(encoding="utf-8")
    table = text[text.index("## What each command does"):]
    table = table[:table.index("\n## ")]
    listed = set(re.findall(r"^\| `layerscope (\w[\w-]*)", table, flags=re.MULTILINE))
    commands = set(_command_names(build_parser()))
    assert commands - listed == set(), "commands without a row in getting-started.md"
    assert listed - commands == set(), "rows naming no command in getting-started.md"
