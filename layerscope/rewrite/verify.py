"""verify: run two models on the same seeded random inputs and measure how far apart they are.

A and B are ONNX files (run with onnxruntime), or A is a layerscope model spec (``alexnet``,
``file.py:factory``, ``pkg.mod:factory``, a TorchScript file; run in PyTorch, eval mode, no_grad)
and B an ONNX file. Built-in models and factories are built under ``seed`` like in every other
command (``frontends.zoo.seeded``), so ``layerscope export NAME`` then ``layerscope verify NAME``
agree, and ``alexnet`` matches an ONNX export of
``torch.manual_seed(0); torchvision.models.alexnet(weights=None)``.

Inputs: shapes and element types come from the ONNX graph inputs; a symbolic dimension takes the
PyTorch spec's default input size at that position (or the other file's fixed size, or 1).
Floating-point inputs are standard normal from ``numpy.random.default_rng(seed)`` (a new draw per
run), integer and boolean inputs are zeros (always valid indices).

Errors, per output over all runs (``a`` is the reference, A's output; ``b`` is B's), in float64:

- ``max_abs_error`` = max |a - b|
- ``mse`` = mean (a - b)^2
- ``max_rel_error`` = max |a - b| / max |a|: the largest error relative to the scale of the
  reference output (an elementwise |a - b| / |a| explodes where a is near 0, e.g. logits);
  0 when both are all zero, inf when only a is.
- ``ok`` when max |a - b| <= atol + rtol * max |a| (with atol = 0: max_rel_error <= rtol).
Positions where both are NaN (or the same infinity) agree; a NaN on one side only is an infinite
error. Overall: the largest max_abs_error and max_rel_error over outputs, the MSE over all output
elements, and ``ok`` when every output is.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from layerscope.analysis.ort_profile import graph_level
from layerscope.core.callable_module import make_callable
from layerscope.core.errors import UserError, first_line
from layerscope.core.limits import check_input_bytes
from layerscope.frontends.detect import is_onnx_path
from layerscope.frontends.onnx_model import check_onnx_file
from layerscope.rewrite.onnx_io import require_onnxruntime
from layerscope.rewrite.settings import VerifySettings, of_call

_ORT_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64,
              "tensor(float16)": np.float16, "tensor(int64)": np.int64,
              "tensor(int32)": np.int32, "tensor(int16)": np.int16, "tensor(int8)": np.int8,
              "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16,
              "tensor(uint32)": np.uint32, "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_}


@dataclass
class OutputError:
    name: str
    shape: list[int]
    max_abs_error: float
    mse: float
    max_rel_error: float
    ref_max_abs: float  # max |a|: the scale max_rel_error is relative to
    ok: bool


@dataclass
class VerifyResult:
    a: str
    b: str
    a_kind: str  # "onnx" or "torch"
    runs: int
    seed: int
    rtol: float
    atol: float
    optimization: str
    inputs: list[dict[str, Any]]  # name, shape, dtype
    outputs: list[OutputError]
    max_abs_error: float
    mse: float
    max_rel_error: float
    ok: bool
    seconds: dict[str, float] = field(default_factory=dict)  # load_a, load_b, run_a, run_b

    def to_dict(self) -> dict[str, Any]:
        return _json_safe(asdict(self))


def verify(a: Any = None, b: str | None = None, *, settings: VerifySettings | None = None,
           **overrides: Any) -> VerifyResult:
    """Compare A and B on ``runs`` seeded random inputs; see the module docstring.
    ``settings``: a ``VerifySettings`` (``rewrite.settings``); keyword arguments
    override its fields (``runs``, ``rtol``, ``atol``, ``seed``, ``optimization``).

    ``a``: an ONNX path, a model spec or an ``nn.Module`` (its train/eval flag is restored).

    ``optimization``: onnxruntime's graph optimisation level (``core.values.ORT_LEVELS``;
    "disable" is accepted for "disabled"). The default, "disabled", runs each
    graph as written (what is being verified) and creates sessions of big tiled graphs far
    faster (alexnet tiled by 64, 14,506 nodes: ~6 s against ~90 s at "all").
    """
    s = of_call(settings, a, b, overrides)
    a, b, runs, seed, optimization = s.a, s.b, s.runs, s.seed, s.optimization
    seconds = {}
    t0 = time.perf_counter()
    runner_a = (_OnnxRunner(a, optimization) if is_onnx_path(a) else _TorchRunner(a, seed))
    seconds["load_a"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    runner_b = _OnnxRunner(b, optimization)
    seconds["load_b"] = time.perf_counter() - t0
    inputs, a_order = _resolve_inputs(runner_a, runner_b)
    if len(runner_a.output_names) not in (0, len(runner_b.output_names)):
        raise UserError(f"{a} has {len(runner_a.output_names)} outputs, {b} has "
                        f"{len(runner_b.output_names)}: they cannot be compared")

    check_input_bytes(f"verify {runner_a.path} {b}",
                      [(shape, np.dtype(dtype).itemsize) for _, shape, dtype in inputs])
    rng = np.random.default_rng(seed)
    acc = None
    seconds["run_a"] = seconds["run_b"] = 0.0
    for _ in range(runs):
        arrays = [_random_input(shape, dtype, rng) for _, shape, dtype in inputs]
        t0 = time.perf_counter()
        ya = runner_a.run([arrays[i] for i in a_order])
        seconds["run_a"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        yb = runner_b.run(arrays)
        seconds["run_b"] += time.perf_counter() - t0
        if len(ya) != len(yb):
            raise UserError(f"{a} gives {len(ya)} outputs, {b} gives {len(yb)}: they cannot be "
                            "compared")
        if acc is None:
            acc = [_Accumulator() for _ in yb]
        for i, (x, y) in enumerate(zip(ya, yb)):
            if tuple(x.shape) != tuple(y.shape):
                raise UserError(f"output {runner_b.output_names[i]}: {a} gives shape "
                                f"{_shape(x.shape)}, {b} gives {_shape(y.shape)}")
            acc[i].add(x, y)

    rtol, atol = s.rtol, s.atol
    outputs = [acc_i.result(name, rtol, atol)
               for name, acc_i in zip(runner_b.output_names, acc)]
    total = sum(x.count for x in acc)
    return VerifyResult(
        a=runner_a.path, b=str(b), a_kind=runner_a.kind, runs=runs, seed=seed, rtol=rtol, atol=atol,
        optimization=optimization,
        inputs=[{"name": n, "shape": list(s), "dtype": np.dtype(d).name} for n, s, d in inputs],
        outputs=outputs,
        max_abs_error=max((o.max_abs_error for o in outputs), default=0.0),
        mse=sum(x.sq for x in acc) / total if total else 0.0,
        max_rel_error=max((o.max_rel_error for o in outputs), default=0.0),
        ok=all(o.ok for o in outputs), seconds=seconds)


# --- errors ---------------------------------------------------------------------------------

class _Accumulator:
    def __init__(self):
        self.max_abs, self.sq, self.count, self.ref_max, self.shape = 0.0, 0.0, 0, 0.0, []

    def add(self, a: np.ndarray, b: np.ndarray) -> None:
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        self.shape = list(a.shape)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(a - b)
            diff[(a == b) | (np.isnan(a) & np.isnan(b))] = 0.0
            diff[np.isnan(diff)] = np.inf
            if diff.size:
                self.max_abs = max(self.max_abs, float(diff.max()))
                self.sq += float(np.square(diff).sum())
            finite = np.abs(a[np.isfinite(a)])
        self.count += diff.size
        if finite.size:
            self.ref_max = max(self.ref_max, float(finite.max()))

    def result(self, name, rtol, atol) -> OutputError:
        if self.ref_max > 0:
            rel = self.max_abs / self.ref_max
        else:
            rel = 0.0 if self.max_abs == 0 else math.inf
        mse = self.sq / self.count if self.count else 0.0
        return OutputError(name, self.shape, self.max_abs, mse, rel, self.ref_max,
                           self.max_abs <= atol + rtol * self.ref_max)


# --- inputs ---------------------------------------------------------------------------------

def _resolve_inputs(runner_a, runner_b):
    """B's inputs with concrete shapes, and for each of A's inputs the index of B's it takes."""
    b_in = runner_b.inputs
    if runner_a.kind == "onnx":
        a_in = runner_a.inputs
        if len(a_in) != len(b_in):
            raise UserError(f"{runner_a.path} has {len(a_in)} inputs, {runner_b.path} has "
                            f"{len(b_in)}: they cannot be compared")
        b_names = [n for n, _, _ in b_in]
        if sorted(n for n, _, _ in a_in) == sorted(b_names):
            a_order = [b_names.index(n) for n, _, _ in a_in]
        else:
            a_order = list(range(len(a_in)))
        resolved = []
        for j, (name, dims_b, dtype_b) in enumerate(b_in):
            _, dims_a, dtype_a = a_in[a_order.index(j)]
            if dtype_a != dtype_b or len(dims_a) != len(dims_b) or any(
                    isinstance(x, int) and isinstance(y, int) and x != y
                    for x, y in zip(dims_a, dims_b)):
                raise UserError(f"input {name}: {runner_a.path} takes {_type(dims_a, dtype_a)}, "
                                f"{runner_b.path} takes {_type(dims_b, dtype_b)}")
            shape = [y if isinstance(y, int) else x if isinstance(x, int) else 1
                     for x, y in zip(dims_a, dims_b)]
            resolved.append((name, tuple(shape), dtype_b))
        return resolved, a_order
    defaults = runner_a.default_shapes
    if defaults and len(defaults) != len(b_in):
        raise UserError(f"{runner_a.spec} takes {len(defaults)} inputs by default, "
                        f"{runner_b.path} has {len(b_in)}: they cannot be compared")
    resolved = []
    for i, (name, dims, dtype) in enumerate(b_in):
        default = defaults[i] if defaults and len(defaults[i]) == len(dims) else None
        shape = [d if isinstance(d, int) else (default[j] if default else 1)
                 for j, d in enumerate(dims)]
        resolved.append((name, tuple(shape), dtype))
    return resolved, list(range(len(b_in)))


def _random_input(shape, dtype, rng) -> np.ndarray:
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    return np.zeros(shape, dtype=dtype)


def _shape(dims) -> str:
    return "x".join(str(d) for d in dims) or "scalar"


def _type(dims, dtype) -> str:
    return f"{_shape(d if isinstance(d, int) else '?' for d in dims)} {np.dtype(dtype).name}"


def _json_safe(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


# --- runners --------------------------------------------------------------------------------

class _OnnxRunner:
    kind = "onnx"

    def __init__(self, path: str, optimization: str):
        ort = require_onnxruntime()
        self.path = str(path)
        check_onnx_file(self.path)
        options = ort.SessionOptions()
        options.graph_optimization_level = graph_level(optimization)
        options.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(self.path, options,
                                                providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise UserError(f"{self.path}: onnxruntime cannot load it as an ONNX model "
                            f"({first_line(exc)})") from exc
        self.inputs = []
        for i in self.session.get_inputs():
            if i.type not in _ORT_TYPES:
                raise UserError(f"{self.path}: input {i.name} has type {i.type}, which verify "
                                "cannot generate (tensors of numbers or booleans only)")
            # a fixed 0 is an empty tensor (legal ONNX); None and names are symbolic
            dims = [d if isinstance(d, int) and d >= 0 else None for d in (i.shape or [])]
            self.inputs.append((i.name, dims, np.dtype(_ORT_TYPES[i.type])))
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, arrays):
        feed = {name: x for (name, _, _), x in zip(self.inputs, arrays)}
        try:
            return [np.asarray(y) for y in self.session.run(None, feed)]
        except Exception as exc:
            raise UserError(f"{self.path} failed on inputs "
                            f"{', '.join(_shape(x.shape) for x in arrays)}: "
                            f"{first_line(exc)}") from exc


class _TorchRunner:
    kind = "torch"
    output_names: list[str] = []

    def __init__(self, spec: str, seed: int = 0):
        from layerscope.frontends.torch_module import resolve

        self.spec = self.path = spec if isinstance(spec, str) else type(spec).__name__
        loaded = resolve(spec, seed=seed)
        self.module = loaded.module
        self.default_shapes = [tuple(x.shape) for x in loaded.inputs]

    def run(self, arrays):
        import torch

        from layerscope.analysis import modes

        flags = modes.set_mode(self.module, False)
        try:
            with torch.no_grad():
                out = self.module(*[torch.from_numpy(np.ascontiguousarray(x)) for x in arrays])
        except Exception as exc:
            raise UserError(f"{self.spec} rejected inputs "
                            f"{', '.join(_shape(x.shape) for x in arrays)}: "
                            f"{type(exc).__name__}: {first_line(exc)}") from exc
        finally:
            modes.restore(flags)
        return [t for t in _flatten(out)]


def _flatten(out) -> list[np.ndarray]:
    import torch

    if isinstance(out, torch.Tensor):
        return [out.detach().cpu().float().numpy() if out.dtype == torch.bfloat16
                else out.detach().cpu().numpy()]
    if isinstance(out, dict):
        return [y for v in out.values() for y in _flatten(v)]
    if isinstance(out, (list, tuple)):
        return [y for v in out for y in _flatten(v)]
    if out is None:
        return []
    return [np.asarray(out)]


make_callable(__name__, "layerscope.rewrite.verify:verify")  # see core/callable_module.py
