"""core/tree.py: module paths as a tree (hand-written expectations)."""
from __future__ import annotations

import pytest

from layerscope.core import tree

# (id, path, depth, parent, leaf, ancestors nearest first)
PATHS = [
    ("root", "", 0, None, "", []),
    ("top", "a", 1, "", "a", [""]),
    ("nested", "a.b.c", 3, "a.b", "c", ["a.b", "a", ""]),
    ("numeric", "features.0", 2, "features", "0", ["features", ""]),
]


@pytest.mark.parametrize("path,depth,parent,leaf,ancestors", [c[1:] for c in PATHS],
                         ids=[c[0] for c in PATHS])
def test_path_arithmetic(path, depth, parent, leaf, ancestors):
    assert tree.depth(path) == depth
    assert tree.parent(path) == parent
    assert tree.leaf(path) == leaf
    assert tree.ancestors(path) == ancestors
    assert tree.depth(path) == len(tree.ancestors(path))  # invariant


DESCENDANT = [
    ("child", "a.b", "a", True),
    ("grandchild-of-root", "a.b", "", True),
    ("self", "a", "a", False),
    ("prefix-is-not-parent", "ab", "a", False),
    ("parent-is-not-below-child", "a", "a.b", False),
    ("root-below-nothing", "", "", False),
]


@pytest.mark.parametrize("path,of,expected", [c[1:] for c in DESCENDANT],
                         ids=[c[0] for c in DESCENDANT])
def test_is_descendant(path, of, expected):
    assert tree.is_descendant(path, of) is expected


def test_children_map_and_subtree():
    names = ["", "a", "a.x", "a.y", "b", "a.x.k"]
    kids = tree.children_map(names)
    assert dict(kids) == {"": ["a", "b"], "a": ["a.x", "a.y"], "a.x": ["a.x.k"]}
    assert kids["b"] == []
    # depth first, last child first (a stack)
    assert tree.subtree("a", kids) == ["a", "a.y", "a.x", "a.x.k"]
    assert sorted(tree.subtree("", kids)) == sorted(names)
    assert tree.subtree("b", kids) == ["b"]


def test_with_ancestors():
    assert tree.with_ancestors(["a.b", "c"]) == {"a.b", "a", "c", ""}
    assert tree.with_ancestors([]) == set()


@pytest.mark.integration
def test_core_tree_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, layerscope.core.tree; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# kids of a nanoGPT-shaped model: the root calls transformer.wte, the blocks in the
# never-called ModuleDict/ModuleList, and lm_head; each block calls attn and mlp
_GPT = ["", "transformer", "transformer.wte", "transformer.h", "transformer.h.0",
        "transformer.h.0.attn", "transformer.h.1", "lm_head"]
_GPT_CALLED = {"", "transformer.wte", "transformer.h.0", "transformer.h.0.attn",
               "transformer.h.1", "lm_head"}
_GPT_TIMES = {"": 10.0, "transformer.wte": 1.0, "transformer.h.0": 3.0,
              "transformer.h.0.attn": 2.0, "transformer.h.1": 4.0, "lm_head": 0.5}

NEAREST = [
    # through the ModuleDict and the ModuleList to the blocks; not into a called block
    ("root-skips-containers", "", _GPT_CALLED,
     ["transformer.wte", "transformer.h.0", "transformer.h.1", "lm_head"], 10 - 1 - 3 - 4 - 0.5),
    ("block", "transformer.h.0", _GPT_CALLED, ["transformer.h.0.attn"], 3.0 - 2.0),
    ("leaf", "transformer.h.0.attn", _GPT_CALLED, [], 2.0),
    # blocks whose calls were not timed: their timed children are the nearest
    ("untimed-block", "", _GPT_CALLED - {"transformer.h.0"},
     ["transformer.wte", "transformer.h.0.attn", "transformer.h.1", "lm_head"],
     10 - 1 - 2 - 4 - 0.5),
]


@pytest.mark.parametrize("path,called,nearest,own", [c[1:] for c in NEAREST],
                         ids=[c[0] for c in NEAREST])
def test_own_time_subtracts_the_nearest_called_descendants(path, called, nearest, own):
    kids = tree.children_map(_GPT)
    assert tree.nearest_called(path, kids, called) == nearest
    assert tree.own_time(path, _GPT_TIMES, kids, called) == pytest.approx(own)
