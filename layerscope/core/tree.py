"""Module paths as a tree: ``""`` is the root (the model itself), ``"a.b.c"`` is a child of
``"a.b"`` (PyTorch's ``named_modules`` names; ONNX scopes joined the same way).

Pure functions of strings, no torch: the one place that knows how a path names its parent.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable

ROOT = ""
SEP = "."


def depth(path: str) -> int:
    """'' -> 0, 'a' -> 1, 'a.b.c' -> 3."""
    return 0 if path == ROOT else path.count(SEP) + 1


def parent(path: str) -> str | None:
    """'a.b.c' -> 'a.b', 'a' -> '', '' -> None (the root has none)."""
    if path == ROOT:
        return None
    return path.rpartition(SEP)[0]


def leaf(path: str) -> str:
    """The last segment, the module's attribute name in its parent: 'a.b.c' -> 'c'."""
    return path.rpartition(SEP)[2]


def ancestors(path: str) -> list[str]:
    """Nearest first, ending at the root: 'a.b.c' -> ['a.b', 'a', '']; '' -> []."""
    out = []
    p = parent(path)
    while p is not None:
        out.append(p)
        p = parent(p)
    return out


def with_ancestors(paths: Collection[str]) -> set[str]:
    """The paths and every ancestor of each."""
    out = set(paths)
    for p in paths:
        out.update(ancestors(p))
    return out


def is_descendant(path: str, of: str) -> bool:
    """Strictly below ``of``: 'a.b' is below 'a' and ''; 'ab' is not below 'a'."""
    if path == of:
        return False
    return of == ROOT or path.startswith(of + SEP)


def children_map(paths: Iterable[str]) -> dict[str, list[str]]:
    """Parent -> its direct children among ``paths``, in the order given (the root is no one's
    child). A defaultdict: a path without children maps to []."""
    kids: dict[str, list[str]] = defaultdict(list)
    for p in paths:
        up = parent(p)
        if up is not None:  # only the root has no parent
            kids[up].append(p)
    return kids


def subtree(path: str, kids: dict[str, list[str]]) -> list[str]:
    """``path`` and all its descendants in ``kids`` (from ``children_map``), depth first, the
    last child first."""
    out: list[str] = []
    todo = [path]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, ()))
    return out
