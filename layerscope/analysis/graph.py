"""``layerscope.graph``: a model's data-flow graph with a static cost metric on every node.

Two sources, one result:
- ONNX files: one node per ONNX node, one edge per tensor from its producer to each consumer;
  metrics are the node's row of ``analyze`` (same definitions).
- PyTorch models: one node per module call that ``torch.fx`` sees as a leaf (every ``torch.nn``
  layer) plus the functions and methods called between them (residual adds, flatten, cat), edges
  from fx's data flow; metrics are the module's row of ``analyze``. A model fx cannot trace
  (data-dependent control flow, TorchScript) is drawn as its leaf modules in call order, with a
  note that the edges are call order, not data flow.
Repeated parallel nodes (the tiles of a rewrite) are then collapsed into one node each, with a
count (analysis/graph_collapse.py). The result is data (core/graph_records.py);
``renderers/graph_out.py`` lays it out and draws DOT, SVG or HTML.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from layerscope.analysis.graph_collapse import collapse as collapse_repeats
from layerscope.core import options, tree, values
from layerscope.core.errors import UserError
from layerscope.core.graph_records import METRICS, GraphEdge, GraphNode, ModelGraph
from layerscope.core.settings import Settings, of_call, option
from layerscope.frontends.detect import detect

# Nodes hidden by default: they hold data, not work, and would double a graph's size
# (the dynamo exporter emits one Constant per shape literal).
HIDDEN_ONNX_TYPES = ("Constant",)


def _row_metrics(row) -> dict[str, float]:
    out = {m: getattr(row, m) for m in METRICS if m != "intensity"}
    out["intensity"] = row.intensity or 0.0
    return out


def _shape_text(shapes: list) -> str:
    return ", ".join("x".join(map(str, s)) if isinstance(s, (list, tuple)) else str(s)
                     for s in shapes)


# ------------------------------------------------------------------------------------- ONNX
def _onnx_graph(path: str, inputs: Any, batch_size: int | None,
                show_all: bool) -> ModelGraph:
    from layerscope.analysis.static_onnx import walk_graph
    from layerscope.frontends.onnx_model import load_onnx

    if isinstance(inputs, str):
        inputs = [inputs]
    g = load_onnx(path, list(inputs or []), batch_size)
    walk = walk_graph(g)
    nodes: list[GraphNode] = []
    edges: list[GraphEdge] = []
    producer: dict[str, str] = {}
    for name in g.inputs:
        t = g.tensors.get(name)
        nodes.append(GraphNode(id=f"in:{name}", name=name, type="input", kind="input",
                               shape=_shape_text([t.shape]) if t and t.shape else ""))
        producer[name] = f"in:{name}"
    hidden = 0
    for index, (node, row) in enumerate(zip(g.nodes, walk.rows)):
        if node.op_type in HIDDEN_ONNX_TYPES and not show_all:
            hidden += 1
            continue
        nid = f"n{index}"
        nodes.append(GraphNode(id=nid, name=row.name, type=node.op_type, kind="op",
                               metrics=_row_metrics(row), shape=_shape_text(row.output_shapes)))
        for tensor in node.input:
            if tensor in producer:
                edges.append(GraphEdge(producer[tensor], nid, tensor))
        for tensor in node.output:
            if tensor:
                producer[tensor] = nid
    for name in g.outputs:
        nodes.append(GraphNode(id=f"out:{name}", name=name, type="output", kind="output"))
        if name in producer:
            edges.append(GraphEdge(producer[name], f"out:{name}", name))
    notes = [f"{hidden} Constant node(s) hidden (--all-nodes shows them)"] if hidden else []
    return ModelGraph(model=g.name, frontend="onnx", metric="", nodes=nodes, edges=edges,
                      notes=notes)


# ---------------------------------------------------------------------------------- PyTorch
def _fx_graph(module, rows: dict[str, Any]
              ) -> tuple[list[GraphNode], list[GraphEdge], list[str]]:
    import torch.fx

    traced = torch.fx.Tracer().trace(module)
    nodes: list[GraphNode] = []
    edges: list[GraphEdge] = []
    functions = 0
    for n in traced.nodes:
        if n.op == "get_attr":
            continue
        if n.op == "placeholder":
            node = GraphNode(id=n.name, name=n.target, type="input", kind="input")
        elif n.op == "output":
            node = GraphNode(id=n.name, name="output", type="output", kind="output")
        elif n.op == "call_module":
            row = rows.get(n.target)
            node = GraphNode(id=n.name, name=n.target, type=type(module.get_submodule(
                n.target)).__name__, kind="op", metrics=_row_metrics(row) if row else {},
                shape=_shape_text(row.output_shapes) if row else "")
        else:  # call_function / call_method: the arithmetic written in a forward
            target = n.target if isinstance(n.target, str) else getattr(
                n.target, "__name__", str(n.target))
            node = GraphNode(id=n.name, name=n.name, type=target, kind="op")
            functions += 1
        nodes.append(node)
        for arg in n.all_input_nodes:
            if arg.op != "get_attr":
                edges.append(GraphEdge(arg.name, n.name))
    notes = [f"{functions} function call(s) in forward code (relu, add, flatten, ...) are drawn "
             "without figures: analyze charges them to their module's '(own ops)' row"
             ] if functions else []
    return nodes, edges, notes


def _call_order_graph(rows: list[Any]) -> tuple[list[GraphNode], list[GraphEdge]]:
    leaves = [r for r in rows if not any(tree.is_descendant(o.name, r.name) for o in rows)]
    nodes = [GraphNode(id="input", name="input", type="input", kind="input")]
    nodes += [GraphNode(id=f"m{i}", name=r.name, type=r.type, kind="op",
                        metrics=_row_metrics(r), shape=_shape_text(r.output_shapes))
              for i, r in enumerate(leaves)]
    nodes.append(GraphNode(id="output", name="output", type="output", kind="output"))
    edges = [GraphEdge(a.id, b.id) for a, b in zip(nodes, nodes[1:])]
    return nodes, edges


def _torch_graph(model: Any, inputs: Any, batch_size: int | None) -> ModelGraph:
    from layerscope.analysis.analyze import analyze
    from layerscope.analysis.analyze_torch import load

    loaded = load(model, inputs, batch_size)
    report = analyze(loaded.module, loaded.inputs)
    rows = {r.name: r for r in report.layers}
    try:
        nodes, edges, notes = _fx_graph(loaded.module, rows)
    except Exception as exc:  # noqa: BLE001 - any tracing failure falls back to call order
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        notes = [f"torch.fx could not trace this model ({reason[:160]}): its layers are "
                     "drawn in call order; edges are call order, not data flow"]
        nodes, edges = _call_order_graph(report.layers)
    return ModelGraph(model=loaded.name, frontend=loaded.frontend, metric="", nodes=nodes,
                      edges=edges, notes=notes)


# ---------------------------------------------------------------------------------- filter
def _keep(graph: ModelGraph, pattern: str) -> ModelGraph:
    """Keep the op nodes whose name or type matches ``pattern`` (plus inputs and outputs);
    an edge joins two kept nodes when a path of dropped nodes joined them."""
    rx = values.pattern(pattern, "nodes")
    kept = {n.id for n in graph.nodes
            if n.kind != "op" or rx.search(n.name) or rx.search(n.type)}
    if not any(n.kind == "op" and n.id in kept for n in graph.nodes):
        raise UserError(f"nodes {pattern!r} matches no node name or type of {graph.model}",
                        arguments="nodes")
    succ: dict[str, list[str]] = {}
    for e in graph.edges:
        succ.setdefault(e.source, []).append(e.target)
    edges: list[GraphEdge] = []
    for src in (n.id for n in graph.nodes if n.id in kept):
        seen, stack, found = set(), list(succ.get(src, [])), []
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            if t in kept:
                found.append(t)
            else:
                stack.extend(succ.get(t, []))
        edges += [GraphEdge(src, t) for t in dict.fromkeys(found)]
    dropped = len(graph.nodes) - len(kept)
    return ModelGraph(model=graph.model, frontend=graph.frontend, metric=graph.metric,
                      nodes=[n for n in graph.nodes if n.id in kept], edges=edges,
                      notes=graph.notes + [f"--nodes {pattern!r}: {dropped} node(s) left out; "
                                           "paths through them are drawn as one edge"])


def metric_name(value: Any, name: str | None = None) -> str:
    """A metric a graph's nodes are coloured by (one of ``METRICS``)."""
    if value not in METRICS:
        raise UserError(f"unknown {name or 'metric'} {value!r}: use one of "
                        f"{', '.join(METRICS)}", arguments=name or ())
    return str(value)


@dataclasses.dataclass(kw_only=True, eq=False)
class GraphSettings(Settings):
    """Every setting of ``layerscope graph`` and ``layerscope.graph`` (the drawing's file and
    the node list's format are the command line's output options, listed before ``PLAIN``'s
    fields)."""

    model: Any = options.model()
    inputs: Any = options.inputs()
    batch_size: int | None = options.batch_size()
    metric: str = option("flops", "colour by flops (default), macs, params, weight_bytes, "
                                  "bytes_read, bytes_written, activation_bytes or intensity",
                         parse=metric_name, metavar="METRIC", group=options.PLAIN)
    nodes: str | None = option(None, "draw only nodes whose name or type matches (paths "
                                     "through the others become one edge)", metavar="REGEX",
                               group=options.PLAIN)
    all_nodes: bool = option(False, "ONNX: also draw Constant nodes (hidden by default)",
                             group=options.PLAIN)
    collapse: bool = option(True, "draw every node: by default, repeated parallel nodes (same "
                                  "type and output shape between the same nodes, e.g. a "
                                  "rewrite's tiles) are one node with their count",
                            flag="--no-collapse", group=options.PLAIN)


def graph(model: Any = None, inputs: Any = None, *, settings: GraphSettings | None = None,
          **overrides: Any) -> ModelGraph:
    """The data-flow graph of ``model`` (a spec, an ``nn.Module`` or an ONNX file) with
    ``metric`` (one of METRICS) on every node; ``nodes``: a regex on node names/types;
    ``collapse``: repeated parallel nodes (same type and output shape between the same nodes)
    become one node with their count and summed figures. ``settings``: a ``GraphSettings``;
    keyword arguments (``batch_size``, ``metric``, ``nodes``, ``all_nodes``, ``collapse``)
    override its fields."""
    s = of_call(GraphSettings, settings, overrides, "draw", model=model, inputs=inputs)
    model, inputs, batch_size = s.model, s.inputs, s.batch_size
    ref = detect(model)
    if ref.is_onnx:
        g = _onnx_graph(ref.spec, inputs, batch_size, s.all_nodes)
    else:
        g = _torch_graph(model, inputs, batch_size)
    g.metric = s.metric
    if s.nodes:
        g = _keep(g, s.nodes)
    return collapse_repeats(g) if s.collapse else g
