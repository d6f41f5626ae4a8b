"""The two sides of a comparison: loading each report, and grouping its rows under join keys
(module paths)."""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from layerscope.analysis.compare.result import ROOT, ROOT_LABEL, ROW_METRICS, category
from layerscope.core import tree
from layerscope.core.errors import UserError
from layerscope.core.report import LayerRow, Report
from layerscope.frontends.detect import detect


# ------------------------------------------------------------------------------- loading
def _shape_text(d: dict[str, Any]) -> str:
    return "x".join(str(int(x)) for x in d.get("shape") or [])


def _inputs_for(report: Report) -> list[str]:
    """A report's input shapes as --input strings for a PyTorch side ('1x3x224x224:int64')."""
    out = []
    for d in report.inputs:
        dtype = d.get("dtype")
        out.append(_shape_text(d) + (f":{dtype}" if dtype and dtype != "float32" else ""))
    return out


def _is_saved_report(spec: Any) -> bool:
    return isinstance(spec, str) and spec.lower().endswith(".json")


def _needs_inputs(spec: Any) -> bool:
    """A TorchScript file and an nn.Module have no default input; built-in models, factories,
    ONNX files, training runs and saved reports carry theirs."""
    return detect(spec).kind in ("torchscript", "module")


def _read_report(path: str) -> Report:
    from layerscope.core.results import read_result

    result = read_result(path)
    if not isinstance(result, Report):
        raise UserError(f"{path}: a saved {result.kind} result; compare needs a report of kind "
                        "analyze (layerscope analyze MODEL --format json -o FILE.json)")
    return result


def _analyze(spec: Any, inputs: Any) -> Report:
    from layerscope.analysis.analyze import analyze

    return analyze(spec, inputs)


def source_of(spec: Any) -> str:
    if isinstance(spec, str):
        return spec
    if isinstance(spec, Report):
        return spec.model
    return type(spec).__name__


def load_sides(a: Any, b: Any, inputs: Any) -> tuple[Report, Report, list[str]]:
    """Both reports. A side that needs inputs and got none takes the other side's shapes."""
    notes: list[str] = []
    specs = {"A": a, "B": b}
    reports: dict[str, Report] = {}
    for label, spec in specs.items():
        if isinstance(spec, Report):
            reports[label] = spec
        elif _is_saved_report(spec):
            reports[label] = _read_report(spec)
            if inputs:
                notes.append(f"{label} is a saved report ({spec}): --input does not apply to it")
    deferred = []
    for label, spec in specs.items():
        if label in reports:
            continue
        if inputs is None and _needs_inputs(spec):
            deferred.append(label)
            continue
        reports[label] = _analyze(spec, inputs)
    for label in deferred:
        other = reports.get("B" if label == "A" else "A")
        if other is None:  # both need inputs: analyze says how to give them
            reports[label] = _analyze(specs[label], None)
            continue
        given = _inputs_for(other)
        reports[label] = _analyze(specs[label], given)
        notes.append(f"{label} ({source_of(specs[label])}) has no default input; it was analysed "
                     f"with {'B' if label == 'A' else 'A'}'s input {', '.join(given)}")
    return reports["A"], reports["B"], notes


# ------------------------------------------------------------------------------- join keys
_SUFFIX = re.compile(r"^(.*)_(\d+)$")


def legacy_scope(node_name: str, known: Collection[str] = ()) -> str | None:
    """The module path in a legacy (TorchScript-based) exporter's node name.

    ``/layer1/layer1.0/conv1/Conv`` -> ``layer1.0.conv1``: the segments between the first and
    the last ``/`` are scope names. A segment that starts with the previous one plus "." names
    the child of a container by its path from the container's parent (``layer1`` ->
    ``layer1.0``; ``downsample`` -> ``downsample.0`` is ``layer1.0.downsample.0``), so it
    replaces the previous segment; any other segment is appended. The exporter numbers repeated
    calls of a module (``relu``, ``relu_1``, ``relu_2``): when ``known`` module paths are given,
    a path that is not known but is known without its ``_N`` suffix is taken without it.
    ``/Relu`` is the root (""); a name that does not start with "/" has no scope (None).
    """
    if not node_name.startswith("/"):
        return None
    path = previous = ROOT
    for seg in node_name.split("/")[1:-1]:
        if not seg:
            continue
        if previous and seg.startswith(previous + "."):  # replaces the previous segment
            parent = path[: len(path) - len(previous)].rstrip(".")
            path = f"{parent}.{seg}" if parent else seg
        else:
            path = f"{path}.{seg}" if path else seg
        previous = seg
        if known and path not in known:
            m = _SUFFIX.match(path)
            if m and m.group(1) in known:
                path = m.group(1)
    return path


@dataclass
class Group:
    key: str
    rows: list[LayerRow]
    first: int  # position of the first row in its report
    covers_subtree: bool  # a PyTorch row that sums its submodules (leaf or --depth row)
    _metrics: tuple[int, dict[str, int]] | None = field(default=None, repr=False,
                                                        compare=False)

    def metric(self, name: str) -> int:
        return self.metrics()[name] if name in ROW_METRICS else \
            sum(int(getattr(r, name) or 0) for r in self.rows)

    def metrics(self) -> dict[str, int]:
        """The row metrics summed over the group's rows; kept until rows are added (a
        comparison reads them many times per row)."""
        cached = self._metrics
        if cached is None or cached[0] != len(self.rows):
            sums = {m: sum(int(getattr(r, m) or 0) for r in self.rows) for m in ROW_METRICS}
            self._metrics = cached = (len(self.rows), sums)
        return dict(cached[1])

    @property
    def types(self) -> list[str]:
        return [r.type for r in self.rows]

    def has(self, types: Collection[str]) -> bool:
        return any(t in types for t in self.types)

    def categories(self) -> set[str | None]:
        return {category(r.type) for r in self.rows if not r.self_only}

    def nodes(self, types: Collection[str]) -> list[LayerRow]:
        return [r for r in self.rows if r.type in types]

    def is_zero(self) -> bool:
        return not any(self.metrics().values())

    def type_text(self, onnx: bool) -> str:
        if not onnx:
            return ", ".join(r.type + (" (own ops)" if r.self_only else "") for r in self.rows)
        counts = Counter(self.types)
        return ", ".join(t if n == 1 else f"{t} x{n}" for t, n in counts.items())


@dataclass
class Side:
    label: str  # "A" / "B"
    report: Report
    source: str
    onnx: bool
    groups: dict[str, Group] = field(default_factory=dict)
    exporter: str | None = None

    def order(self) -> list[str]:
        return sorted(self.groups, key=lambda k: self.groups[k].first)


def _key_of_torch_row(row: LayerRow) -> str:
    return ROOT if row.name == ROOT_LABEL else row.name


def _onnx_exporter(report: Report) -> str:
    if any(r.scope is not None for r in report.layers):
        return "dynamo (module paths from name scopes)"
    if any(r.name.startswith("/") for r in report.layers):
        return "legacy (module paths from node names)"
    return "unscoped (every node at the root)"


def group_side(side: Side, known: Collection[str]) -> None:
    groups: dict[str, Group] = {}
    for i, row in enumerate(side.report.layers):
        if side.onnx:
            key = row.scope if row.scope is not None else legacy_scope(row.name, known)
            key = ROOT if key is None else key
            covers = False
        else:
            key = _key_of_torch_row(row)
            covers = not row.self_only
        g = groups.get(key)
        if g is None:
            groups[key] = Group(key, [row], i, covers)
        else:
            g.rows.append(row)
            g.covers_subtree = g.covers_subtree and covers
    side.groups = groups
    if side.onnx:
        side.exporter = _onnx_exporter(side.report)


def fold_into_covering_rows(x: Side, y: Side) -> None:
    """x's keys that y lacks go into the nearest ancestor whose y row covers its subtree."""
    for key in sorted(x.groups, key=lambda k: -tree.depth(k)):
        if key in y.groups or key not in x.groups:
            continue
        anc = next((p for p in tree.ancestors(key) if p in y.groups), None)
        if anc is None or not y.groups[anc].covers_subtree:
            continue
        moved = x.groups.pop(key)
        target = x.groups.get(anc)
        if target is None:
            x.groups[anc] = Group(anc, moved.rows, moved.first, moved.covers_subtree)
        else:
            target.rows.extend(moved.rows)
            target.first = min(target.first, moved.first)


def joined_order(a: Side, b: Side) -> list[str]:
    """A's keys in A's order, each key only B has placed after the key B had before it that A
    has too (at the start when none), in B's order: one pass over each side (inserting into a
    list, each after a search for its place, was quadratic in the rows)."""
    order = a.order()
    placed = set(order)
    after: dict[str | None, list[str]] = {}  # A's key (None: the start) -> B-only keys after it
    anchor: str | None = None
    for key in b.order():
        if key in placed:
            anchor = key
        else:
            after.setdefault(anchor, []).append(key)
    out = list(after.get(None, []))
    for key in order:
        out.append(key)
        out += after.get(key, [])
    return out
