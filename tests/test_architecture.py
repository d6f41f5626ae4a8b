"""The package's layers point one way (docs/architecture.md).

Every module's imports are read from its source (imports inside functions too: a lazy import is
still a dependency), each module is mapped to its layer, and the test fails on any import cycle
and on any import that reaches a higher layer, or a sibling layer of the same rank.
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "layerscope"

# Bottom to top; layers in one tuple share a rank and may not import each other.
LAYERS: list[tuple[str, ...]] = [
    ("core",),  # records, units, metric names, errors, io, values, stats, noise, version, display
    ("frontends",),  # model references and loading, the zoo, input specs and their parsing
    ("ops",),  # cost rules: one pure function per op (aten, onnx; onnx never imports torch)
    ("analysis",),  # static, capture, timing, memory, sweep, roofline, compare, ONNX export
    ("training", "rewrite"),  # the training loop and ablation | ONNX rewrite passes
    ("advice",),  # rules over a saved result's facts; verified with training's ablation
    ("views",),  # per result kind: which sections it shows
    ("renderers",),  # draw sections as text, CSV, JSON, HTML, PNG
    # layerscope/__init__.py wires the layers together | the command line | the trainers'
    # callbacks (Lightning, Hugging Face Trainer: optional packages, imported by nothing else)
    ("api", "cli", "integrations"),
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}

# Modules outside a layer's subpackage: the module -> layer table for the package root.
ROOT_MODULES = {
    PACKAGE: "api",
    f"{PACKAGE}.__main__": "cli",
    f"{PACKAGE}.errors": "core",  # the public alias of core.errors (never imported inside)
}
# Subpackages that belong to another layer: schema/ (the records' JSON Schemas and their
# generator, which reads core's records) counts as core (docs/architecture.md).
SUBPACKAGE_LAYERS = {"schema": "core"}
PUBLIC_ALIASES = {f"{PACKAGE}.errors": f"{PACKAGE}.core.errors"}

# No import cycle is tolerated; a cycle that must stay for a while is listed here, and the test
# fails once it is gone, so that this list only shrinks.
KNOWN_CYCLES: set[frozenset[str]] = set()


def _modules() -> dict[str, str]:
    found = {}
    for folder, _, files in os.walk(os.path.join(ROOT, PACKAGE)):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                found[name.removesuffix(".__init__")] = os.path.relpath(path, ROOT)
    return found


MODULES = _modules()


def layer_of(module: str) -> str:
    if module in ROOT_MODULES:
        return ROOT_MODULES[module]
    layer = module.split(".")[1]
    layer = SUBPACKAGE_LAYERS.get(layer, layer)
    assert layer in RANK, (f"{module}: no layer for '{layer}': add it to LAYERS, ROOT_MODULES "
                           "or SUBPACKAGE_LAYERS")
    return layer


def _from(module: str, node: ast.ImportFrom) -> str:
    """The module ``from X import ...`` in ``module`` names (a relative import resolved)."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    parent = parts if MODULES[module].endswith("__init__.py") else parts[:-1]
    parent = parent[: len(parent) - node.level + 1]
    return ".".join(parent + ([node.module] if node.module else []))


def _imported(module: str, node: ast.AST) -> list[str]:
    """The package's modules an import statement loads (relative imports resolved)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = _from(module, node)
        # `from pkg import sub` loads pkg and pkg.sub; `from pkg import name` loads pkg
        names = [base] + [f"{base}.{a.name}" for a in node.names]
        if base == PACKAGE:  # the root is always loaded: only a name from it is an edge to it
            names = names[1:] + ([PACKAGE] if any(n not in MODULES for n in names[1:]) else [])
    else:
        return []
    return [n for n in names if n in MODULES]


def _edges(module: str, with_lines: bool = False):
    tree = ast.parse(open(os.path.join(ROOT, MODULES[module]), encoding="utf-8").read())
    for node in ast.walk(tree):
        for target in _imported(module, node):
            # a module importing a package it is inside of is not an edge (it is loaded already);
            # the root counts only when a name is taken from it (see _imported)
            inside = module.startswith(target + ".") and target != PACKAGE
            if target != module and not inside:
                yield (target, node.lineno) if with_lines else target


GRAPH = {m: set(_edges(m)) for m in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.add(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_no_import_cycles():
    cycles = set(_cycles(GRAPH))
    new = [sorted(c) for c in cycles - KNOWN_CYCLES]
    assert not new, f"import cycles: {new}"
    gone = [sorted(c) for c in KNOWN_CYCLES - cycles]
    assert not gone, f"these cycles are gone: remove them from KNOWN_CYCLES: {gone}"


@pytest.mark.integration
def test_imports_point_down():
    wrong = []
    for module in sorted(MODULES):
        for target, line in _edges(module, with_lines=True):
            a, b = layer_of(module), layer_of(target)
            if a != b and RANK[b] >= RANK[a]:
                wrong.append(f"{MODULES[module]}:{line}: {a} imports {b} ({target})")
    assert not wrong, "imports that do not point down a layer:\n" + "\n".join(sorted(set(wrong)))


_MODULE_STRING = re.compile(rf"{PACKAGE}(\.\w+)*\.?")


def _upward_strings() -> dict[str, str]:
    """Strings in core's modules (f-string pieces too) that name a module of a higher layer
    (an import by name, ``importlib.import_module("layerscope.x.y")``, is still a dependency,
    only one the import test cannot see): string -> where."""
    found = {}
    for module in sorted(MODULES):
        if module not in ROOT_MODULES and layer_of(module) == "core":
            tree = ast.parse(open(os.path.join(ROOT, MODULES[module]), encoding="utf-8").read())
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                        and _MODULE_STRING.fullmatch(node.value):
                    parts = node.value.rstrip(".").split(".")
                    layer = SUBPACKAGE_LAYERS.get(parts[1], parts[1]) if len(parts) > 1 else ""
                    if layer in RANK and RANK[layer] > RANK["core"]:
                        found[node.value] = f"{MODULES[module]}:{node.lineno}"
    return found


def test_core_names_no_module_above_it():
    """core reaches nothing above it, by import or by a module's name in a string: the kinds
    table finds result records among core's own modules."""
    found = _upward_strings()
    wrong = sorted(f"{where}: {name!r}" for name, where in found.items())
    assert not wrong, "core names modules above it:\n" + "\n".join(wrong)


@pytest.mark.integration
def test_public_aliases_are_not_imported_inside():
    wrong = [f"{MODULES[m]}:{line}: import {PUBLIC_ALIASES[t]} instead of {t}"
             for m in MODULES for t, line in _edges(m, with_lines=True) if t in PUBLIC_ALIASES]
    assert not wrong, "\n".join(wrong)


def _private_imports() -> list[str]:
    """``from layerscope.x import _name`` in a module other than ``layerscope.x`` (relative
    imports resolved): where -> the name. A private module (``_sub``) may be imported."""
    found = []
    for module in sorted(MODULES):
        tree = ast.parse(open(os.path.join(ROOT, MODULES[module]), encoding="utf-8").read())
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = _from(module, node)
            if base != module and (base == PACKAGE or base.startswith(PACKAGE + ".")):
                found += [f"{MODULES[module]}:{node.lineno}: {base}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")
                          and f"{base}.{a.name}" not in MODULES]
    return found


@pytest.mark.integration
def test_no_private_names_across_modules():
    """A module takes only public names from the package's other modules: a name with a
    leading underscore is its own module's; what several modules share is public, in the
    module where its logic belongs."""
    wrong = _private_imports()
    assert not wrong, "private names imported from another module:\n" + "\n".join(wrong)


def test_views_draw_nothing():
    """A view declares sections (row tables with their terminal hints, lines, key figures);
    renderers/terminal.py draws them. A rich table built in a view was a second copy of the
    HTML's table, and the two drifted apart."""
    wrong = []
    for module, path in sorted(MODULES.items()):
        if layer_of(module) != "views":
            continue
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            wrong += [f"{path}:{node.lineno}: imports {n}" for n in names
                      if n == "rich" or n.startswith("rich.")]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("table", ["RICH", "HTML", "TEXT"])
def test_display_hooks_name_existing_renderers(table):
    """Records draw through functions named by string (imported on first use): they exist."""
    import importlib

    from layerscope.renderers import display

    for name, draw in getattr(display, table).items():
        module, function = draw.target
        assert callable(getattr(importlib.import_module(module), function, None)), (name, module)


def test_records_draw_themselves():
    from rich.console import Console

    import layerscope

    report = layerscope.analyze("mnist-cnn")
    assert "conv1" in report._repr_html_()
    console = Console(record=True, width=120)
    console.print(report)
    assert "conv1" in console.export_text()


# ---------------------------------------------------------------- ONNX without torch
# The ONNX path (analyze / profile / graph / rewrite of a .onnx file) must work where torch is
# not installed: its modules import no torch at module level, and loading them, the package and
# the CLI does not load torch.
ONNX_MODULES = ["layerscope.ops.onnx", "layerscope.ops.rules", "layerscope.ops.registry",
                "layerscope.frontends.onnx_model", "layerscope.frontends.detect",
                "layerscope.analysis.static_onnx", "layerscope.analysis.ort_profile",
                "layerscope.analysis.graph", "layerscope.analysis.analyze",
                "layerscope.core.environment"] + sorted(m for m in MODULES
                                                      if m.startswith("layerscope.rewrite"))


def _is_type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``: False when the module runs."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_level_imports(module: str) -> set[str]:
    """Top-level names imported by statements that run on import (not inside a def)."""
    tree = ast.parse(open(os.path.join(ROOT, MODULES[module]), encoding="utf-8").read())
    names: set[str] = set()

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(node, ast.If) and _is_type_checking(node.test):  # never runs
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names.add(node.module.split(".")[0])
            for field in ("body", "orelse", "finalbody", "handlers"):
                visit(getattr(node, field, []) or [])

    visit(tree.body)
    return names


@pytest.mark.parametrize("module", [m for m in ONNX_MODULES if m in MODULES])
def test_onnx_modules_import_no_torch_at_module_level(module):
    assert "torch" not in _module_level_imports(module)


@pytest.mark.integration
def test_onnx_path_loads_no_torch():
    modules = [m for m in ONNX_MODULES if m in MODULES] + ["layerscope", "layerscope.cli.main"]
    code = ("import sys\n" + "".join(f"import {m}\n" for m in modules)
            + "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"
