"""fold_identity: remove ``Identity`` nodes of the main graph, rewiring what read their output.

For ``Y = Identity(X)``:
- Y is not a graph output: every node reading Y reads X instead.
- Y is a graph output (its name is the model's interface and must stay): X is renamed Y where it
  is made and wherever it is read, when X is made by a node of this graph and is not itself a
  graph output; otherwise the Identity stays (listed in ``skipped``), e.g. an input passed
  straight through to an output.
An Identity whose output is read inside a subgraph (If/Loop/Scan bodies) is left alone, and so
are Identity nodes inside subgraphs: the pass edits the main graph only. value_info of the
removed name is dropped. Node order stays topological: only edges are redirected to values that
were already defined earlier.
"""
from __future__ import annotations

from layerscope.rewrite.base import PassResult, copy_input, op_counts
from layerscope.rewrite.graph_utils import (
    cap_ir_version,
    is_default_domain,
    node_label,
    replace_nodes,
    subgraphs,
    used_names,
)


def fold_identity(model) -> PassResult:
    new = copy_input(model, "fold_identity")
    graph = new.graph
    nodes_before, ops_before = len(graph.node), op_counts(graph)
    outputs = {o.name for o in graph.output}
    made_here = {o for n in graph.node for o in n.output}
    in_subgraphs = set().union(*(used_names(g) for n in graph.node for g in subgraphs(n)))

    # value name -> the name that replaces it, always resolved (no value is itself a key).
    rename: dict[str, str] = {}
    removed, skipped, keep = [], [], []
    for index, node in enumerate(graph.node):
        if not (is_default_domain(node) and node.op_type == "Identity"):
            keep.append(node)
            continue
        x, y = rename.get(node.input[0], node.input[0]), node.output[0]
        if y in in_subgraphs or x in in_subgraphs:
            why = "its value is read inside a subgraph"
        elif y not in outputs:  # readers of Y read X
            rename[y], why = x, None
        elif x in made_here and x not in outputs:  # X's producer writes the graph output Y
            for k, v in rename.items():
                if v == x:
                    rename[k] = y
            rename[x], why = y, None
        else:
            why = "passes a graph input, initializer or output to a graph output"
        if why is None:
            removed.append(node_label(node, index))
        else:
            skipped.append((node_label(node, index), why))
            keep.append(node)

    if removed:
        for node in keep:
            for i, name in enumerate(node.input):
                node.input[i] = rename.get(name, name)
            for i, name in enumerate(node.output):
                node.output[i] = rename.get(name, name)
        replace_nodes(graph, keep)
        for i in reversed(range(len(graph.value_info))):
            if graph.value_info[i].name in rename:
                del graph.value_info[i]
    cap_ir_version(new)
    return PassResult(new, bool(removed), removed, nodes_before, len(graph.node), skipped,
                      ops_before, op_counts(graph), verb="removed",
                      nothing="no Identity node")

