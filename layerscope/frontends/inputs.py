"""Forward's arguments: normalising what the user gave, describing it, and real tensors for runs
that execute the model (profiling, activations, sweeps).

What the user gives (API ``inputs=`` / ``kwargs=``, a factory's example inputs, CLI ``--input``):
- a tensor, an ``InputSpec``, a shape (a tuple of ints, ``torch.Size``) or a shape string
  (``'1x3x224x224'``, ``'1x128:int64'``; ``'NAME=SHAPE[:DTYPE]'`` binds a keyword argument);
  as one of forward's arguments, the empty shape (``()``, ``[]``, ``torch.Size([])``, the text
  ``'scalar'``) is a 0-d tensor, as in torchinfo's ``input_size=[[1, 10], []]``;
- any other Python value (int, float, None, a string that does not start with a digit, a list
  or dict holding tensors, ...) is passed to forward as it is.
Errors describe inputs by shape and dtype only, never by value (a tensor can be huge)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import torch

from layerscope.core import values
from layerscope.core.errors import UserError
from layerscope.core.limits import check_input_bytes

_DTYPES = {"float32": torch.float32, "float": torch.float32, "float16": torch.float16,
           "half": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
           "int64": torch.int64, "long": torch.int64, "int32": torch.int32, "int": torch.int32,
           "uint8": torch.uint8, "bool": torch.bool}


@dataclass
class InputSpec:
    """An input given by shape and dtype only: analyses build fake (or zero) tensors from it."""

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=self.dtype).element_size()


def parse_dtype(text: str) -> torch.dtype:
    try:
        return _DTYPES[text.strip().lower()]
    except KeyError:
        raise UserError(f"unknown dtype {text!r}: use one of "
                        f"{', '.join(sorted(_DTYPES))}") from None


def parse_input(text: str) -> tuple[str | None, InputSpec]:
    """'1x3x224x224', '1x3x224x224:float16' or 'mask=1x128:bool' -> (keyword name or None, spec)."""
    head, eq, rest = str(text).partition("=")
    name: str | None = head.strip() if eq else None
    if not eq:
        rest = str(text)
    elif not head.strip().isidentifier():
        raise UserError(f"malformed inputs {text!r}: a keyword input is NAME=SHAPE, e.g. "
                        "attention_mask=1x128:int64", arguments="inputs")
    dims, dtype_text = values.shape(rest, "inputs")
    dtype = parse_dtype(dtype_text) if dtype_text else torch.float32
    spec = InputSpec(values.check_shape(dims, "inputs", itemsize=dtype.itemsize), dtype)
    return name, spec


def check_dims(shape: Any, what: str) -> tuple[int, ...]:
    """``shape`` as a tuple of positive ints within int64 (the shared parser,
    ``core.values.check_shape``; ``()`` is a 0-d tensor's), or one UserError line naming
    ``what``."""
    return values.check_shape(tuple(shape), what)


def _is_shape(x: Any, empty: bool = False) -> bool:
    """A sequence of ints; the empty one (a 0-d tensor's shape) only where ``empty``."""
    return (isinstance(x, (tuple, list, torch.Size)) and (empty or len(x) > 0)
            and all(isinstance(d, int) and not isinstance(d, bool) for d in x))


_SHAPE_TEXT_START = re.compile(rf"\s*(-?\d|{values.SCALAR}\s*(:|$)|[A-Za-z_]\w*\s*=)", re.I)


def _looks_like_shape_text(x: Any) -> bool:
    return isinstance(x, str) and bool(_SHAPE_TEXT_START.match(x))


def _item(x: Any, what: str) -> Any:
    if isinstance(x, InputSpec):
        return InputSpec(check_dims(x.shape, what), x.dtype)
    if _is_shape(x, empty=True):  # as one argument, () is a 0-d tensor's shape
        return InputSpec(check_dims(x, what))
    return x  # a tensor, or a value forward takes as it is


def split_inputs(inputs: Any = None, kwargs: dict[str, Any] | None = None,
                 ) -> tuple[list[Any], dict[str, Any]]:
    """(positional arguments, keyword arguments) with shapes turned into ``InputSpec``."""
    if kwargs is not None and not isinstance(kwargs, dict):
        raise UserError(f"kwargs must be a dict of keyword arguments, got {type(kwargs).__name__}")
    if isinstance(inputs, dict):
        raise UserError("inputs is a dict: pass keyword arguments as kwargs={...}, or a dict that "
                        "forward takes as one argument as inputs=(the_dict,)")
    if inputs is None:
        items = []
    elif isinstance(inputs, (torch.Tensor, InputSpec, str)) or _is_shape(inputs):
        items = [inputs]
    elif isinstance(inputs, (tuple, list)):
        items = list(inputs)
    else:
        raise UserError(f"inputs={type(inputs).__name__} is ambiguous: give a shape as a tuple "
                        "(e.g. (1, 16)) or forward's arguments as a tuple (e.g. (x, 5))")
    args: list[Any] = []
    named: dict[str, Any] = {}
    for i, x in enumerate(items):
        if _looks_like_shape_text(x):
            name, spec = parse_input(x)
            if name is None:
                args.append(spec)
            else:
                named[name] = spec
        else:
            args.append(_item(x, f"input {i + 1}"))
    for name, x in (kwargs or {}).items():
        if not isinstance(name, str) or not name.isidentifier():
            raise UserError(f"kwargs: {name!r} is not a keyword argument name")
        named[name] = _item(x, f"input {name}")
    return args, named


def describe(x: Any, name: str | None = None) -> dict[str, Any]:
    """What a report says about one argument: shape and dtype, or the type of a plain value."""
    out: dict[str, Any] = {"name": name} if name else {}
    if isinstance(x, (torch.Tensor, InputSpec)):
        out |= {"shape": [int(d) for d in x.shape], "dtype": str(x.dtype).removeprefix("torch.")}
    else:
        out["type"] = type(x).__name__
    return out


def describe_all(args: list[Any], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
    return [describe(x) for x in args] + [describe(x, k) for k, x in kwargs.items()]


def call_text(args: list[Any], kwargs: dict[str, Any]) -> str:
    """'1x10 float32, mask=1x10 bool, int' — for error messages (never values)."""
    def one(d: dict[str, Any]) -> str:
        head = f"{d['name']}=" if "name" in d else ""
        if "shape" in d:
            return head + ("x".join(map(str, d["shape"])) or values.SCALAR) + (
                "" if d["dtype"] == "float32" else f" {d['dtype']}")
        return f"{head}{d['type']}"
    return ", ".join(one(d) for d in describe_all(args, kwargs)) or "no inputs"


def real_inputs(inputs: list[Any], device: str | torch.device = "cpu",
                dtype: torch.dtype | None = None, seed: int = 0) -> list[Any]:
    """Seeded standard-normal tensors for float specs, zeros for integer ones (valid indices);
    values that are not tensors pass through."""
    _check_size(inputs, dtype)
    gen = torch.Generator().manual_seed(seed)
    return [_real(x, device, dtype, gen) for x in inputs]


def real_kwargs(kwargs: dict[str, Any], device: str | torch.device = "cpu",
                dtype: torch.dtype | None = None, seed: int = 0) -> dict[str, Any]:
    _check_size(list(kwargs.values()), dtype)
    gen = torch.Generator().manual_seed(seed + 1)
    return {k: _real(x, device, dtype, gen) for k, x in kwargs.items()}


def _check_size(values: list[Any], dtype: torch.dtype | None) -> None:
    """The bound ONNX inputs have (``core.limits``), before a declared shape is allocated: an
    --input of 1x3x100000x100000 would need 120 GB."""
    specs = [x for x in values if isinstance(x, InputSpec)]
    check_input_bytes("inputs", [(x.shape, _element_size(x, dtype)) for x in specs],
                      "batch_size", arguments=("inputs", "batch_size"))


def _element_size(x: InputSpec, dtype: torch.dtype | None) -> int:
    real = dtype if (dtype is not None and x.dtype.is_floating_point) else x.dtype
    return torch.empty((), dtype=real).element_size()


def _real(x: Any, device: str | torch.device, dtype: torch.dtype | None,
          gen: torch.Generator) -> Any:
    if isinstance(x, InputSpec):
        if x.dtype.is_floating_point:
            t = torch.randn(x.shape, generator=gen).to(dtype or x.dtype)
        else:
            t = torch.zeros(x.shape, dtype=x.dtype)
    elif isinstance(x, torch.Tensor):
        t = x.detach()
        if dtype is not None and t.is_floating_point():
            t = t.to(dtype)
    else:
        return x
    return t.to(device)
