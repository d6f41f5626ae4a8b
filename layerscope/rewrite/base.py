"""The rewrite pass protocol (onnx_ir / onnxscript pass style).

A pass is a function ``pass_fn(model: onnx.ModelProto, **options) -> PassResult``: it never
modifies the model it is given and returns the new model with whether anything changed
(``result.model, result.modified``) and what it did. A pass is described to the registry
(``layerscope.rewrite.PASSES``) by a ``PassInfo``: its name, where its function lives (imported
on first use, so that listing passes needs neither onnx nor numpy) and its options, from which the
CLI builds ``layerscope rewrite NAME`` with no per-pass code.
"""
from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from layerscope.core.errors import UserError


@dataclass
class PassResult:
    """What a pass returns: the new model and what it did."""

    model: Any  # onnx.ModelProto
    changed: bool
    replaced: list[str] = field(default_factory=list)  # names of the replaced/removed nodes
    nodes_before: int = 0
    nodes_after: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (node, why it was left)
    ops_before: dict[str, int] = field(default_factory=dict)  # op_type -> count
    ops_after: dict[str, int] = field(default_factory=dict)
    # For the summary: "{verb} 3 node(s) {how}: names", "nothing to rewrite: {nothing}".
    how: str = ""
    nothing: str = ""
    verb: str = "replaced"

    @property
    def modified(self) -> bool:
        """onnx_ir's name for ``changed``."""
        return self.changed

    def __iter__(self):  # model, modified = pass_fn(model)
        return iter((self.model, self.changed))


@dataclass(frozen=True)
class Option:
    """One option of a pass: ``--flag`` on the command line, ``dest`` as a keyword argument."""

    flag: str  # "--tile"
    type: Callable[[str], Any]
    default: Any
    help: str
    minimum: int | float | None = None  # checked by check_options, named after the flag

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class PassInfo:
    name: str  # the CLI name: "tile-linear"
    target: str  # "package.module:function", imported on first use
    help: str
    options: tuple[Option, ...] = ()

    def load(self) -> Callable[..., PassResult]:
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)

    def check_options(self, values: dict[str, Any]) -> None:
        for opt in self.options:
            v = values.get(opt.dest, opt.default)
            if opt.minimum is not None and v < opt.minimum:
                raise UserError(f"{opt.flag} must be at least {opt.minimum}, got {v}")

    def __call__(self, model, **options) -> PassResult:
        """Run the pass; options not given take their defaults."""
        options = {**{opt.dest: opt.default for opt in self.options}, **options}
        self.check_options(options)
        return self.load()(model, **options)


def op_counts(graph) -> dict[str, int]:
    return dict(sorted(Counter(n.op_type for n in graph.node).items()))


def copy_input(model, pass_name: str):
    """A deep copy of ``model`` for the pass to edit, after checking it is a ModelProto."""
    from layerscope.rewrite.onnx_io import require_onnx

    onnx = require_onnx()
    if not isinstance(model, onnx.ModelProto):
        raise UserError(f"{pass_name} takes an onnx.ModelProto, got {type(model).__name__}")
    new = onnx.ModelProto()
    new.CopyFrom(model)
    return new


def summary(result: PassResult) -> str:
    """The lines ``layerscope rewrite PASS`` prints: what changed, what was left and why, and
    the node counts per op type that changed."""
    lines = []
    if result.replaced:
        lines.append(f"{result.verb} {len(result.replaced)} node(s)"
                     + (f" {result.how}" if result.how else "") + ": "
                     + ", ".join(result.replaced))
    else:
        lines.append("nothing to rewrite" + (f": {result.nothing}" if result.nothing else ""))
    for name, why in result.skipped:
        lines.append(f"left {name}: {why}")
    changes = []
    for op in sorted(set(result.ops_before) | set(result.ops_after)):
        before, after = result.ops_before.get(op, 0), result.ops_after.get(op, 0)
        if before != after:
            changes.append(f"{op} {before} -> {after}")
    lines.append(f"nodes: {result.nodes_before} -> {result.nodes_after}"
                 + (f" ({', '.join(changes)})" if changes else ""))
    return "\n".join(lines) + "\n"
