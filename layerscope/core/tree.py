"""Module paths as a tree: ``""`` is the root (the model itself), ``"a.b.c"`` is a child of
``"a.b"`` (PyTorch's ``named_modules`` names; ONNX scopes joined the same way).

Pure functions of strings, no torch: the one place that knows how a path names its parent.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping

ROOT = ""
SEP = "."


def function_path(module: str, fn: str) -> str:
    """Where the calls of torch function ``fn`` made by ``module``'s own code sit in the tree:
    a child of the module ('layer1.0', 'add' -> 'layer1.0.(add)'; the root's: '(add)'), so
    that ``own_time`` subtracts them from the module's own time like a called child's."""
    return f"{module}{SEP}({fn})" if module != ROOT else f"({fn})"


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


def nearest_called(path: str, kids: dict[str, list[str]], called: Collection[str]) -> list[str]:
    """The descendants of ``path`` in ``called`` that have no called module between them and
    ``path``: the walk goes on through modules that never ran (an ``nn.ModuleList`` or
    ``nn.ModuleDict`` is never called; its blocks are, from the container's own ``forward``)
    and through modules whose calls were not recorded, and stops at each called one."""
    out: list[str] = []
    todo = list(reversed(kids.get(path, ())))
    while todo:
        p = todo.pop()
        if p in called:
            out.append(p)
        else:
            todo.extend(reversed(kids.get(p, ())))
    return out


def own_time(path: str, inclusive: Mapping[str, float], kids: dict[str, list[str]],
             called: Collection[str]) -> float:
    """A module's own time: its inclusive time minus the inclusive times of its nearest called
    descendants (``nearest_called``), so a row for it never overlaps the rows below it. The one
    rule for every timed table (``profile``, ``sweep``, ``run --layers``). At least 0: the
    descendants' intervals lie inside the module's, so less is the clock's rounding (CUDA
    events read to about half a microsecond), never time the module gave back."""
    return max(0.0, inclusive.get(path, 0.0) - sum(inclusive.get(c, 0.0)
                                                   for c in nearest_called(path, kids, called)))
