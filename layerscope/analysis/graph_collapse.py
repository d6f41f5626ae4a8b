"""Collapse the repeated parallel parts of a ``ModelGraph`` into one node each, with a count.

A rewrite such as ``tile-linear`` turns one Gemm into thousands of MatMuls that differ only in
which tile of the weight they read: drawn one by one, the picture is a wall of identical boxes.
Two rules, applied in turn until neither changes anything (each pass is a loop over the nodes,
never a recursion, so depth does not matter):

- **siblings**: operation nodes alike (same type, output shape, parameters and MACs: copies of
  one computation on different data or weights) with the same predecessors and the same
  successors become one node (``MatMul ×16``);
- **parallel chains**: chains of operation nodes (one predecessor, one successor each) that leave
  the same node, end in the same node and hold alike nodes in the same order are merged
  position by position (16 chains ``MatMul ×16 -> Sum`` between a Split and a Concat
  become ``MatMul ×256 -> Sum ×16``).

A merged node keeps the members it stands for (``GraphNode.members``, in graph order) and the sum
of their metrics (intensity: summed FLOPs over summed bytes); graph inputs and outputs are never
merged. Sequential repeats (ResNet's identical blocks one after another) are not parallel and are
left as they are.
"""
from __future__ import annotations

import os
from collections import defaultdict

from layerscope.core.graph_records import GraphEdge, GraphNode, ModelGraph


def collapse(g: ModelGraph) -> ModelGraph:
    """``g`` with its repeated parallel nodes merged; ``g`` itself is not changed."""
    position = {n.id: i for i, n in enumerate(g.nodes)}
    alive = {n.id: n for n in g.nodes}
    members: dict[str, list[GraphNode]] = {n.id: [n] for n in g.nodes if n.kind == "op"}
    preds: dict[str, set[str]] = {n.id: set() for n in g.nodes}
    succs: dict[str, set[str]] = {n.id: set() for n in g.nodes}
    for e in g.edges:
        if e.source in alive and e.target in alive and e.source != e.target:
            succs[e.source].add(e.target)
            preds[e.target].add(e.source)
    rep = {n.id: n.id for n in g.nodes}  # original id -> the node that now stands for it
    alike = {n.id: _alike(n) for n in g.nodes}

    def merge(ids: list[str]) -> None:
        keep = ids[0]
        for other in ids[1:]:
            for p in preds.pop(other):
                succs[p].discard(other)
                succs[p].add(keep)
                preds[keep].add(p)
            for s in succs.pop(other):
                preds[s].discard(other)
                preds[s].add(keep)
                succs[keep].add(s)
            moved = members.pop(other)
            members[keep] += moved
            for m in moved:
                rep[m.id] = keep
            del alive[other]

    changed = True
    while changed:
        changed = False
        for ids in _sibling_groups(alive, alike, preds, succs):
            merge(sorted(ids, key=position.__getitem__))
            changed = True
        for chains in _parallel_chains(alive, alike, preds, succs):
            chains.sort(key=lambda c: position[c[0]])
            for column in zip(*chains):
                merge(list(column))
            changed = True
    if len(alive) == len(g.nodes):
        return g
    nodes = [_merged(alive[i], sorted(members[i], key=lambda m: position[m.id]))
             if len(members.get(i, ())) > 1 else alive[i]
             for i in sorted(alive, key=position.__getitem__)]
    edges: dict[tuple[str, str], GraphEdge] = {}
    for e in g.edges:
        key = (rep.get(e.source, e.source), rep.get(e.target, e.target))
        if key[0] in alive and key[1] in alive and key[0] != key[1] and key not in edges:
            edges[key] = GraphEdge(key[0], key[1], e.label)
    groups = sum(1 for n in nodes if n.members)
    ops_before = sum(1 for n in g.nodes if _op(n))
    ops_after = sum(1 for n in nodes if _op(n))
    note = (f"{ops_before} operation nodes drawn as {ops_after}: {groups} group(s) of repeated "
            "parallel nodes (same type, output shape, parameters and MACs, between the same "
            "nodes) are one node each, with their count and summed figures (--no-collapse draws "
            "every node)")
    return ModelGraph(model=g.model, frontend=g.frontend, metric=g.metric, nodes=nodes,
                      edges=list(edges.values()), notes=g.notes + [note], kind=g.kind)


def _op(node: GraphNode) -> bool:
    return node.kind == "op"


def _alike(node: GraphNode) -> tuple:
    """What two nodes must share to be drawn as copies of one another."""
    return (node.type, node.shape, node.metrics.get("params"), node.metrics.get("macs"))


def _sibling_groups(alive, alike, preds, succs) -> list[list[str]]:
    by_key: dict[tuple, list[str]] = defaultdict(list)
    for i, n in alive.items():
        if _op(n):
            by_key[(alike[i], frozenset(preds[i]), frozenset(succs[i]))].append(i)
    return [ids for ids in by_key.values() if len(ids) > 1]


def _parallel_chains(alive, alike, preds, succs) -> list[list[list[str]]]:
    """Groups of two or more chains with the same ends and alike nodes in the same order."""
    def link(i: str) -> bool:
        return _op(alive[i]) and len(preds[i]) == 1 and len(succs[i]) == 1

    by_key: dict[tuple, list[list[str]]] = defaultdict(list)
    for i in alive:
        if not link(i) or link(next(iter(preds[i]))):
            continue  # not a link, or inside a chain that starts further up
        chain = [i]
        while link(nxt := next(iter(succs[chain[-1]]))):
            chain.append(nxt)
        kinds = tuple(alike[c] for c in chain)
        by_key[(kinds, next(iter(preds[i])), next(iter(succs[chain[-1]])))].append(chain)
    return [chains for chains in by_key.values() if len(chains) > 1]


def _merged(first: GraphNode, members: list[GraphNode]) -> GraphNode:
    metrics: dict[str, float] = {}
    for m in members:
        for k, v in m.metrics.items():
            metrics[k] = metrics.get(k, 0.0) + (v or 0.0)
    if "intensity" in metrics:
        moved = metrics.get("bytes_read", 0.0) + metrics.get("bytes_written", 0.0)
        metrics["intensity"] = metrics.get("flops", 0.0) / moved if moved else 0.0
    prefix = os.path.commonprefix([m.name for m in members])
    name = prefix + "…" if prefix else first.name + " …"
    return GraphNode(id=first.id, name=name, type=first.type, kind=first.kind, metrics=metrics,
                     shape=first.shape, count=len(members), members=members)
