"""graph (``ModelGraph``, layerscope.analysis.graph): the nodes by the graph's metric. The
picture itself (DOT, SVG, the zoomable HTML page) is renderers/graph_out.py's."""
from __future__ import annotations

from layerscope.core.units import si
from layerscope.views.common import cell
from layerscope.views.sections import Cell, DataTable, Lines, RowTable, View

TOP_NODES = 15  # the terminal list


def is_op(node) -> bool:
    """An operation (coloured by the metric), not a graph input or output."""
    return node.kind == "op"


def ranked(g) -> list:
    """The operation nodes, largest metric first."""
    return sorted((n for n in g.nodes if is_op(n)), key=g.value, reverse=True)


def heading(g) -> tuple[str, str]:
    return (f"{g.model} — graph",
            f"frontend {g.frontend} · {len(g.nodes)} nodes · {len(g.edges)} edges · "
            f"coloured by {g.metric}")


def type_label(node) -> str:
    """``MatMul``, or ``MatMul ×256`` for a collapsed group of 256."""
    return f"{node.type} ×{node.count}" if node.count > 1 else node.type


def facts(g) -> list[tuple[str, str]]:
    ops = ranked(g)
    return ([("Nodes", f"{len(ops)} operations, {len(g.nodes) - len(ops)} inputs/outputs"),
             ("Edges", str(len(g.edges))),
             (f"Total {g.metric}", si(sum(g.value(n) for n in g.nodes if is_op(n))))]
            + [("Note", n) for n in g.notes])


def tables(g) -> list[RowTable]:
    cols = [("Node", False), ("Type", False), ("Output shape", False), (g.metric, True)]
    rows = [[cell(n.name), cell(type_label(n)), cell(n.shape or "-"),
             Cell(si(g.value(n)), g.value(n))] for n in ranked(g)]
    return [RowTable("nodes", f"Nodes by {g.metric}", cols, rows)]


def csv(g) -> DataTable:
    metrics = list(dict.fromkeys(m for n in g.nodes for m in n.metrics))  # METRICS order
    return DataTable(["id", "name", "type", "kind", "shape"] + metrics + ["count"],
                     [[n.id, n.name, n.type, n.kind, n.shape]
                      + [n.metrics.get(m) for m in metrics] + [n.count] for n in g.nodes])


def text_lines(g) -> list[str]:
    """The top nodes by metric, for the terminal (the picture needs -o FILE)."""
    ops = ranked(g)
    lines = [f"{g.model}: {len(ops)} nodes, {len(g.edges)} edges; top by {g.metric}:"]
    lines += [f"  {si(g.value(n)):>9}  {n.name} ({type_label(n)})" for n in ops[:TOP_NODES]]
    lines += [f"note: {n}" for n in g.notes]
    lines.append("draw it with -o FILE.svg, FILE.html or FILE.dot")
    return lines


def terminal(g) -> list:
    # never wrapped: a long node name stays on its line, as in a plain listing
    return [Lines(text_lines(g), wrap=False)]


VIEW = View(heading=heading, terminal=terminal, facts=facts, tables=tables, csv=csv)
