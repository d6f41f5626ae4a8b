"""The habits `make test` keeps: ruff (lint rules in pyproject.toml) and mypy (strict on
layerscope/core, layerscope/schema and layerscope/frontends) pass; golden files are checked,
never silently written."""
from __future__ import annotations

import os
import re
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


@pytest.mark.integration
def test_ruff_check_passes():
    done = _run([*_tool("ruff"), "check", "layerscope", "tests"])
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.integration
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


# What code and tests may cite: files of this repository (docs/design.md holds the conventions),
# never a document outside it or a tracker's issue number. The patterns are built from pieces so
# this file does not match itself.
OUTSIDE_CITATIONS = [
    (re.compile(r"\b(?:DESIGN|REFERENCES)" + r"\.md\b"), "a design document outside the "
     "repository: cite docs/design.md (or state the rule)"),
    (re.compile(r"\bissues?" + r" #?\d+", re.IGNORECASE), "a tracker's issue number: state the "
     "rule or the fact instead"),
]
DOCS_SECTION = re.compile(r"docs/([a-z0-9-]+\.md), \"([^\"]+)\"")


def _sources() -> list[Path]:
    return sorted(p for top in ("layerscope", "tests") for p in (ROOT / top).rglob("*")
                  if p.is_file() and p.suffix in (".py", ".md", ".txt", ".toml", ".json", ".html")
                  and "__pycache__" not in p.parts)


def test_code_and_tests_cite_nothing_a_maintainer_cannot_open():
    found = []
    for path in _sources():
        text = path.read_text(encoding="utf-8", errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{n}: {why}: {line.strip()}"
                      for pattern, why in OUTSIDE_CITATIONS if pattern.search(line)]
    assert not found, "\n".join(found)


def _headings(page: Path) -> list[str]:
    return [line.lstrip("#").strip() for line in page.read_text(encoding="utf-8").splitlines()
            if line.startswith("#")]


def test_cited_docs_sections_exist():
    """A citation 'docs/PAGE.md, "Section"' names a page of the site and one of its headings."""
    missing = []
    for path in _sources():
        for page, section in DOCS_SECTION.findall(path.read_text(encoding="utf-8",
                                                                 errors="replace")):
            doc = ROOT / "docs" / page
            if not doc.is_file() or not any(h.startswith(section) for h in _headings(doc)):
                missing.append(f"{path.relative_to(ROOT)}: docs/{page}, \"{section}\"")
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("line,cites", [
    ("Method (" + "REFERENCES" + '.md "Measuring time"):', True),
    ("(see " + "DESIGN" + ".md section 1)", True),
    ("# " + "issue" + " 10: 2 threads", True),
    ("(" + "Issue" + "s 11, 10)", True),
    ('Method (docs/design.md, "Timing and noise"):', False),
    ("an issue with 2 threads", False),
], ids=["references", "design", "issue", "issues", "docs-design", "prose"])
def test_outside_citation_patterns(line, cites):
    assert any(p.search(line) for p, _ in OUTSIDE_CITATIONS) == cites
