"""The result of ``layerscope graph``: a model's data-flow graph, one static metric per node.
Built by analysis/graph.py (and collapsed by analysis/graph_collapse.py); drawn by
renderers/graph_out.py; listed by views/graph.py."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

METRICS = ("flops", "macs", "params", "weight_bytes", "bytes_read", "bytes_written",
           "activation_bytes", "intensity")


@dataclass
class GraphNode:
    id: str
    name: str
    type: str
    kind: str  # "op" | "input" | "output"
    metrics: dict[str, float] = field(default_factory=dict)
    shape: str = ""  # output shape(s), for the label
    count: int = 1  # graph nodes this node stands for (more than 1: a collapsed group)
    members: list[GraphNode] = field(default_factory=list)  # a group's nodes, in graph order


@dataclass
class GraphEdge:
    source: str
    target: str
    label: str = ""  # the tensor's name or shape


@dataclass
class ModelGraph:
    model: str
    frontend: str
    metric: str
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    notes: list[str] = field(default_factory=list)
    kind: str = "graph"

    def value(self, node: GraphNode) -> float:
        return float(node.metrics.get(self.metric) or 0.0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
