"""The shape the code keeps: options are declared as settings fields, not by hand in the
command line (only the format and output helpers, and what no settings class holds: the
script's own words, --version, --debug); no function longer than a screen and a half; no
module too big to know."""
from __future__ import annotations

import ast
import pathlib
import re

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "layerscope"
MOST_HAND_DECLARED = 25  # add_argument calls in layerscope/cli/*.py
MOST_FUNCTION_LINES = 80
MOST_MODULE_LINES = 600


def test_the_command_line_declares_few_options_by_hand():
    calls = {p.name: len(re.findall(r"\.add_argument\(", p.read_text()))
             for p in sorted((PACKAGE / "cli").glob("*.py"))}
    assert sum(calls.values()) <= MOST_HAND_DECLARED, {k: v for k, v in calls.items() if v}


def test_no_function_is_longer_than_80_lines():
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MOST_FUNCTION_LINES:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.name} {lines}")
    assert long == []


def test_no_module_is_longer_than_600_lines():
    big = [f"{p.relative_to(PACKAGE)} {n}" for p in PACKAGE.rglob("*.py")
           if (n := len(p.read_text().splitlines())) > MOST_MODULE_LINES]
    assert big == []
