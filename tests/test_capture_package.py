"""The capture engine is a public sub-package: its users import documented
public names only, and its parts stay of ordinary size."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import layerscope
from layerscope.analysis import capture, static
from layerscope.analysis.capture import script

ROOT = Path(layerscope.__file__).parent
PACKAGE = ROOT / "analysis" / "capture"
ENGINE = "layerscope.analysis.capture"


def _imports(path: Path):
    """(module imported from, name) for every ``from X import name`` in ``path``, also inside
    functions (a lazy import is still a dependency)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                yield node.module, alias.name


@pytest.mark.parametrize("module", [capture, script, static], ids=lambda m: m.__name__)
def test_public_names_are_documented(module):
    assert module.__doc__
    objects = {n: getattr(module, n) for n in module.__all__}
    undocumented = [n for n, o in objects.items()
                    if (inspect.isclass(o) or inspect.isfunction(o))
                    and not (o.__doc__ or "").strip()]
    assert undocumented == []


@pytest.mark.integration
def test_code_outside_the_engine_uses_public_names_only():
    # e.g. timing.py once imported static_torch._TAG and _ModuleTracker
    private = [(str(p.relative_to(ROOT)), mod, name)
               for p in ROOT.rglob("*.py") if PACKAGE not in p.parents
               for mod, name in _imports(p)
               if mod.startswith(ENGINE) and name.startswith("_")]
    assert private == []


def _sizes(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node, node.end_lineno - node.lineno + 1


def test_parts_are_of_ordinary_size():
    # the TorchScript scope recovery was one 369-line class
    big = [(str(p.relative_to(PACKAGE)), node.name, n)
           for p in PACKAGE.rglob("*.py") for node, n in _sizes(p)
           if n > (150 if isinstance(node, ast.ClassDef) else 60)]
    assert big == []
