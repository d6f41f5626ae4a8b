"""ONNX model files: load without weights, bind input shapes, infer every tensor's shape.

External data is never loaded (``onnx.load(..., load_external_data=False)``) and the values of
embedded weights are dropped right after parsing: an initializer's size comes from its dims and
data type, so a model whose weights exceed the machine's memory is analysed in the memory of its
graph. Only the existence and length of each external data file are checked.
"""
from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from layerscope.core import values
from layerscope.core.errors import UserError, first_line
from layerscope.core.infiles import special_kind

# Bits per element by TensorProto data type (sub-byte types are packed, onnx IR spec "int4").
BITS = {1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 8: 0, 9: 8, 10: 16, 11: 64, 12: 32,
         13: 64, 14: 64, 15: 128, 16: 16, 17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4, 23: 4,
         24: 8, 25: 2, 26: 2, 27: 6, 28: 6}
# Integer and boolean initializers are shapes, axes, indices or masks, never weights; 8-bit and
# smaller integers can be quantised weights and stay eligible.
NON_WEIGHT_TYPES = {6, 7, 8, 9, 12, 13}
DEFAULT_DOMAINS = ("", "ai.onnx")


# The names PyTorch reports use (float32, not ONNX's FLOAT); the rest are ONNX's, lower case.
_RENAMED = {1: "float32", 11: "float64"}
_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "long": "int64",
            "int": "int32"}


def dtype_name(elem_type: int) -> str:
    import onnx

    if elem_type in _RENAMED:
        return _RENAMED[elem_type]
    try:
        return str(onnx.TensorProto.DataType.Name(elem_type)).lower()
    except ValueError:
        return f"type{elem_type}"


def tensor_bytes(shape: Sequence[int], elem_type: int) -> int:
    return math.ceil(math.prod(shape) * BITS.get(elem_type, 0) / 8)


@dataclass
class TensorInfo:
    shape: tuple[int, ...] | None  # None: shape inference could not determine it
    elem_type: int

    @property
    def nbytes(self) -> int:
        return 0 if self.shape is None else tensor_bytes(self.shape, self.elem_type)


@dataclass
class OnnxGraph:
    """A loaded, shape-inferred graph: what the static analysis walks."""

    path: str
    name: str
    model: Any  # onnx.ModelProto, shapes inferred, no external data loaded
    opsets: dict[str, int]  # domain ("" for ai.onnx) -> imported version
    nodes: list[Any]  # NodeProto in topological order
    tensors: dict[str, TensorInfo]
    initializers: set[str]  # initializer names and Constant node outputs: resident data
    inputs: list[str]  # graph inputs that are not initializers
    outputs: list[str]
    implicit_inputs: dict[int, list[str]] = field(default_factory=dict)  # subgraph captures


# ---------------------------------------------------------------- --input NAME=SHAPE[:DTYPE]
def parse_named_shape(text: str) -> tuple[str | None, tuple[int, ...], str | None]:
    """'x=1x3x224x224', '1x3x224x224' or 'ids=1x128:int64' -> (name, shape, dtype)."""
    return values.named_shape(text, "inputs")


# ---------------------------------------------------------------- loading and checks
def check_onnx_file(path: str) -> None:
    """``path`` names an ONNX model file: it exists, is no folder and is not empty (one line
    each, before onnx reads it; analyze, compare, rewrite and verify)."""
    if not os.path.exists(path):
        raise UserError(f"{path}: no such file")
    if os.path.isdir(path):
        raise UserError(f"{path} is a directory, not an ONNX model file")
    if os.path.getsize(path) == 0:
        raise UserError(f"{path} is empty: expected an ONNX model (export one with "
                        "'layerscope export MODEL -o model.onnx')")


def _read_model(path: str) -> Any:
    import onnx
    from google.protobuf.message import DecodeError

    check_onnx_file(path)
    try:
        return onnx.load(path, load_external_data=False)
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except (DecodeError, RuntimeError, ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"{path} is not a readable ONNX model ({first_line(exc)}); "
                        f"{unreadable_hint(path)}") from exc


def unreadable_hint(path: str) -> str:
    """What to say about a file protobuf cannot parse: PyTorch files are zip archives."""
    import zipfile

    if zipfile.is_zipfile(path):
        return ("it is a zip archive, as TorchScript and torch.save files are: give it a .pt "
                "name to analyse it as TorchScript")
    return "is the file complete?"


def _opsets(model: Any, path: str) -> dict[str, int]:
    opsets = {}
    for imp in model.opset_import:
        opsets["" if imp.domain in DEFAULT_DOMAINS else imp.domain] = imp.version
    if not model.HasField("graph") or not opsets:
        raise UserError(f"{path} is not an ONNX model: it has no graph or no opset_import "
                        "(truncated or not a model file?)")
    return opsets


def _check_domains(model: Any, opsets: dict[str, int], path: str) -> None:
    """A node in a domain the model does not import is invalid (no runtime would load it):
    refuse it by name rather than guess its semantics."""
    for i, node in enumerate(model.graph.node):
        domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
        if domain not in opsets:
            label = node.name or f"{node.op_type}_{i}"
            raise UserError(f"{path}: node {label!r} ({node.op_type}) is in domain {domain!r}, "
                            "which the model does not import (opset_import); the model is "
                            "malformed")


def _check_data_location(location: str, resolved: str, base: str, what: str,
                         path: str) -> None:
    """External data must lie inside the model's folder, as onnx's checker and onnxruntime
    require: a location that is absolute, climbs out with '..' or is a symbolic link resolving
    elsewhere would let a model file name any file on the machine."""
    root = os.path.realpath(base)
    inside = os.path.commonpath([root, os.path.realpath(resolved)]) == root
    if os.path.isabs(location) or not inside:
        raise UserError(f"{path}: external data {location!r} of {what} lies outside the "
                        "model's folder; external data files must be inside it")


def _stored_tensors(graph: Any) -> Any:
    """(what, tensor) for every TensorProto that can keep its data in a file: initializers and
    tensor attributes (Constant values), in subgraphs too."""
    import onnx

    for t in graph.initializer:
        yield f"initializer {t.name!r}", t
    for node in graph.node:
        for attr in node.attribute:
            label = f"attribute {attr.name!r} of node {node.name or node.op_type!r}"
            if attr.type == onnx.AttributeProto.TENSOR:
                yield label, attr.t
            for t in attr.tensors:
                yield label, t
            for g in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else []) + list(
                    attr.graphs):
                yield from _stored_tensors(g)


def _check_external_data(model: Any, path: str) -> None:
    """Every external data file must exist and be long enough; its bytes are never read."""
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    base = os.path.dirname(os.path.abspath(path))
    for what, tensor in _stored_tensors(model.graph):
        if not uses_external_data(tensor):
            continue
        try:
            info = ExternalDataInfo(tensor)
        except ValueError as exc:  # an offset or length that is negative or not a number
            raise UserError(f"{path}: the external data entry of {what} is malformed "
                            f"({first_line(exc)}); the model is damaged") from None
        if "\0" in info.location:
            raise UserError(f"{path}: the external data location of {what} contains a NUL "
                            "byte; the model is damaged")
        location = os.path.join(base, info.location)
        _check_data_location(info.location, location, base, what, path)
        kind = special_kind(location) if info.location else None
        if kind is not None:
            raise UserError(f"{path}: external data file {info.location!r} of {what} is "
                            f"{kind}, not a data file; give a regular file")
        if not info.location or not os.path.isfile(location):
            raise UserError(f"{path}: external data file {info.location!r} of {what} is missing "
                            f"(expected {location}); copy it beside the model")
        need = (info.offset or 0) + (info.length if info.length
                                     else tensor_bytes(tensor.dims, tensor.data_type))
        if os.path.getsize(location) < need:
            raise UserError(f"{path}: external data file {info.location!r} is shorter than "
                            f"{what} needs ({need:,} bytes); it is truncated")


# Initializers up to this many elements keep their values: shape inference reads small integer
# tensors (Reshape shapes, Slice bounds) when propagating shapes; it never reads weights.
KEEP_VALUES_UP_TO = 1024
_DATA_FIELDS = ("raw_data", "float_data", "int32_data", "int64_data", "double_data",
                "uint64_data", "string_data")


def drop_weight_values(model: Any) -> list[str]:
    """Free the values of embedded weights (dims and type stay): nothing here reads them, and
    shape inference would otherwise serialise and copy every weight byte. Returns the names of
    the initializers that now hold no values (these and the external ones)."""
    from onnx.external_data_helper import uses_external_data

    valueless = []
    for t in model.graph.initializer:
        if uses_external_data(t):
            valueless.append(t.name)
        elif math.prod(t.dims) > KEEP_VALUES_UP_TO:
            for name in _DATA_FIELDS:
                t.ClearField(name)
            valueless.append(t.name)
    return valueless


def _check(model: Any, valueless: Sequence[str], path: str) -> None:
    """onnx's checker on a skeleton of the model: initializers without values (dropped or
    external) become graph inputs of the same type and shape, so the checker neither rejects the
    missing bytes nor looks for external files (from a ModelProto it would look in the working
    directory; _check_external_data has checked them beside the model)."""
    import onnx

    skeleton = onnx.ModelProto()
    skeleton.CopyFrom(model)
    graph = skeleton.graph
    moved = set(valueless)
    kept = [t for t in graph.initializer if t.name not in moved]
    listed = {vi.name for vi in graph.input}
    for t in graph.initializer:
        if t.name in moved and t.name not in listed:
            graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type,
                                                                  list(t.dims)))
    del graph.initializer[:]
    graph.initializer.extend(kept)
    try:
        onnx.checker.check_model(skeleton)
    except (onnx.checker.ValidationError, ValueError) as exc:
        raise UserError(f"{path} is not a valid ONNX model: {first_line(exc)}") from exc


# ---------------------------------------------------------------- binding input shapes
def _dims(value_info: Any) -> list[Any] | None:
    tt = value_info.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
            for d in tt.shape.dim]


def _set_dims(value_info: Any, shape: Sequence[int]) -> None:
    dims = value_info.type.tensor_type.shape.dim
    del dims[:]
    for d in shape:
        dims.add().dim_value = d


def _shape_text(dims: Sequence[Any]) -> str:
    return "x".join(str(d) for d in dims) if dims else "scalar"


def bind_inputs(model: Any, specs: Sequence[str], batch_size: int | None, path: str) -> None:
    """Give every graph input a concrete shape: NAME=SHAPE binds by name, an unnamed spec binds
    the next input not bound yet, in graph order (an input bound twice is refused);
    ``batch_size`` replaces dimension 0 of every input."""
    init = {t.name for t in model.graph.initializer}
    real = [vi for vi in model.graph.input if vi.name not in init]
    by_name = {vi.name: vi for vi in real}
    names = ", ".join(by_name) or "none"
    bound: set[str] = set()
    for text in specs or []:
        name, shape, dtype = parse_named_shape(text)
        if name is None:  # the next input not bound yet, in graph order
            vi = next((v for v in real if v.name not in bound), None)
            if vi is None:
                raise UserError(f"inputs {text!r}: every input of {path} already has a shape "
                                f"(its inputs: {names}); one shape per input",
                                arguments="inputs")
        elif name not in by_name:
            raise UserError(f"inputs {text!r}: {path} has no input {name!r}; its inputs are "
                            f"{names}", arguments="inputs")
        elif name in bound:
            raise UserError(f"inputs {text!r}: input {name!r} is given twice; one shape per "
                            f"input (its inputs: {names})", arguments="inputs")
        else:
            vi = by_name[name]
        bound.add(vi.name)
        dims = _dims(vi)
        if dims is not None and len(dims) != len(shape):
            raise UserError(f"inputs {text!r}: input {vi.name!r} has rank {len(dims)} "
                            f"({_shape_text(dims)}), the shape given has rank {len(shape)}",
                            arguments="inputs")
        elem = vi.type.tensor_type.elem_type
        if dtype and dtype_name(elem) != _ALIASES.get(dtype, dtype):
            raise UserError(f"inputs {text!r}: input {vi.name!r} is {dtype_name(elem)} in the "
                            "model; leave the dtype out or give that one", arguments="inputs")
        _set_dims(vi, shape)
    if batch_size is not None:
        batch_size = values.positive_int(batch_size, "batch_size")
        for vi in real:
            dims = _dims(vi)
            if dims:
                if all(isinstance(d, int) and d > 0 for d in dims[1:]):
                    values.check_shape((batch_size, *dims[1:]), "batch_size")
                vi.type.tensor_type.shape.dim[0].Clear()
                vi.type.tensor_type.shape.dim[0].dim_value = batch_size
    for vi in real:
        dims = _dims(vi)
        if dims is None:
            raise UserError(f"{path}: input {vi.name!r} has no shape in the model; give one with "
                            f"inputs {vi.name}=SHAPE", arguments="inputs")
        if any(isinstance(d, int) and d < 0 for d in dims):
            example = "x".join(str(d) if isinstance(d, int) and d >= 0 else "1" for d in dims)
            raise UserError(f"{path}: input {vi.name!r} has a negative dimension (shape "
                            f"{_shape_text(dims)}); give its shape with inputs "
                            f"{vi.name}={example}", arguments="inputs")
        unbound = [d for d in dims if not isinstance(d, int)]
        if unbound:
            example = "x".join(str(d) if isinstance(d, int) else "1" for d in dims)
            which = ("an unnamed dimension" if unbound[0] == "?"
                     else f"symbolic dimension {unbound[0]!r}")
            raise UserError(f"{path}: input {vi.name!r} has {which} "
                            f"(shape {_shape_text(dims)}); bind it with inputs "
                            f"{vi.name}={example}", arguments="inputs")


# ---------------------------------------------------------------- graph walk preparation
def _subgraph_captures(node: Any) -> list[str]:
    """Outer-scope names a node's subgraphs (If/Loop/Scan bodies) read: implicit inputs."""
    import onnx

    captured: list[str] = []

    def visit(graph: Any, outer_defined: set[str]) -> None:
        defined = set(outer_defined) | {i.name for i in graph.input} | {
            t.name for t in graph.initializer}
        for n in graph.node:
            for name in n.input:
                if name and name not in defined and name not in captured:
                    captured.append(name)
            for attr in n.attribute:
                for g in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else
                          list(attr.graphs) if attr.type == onnx.AttributeProto.GRAPHS else []):
                    visit(g, defined)
            defined.update(o for o in n.output if o)

    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            visit(attr.g, set())
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for g in attr.graphs:
                visit(g, set())
    return captured


def topological_order(nodes: Sequence[Any], available: set[str],
                      captures: dict[int, list[str]], path: str) -> list[int]:
    """Kahn's algorithm, keeping the file's order among ready nodes (ONNX files are already
    sorted; this only guards against files that are not)."""
    import heapq

    producer = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            if o:
                producer[o] = i
    deps = []
    users: dict[int, list[int]] = {}
    for i, n in enumerate(nodes):
        need = {producer[x] for x in list(n.input) + captures.get(i, [])
                if x and x not in available and x in producer}
        deps.append(len(need))
        for p in need:
            users.setdefault(p, []).append(i)
    ready = [i for i, d in enumerate(deps) if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users.get(i, []):
            deps[u] -= 1
            if deps[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        raise UserError(f"{path}: the graph has a cycle; it is not a valid ONNX model")
    return order


def _tensor_infos(model: Any) -> dict[str, TensorInfo]:
    infos: dict[str, TensorInfo] = {}
    graph = model.graph
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        if not vi.type.HasField("tensor_type"):
            continue
        dims = _dims(vi)
        known = dims is not None and all(isinstance(d, int) for d in dims)
        infos[vi.name] = TensorInfo(tuple(dims) if known and dims is not None else None,
                                    vi.type.tensor_type.elem_type)
    for t in graph.initializer:
        infos[t.name] = TensorInfo(tuple(t.dims), t.data_type)
    return infos


def _check_no_negative_dims(tensors: dict[str, TensorInfo], path: str) -> None:
    """A negative dimension (declared in value_info, an output or an initializer) would give
    negative sizes and counts: the model is malformed."""
    for name, info in tensors.items():
        if info.shape is not None and any(d < 0 for d in info.shape):
            raise UserError(f"{path}: tensor {name!r} has a negative dimension (shape "
                            f"{_shape_text(info.shape)}); the model is malformed")


def _constant_info(node: Any) -> TensorInfo | None:
    """Shape and type of a Constant node's value, from its attribute."""
    for attr in node.attribute:
        if attr.name == "value":
            return TensorInfo(tuple(attr.t.dims), attr.t.data_type)
        if attr.name == "sparse_value":
            return TensorInfo(tuple(attr.sparse_tensor.dims), attr.sparse_tensor.values.data_type)
        scalars = {"value_float": (1, ()), "value_int": (7, ()), "value_string": (8, ())}
        if attr.name in scalars:
            return TensorInfo(scalars[attr.name][1], scalars[attr.name][0])
        lists = {"value_floats": (1, len(attr.floats)), "value_ints": (7, len(attr.ints)),
                 "value_strings": (8, len(attr.strings))}
        if attr.name in lists:
            return TensorInfo((lists[attr.name][1],), lists[attr.name][0])
    return None


def _unknown_outputs(graph: Any, tensors: dict[str, TensorInfo]) -> set[str]:
    """Node outputs whose shape is not fully known."""
    return {o for n in graph.node for o in n.output
            if o and (o not in tensors or tensors[o].shape is None)}


def _symbolic_shape_inference() -> Any:
    """onnxruntime's ``SymbolicShapeInference`` class, or None without onnxruntime. Its module
    is loaded from its file: importing it as ``onnxruntime.tools.symbolic_shape_infer`` runs
    ``onnxruntime/tools/__init__.py``, which imports torch when installed (seconds, and the ONNX
    path never needs torch); the module itself imports only onnx, numpy, sympy and packaging."""
    import importlib.util
    import logging
    import sys

    name = "layerscope_ort_symbolic_shape_infer"
    if name not in sys.modules:
        try:
            ort = importlib.util.find_spec("onnxruntime")
        except (ImportError, ValueError):
            ort = None
        file = (os.path.join(os.path.dirname(ort.origin), "tools", "symbolic_shape_infer.py")
                if ort is not None and ort.origin else None)
        if file is None or not os.path.isfile(file):
            return None
        spec = importlib.util.spec_from_file_location(name, file)
        if spec is None or spec.loader is None:
            return None
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except ImportError:  # sympy or packaging missing
            return None
        sys.modules[name] = module
        logging.getLogger(name).setLevel(logging.CRITICAL)  # its warnings are not the user's
    return getattr(sys.modules[name], "SymbolicShapeInference", None)


def _fill_symbolic_shapes(model: Any, tensors: dict[str, TensorInfo], unknown: set[str]) -> None:
    """Shapes onnx's inference left unknown, from onnxruntime's symbolic shape inference, which
    also folds shape computations (Shape -> Gather -> Unsqueeze -> Concat -> Slice/Reshape, the
    position ids and attention masks of models from the legacy TorchScript exporter) given the
    bound input shapes. Only fully known shapes are taken; when it fails the shapes stay unknown
    and those nodes are reported as uncounted."""
    ssi = _symbolic_shape_inference()
    if ssi is None or not any(o.domain in DEFAULT_DOMAINS and o.version >= 7
                              for o in model.opset_import):
        return
    # SymbolicShapeInference.infer_shapes's own loop, without its last step: where some shapes
    # stay unknown it saves the model as sym_shape_infer_temp.onnx in the working directory and
    # raises; here the shapes it did infer are taken.
    try:
        inference = ssi(2**31 - 1, False, False, 0)  # int_max, auto_merge, guess_output_rank
        inference._preprocess(model)
        while inference.run_:
            inference._infer_impl()
        inference._update_output_from_vi()
        out = inference.out_mp_
    except Exception:  # noqa: BLE001 - any failure of the fallback leaves the shapes unknown
        return
    for vi in list(out.graph.value_info) + list(out.graph.output):
        if vi.name not in unknown or not vi.type.HasField("tensor_type"):
            continue
        dims = _dims(vi)
        if dims is not None and all(isinstance(d, int) and d >= 0 for d in dims):
            tensors[vi.name] = TensorInfo(tuple(dims), vi.type.tensor_type.elem_type)


def load_onnx(path: str, inputs: Sequence[str] | None = None,
              batch_size: int | None = None) -> OnnxGraph:
    """Load ``path`` without its weights, validate it, bind ``inputs`` ('NAME=1x3x224x224') and
    infer every tensor's shape."""
    import onnx

    model = _read_model(path)
    opsets = _opsets(model, path)
    _check_domains(model, opsets, path)
    _check_external_data(model, path)
    _check(model, drop_weight_values(model), path)
    bind_inputs(model, inputs or [], batch_size, path)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True,
                                                     data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError) as exc:
        init = {t.name for t in model.graph.initializer}
        shapes = ", ".join(f"{vi.name}={_shape_text(_dims(vi) or [])}"
                           for vi in model.graph.input if vi.name not in init)
        raise UserError(f"{path}: shape inference failed for inputs {shapes}: "
                        f"{first_line(exc)}") from exc
    graph = inferred.graph
    tensors = _tensor_infos(inferred)
    unknown = _unknown_outputs(graph, tensors)
    if unknown:
        _fill_symbolic_shapes(model, tensors, unknown)
    resident = {t.name for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS and node.output:
            info = _constant_info(node)
            if info is not None:
                tensors[node.output[0]] = info
            resident.add(node.output[0])
    _check_no_negative_dims(tensors, path)
    captures = {i: c for i, n in enumerate(graph.node) if (c := _subgraph_captures(n))}
    real_inputs = [vi.name for vi in graph.input if vi.name not in resident]
    order = topological_order(graph.node, set(real_inputs) | resident, captures, path)
    nodes = [graph.node[i] for i in order]
    implicit = {new: captures[old] for new, old in enumerate(order) if old in captures}
    return OnnxGraph(path=path, name=os.path.basename(path), model=inferred, opsets=opsets,
                     nodes=nodes, tensors=tensors, initializers=resident, inputs=real_inputs,
                     outputs=[o.name for o in graph.output], implicit_inputs=implicit)
