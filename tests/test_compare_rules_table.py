"""The comparison rules are declared once (analysis/compare/rules.py RULES); names, labels and
the order they are tried in all come from that one list."""
from __future__ import annotations

import ast
import pathlib

from layerscope.analysis.compare import RULE_LABELS, RULES, UNEXPLAINED

COMPARE = pathlib.Path(__file__).resolve().parent.parent / "layerscope" / "analysis" / "compare"


def test_rule_names_are_unique_and_labelled():
    names = [r.name for r in RULES]
    assert len(names) == len(set(names))
    assert all(r.label and callable(r.explain) for r in RULES)
    assert set(RULE_LABELS) == set(names) | {"moved", UNEXPLAINED}


def test_no_module_imports_another_modules_private_names():
    for path in sorted(COMPARE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("layerscope"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.name} imports {private} from {node.module}"
