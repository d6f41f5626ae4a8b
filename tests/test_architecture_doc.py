"""The diagram of layers on docs/architecture.md names every subpackage of layerscope, one above
another in the order of tests/test_architecture.py's LAYERS (a package added without a place in
the diagram, or drawn where its imports do not put it, fails here)."""
from __future__ import annotations

import os
import re

from tests.test_architecture import PACKAGE, RANK, ROOT, SUBPACKAGE_LAYERS

DOC = os.path.join(ROOT, "docs", "architecture.md")


def _diagram() -> list[str]:
    """The lines of the page's first fenced block (the diagram)."""
    text = open(DOC, encoding="utf-8").read()
    found = re.search(r"^```\n(.*?)^```", text, re.S | re.M)
    assert found, f"{DOC}: no diagram (a fenced block)"
    return found.group(1).splitlines()


def _subpackages() -> list[str]:
    folder = os.path.join(ROOT, PACKAGE)
    return sorted(name for name in os.listdir(folder)
                  if os.path.isfile(os.path.join(folder, name, "__init__.py")))


def _line_of(name: str, lines: list[str]) -> int | None:
    for number, line in enumerate(lines):
        if re.search(rf"(?<![\w/]){name}/", line):
            return number
    return None


def test_the_diagram_names_every_subpackage():
    lines = _diagram()
    missing = [name for name in _subpackages() if _line_of(name, lines) is None]
    assert not missing, f"docs/architecture.md's diagram lacks {missing}"


def test_the_diagram_draws_each_layer_below_the_layers_above_it():
    lines = _diagram()
    drawn = {name: _line_of(name, lines) for name in _subpackages()}
    rank = {name: RANK[SUBPACKAGE_LAYERS.get(name, name)] for name in drawn}
    wrong = [f"{low}/ (rank {rank[low]}) is drawn above {high}/ (rank {rank[high]})"
             for low in drawn for high in drawn
             if rank[low] < rank[high] and drawn[low] is not None and drawn[high] is not None
             and drawn[low] <= drawn[high]]
    assert not wrong, "\n".join(wrong)
