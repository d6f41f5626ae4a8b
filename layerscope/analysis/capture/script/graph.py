"""What the scripted graphs say statically: the calls a method makes on submodules, in order."""
from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn


def script_type(module: nn.Module) -> str | None:
    """The class name a scripted module was compiled from ("Conv2d"), None if unknown."""
    name = getattr(module, "original_name", None)
    return name if isinstance(name, str) and name else None


def _walk(nodes):
    for node in nodes:
        yield node
        for block in node.blocks():
            yield from _walk(block.nodes())


@dataclass(frozen=True)
class Site:
    """A ``prim::CallMethod`` on a submodule of ``self`` (or on ``self``: ``path`` is "")."""

    last: str  # the last attribute of the GetAttr chain: the instance name the interpreter reports
    path: str  # the whole chain, relative to self: ``blocks.0``
    method: str


def graph_call_sites(module: nn.Module, method: str) -> list[Site]:
    """The calls ``method`` of ``module`` makes on its submodules, in the graph's (static) order."""
    graph = module._c._get_method(method).graph
    self_value = next(iter(graph.inputs())).unique()
    sites = []
    for node in _walk(graph.nodes()):
        if node.kind() != "prim::CallMethod":
            continue
        chain = []
        value = node.inputsAt(0)
        while value.node().kind() == "prim::GetAttr":
            chain.append(value.node().s("name"))
            value = value.node().inputsAt(0)
        if value.unique() == self_value:
            path = ".".join(reversed(chain))
            sites.append(Site(chain[0] if chain else "", path, node.s("name")))
    return sites
