"""Model specs for PyTorch: built-in names, ``file.py:factory``, ``pkg.module:factory`` and
TorchScript files saved with ``torch.jit.save``."""
from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
import warnings
import zipfile
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from layerscope.analysis.static_torch import InputSpec
from layerscope.errors import UserError
from layerscope.frontends import zoo

TORCHSCRIPT_SUFFIXES = (".pt", ".ts", ".pth", ".jit")
_DTYPES = {"float32": torch.float32, "float": torch.float32, "float16": torch.float16,
           "half": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
           "int64": torch.int64, "long": torch.int64, "int32": torch.int32, "int": torch.int32,
           "uint8": torch.uint8, "bool": torch.bool}


@dataclass
class LoadedModel:
    """A runnable PyTorch model plus the inputs it is analysed with by default."""

    module: nn.Module
    inputs: list[Any]  # forward's positional arguments: tensors, InputSpec (batch first), values
    name: str
    frontend: str  # "torch" or "torchscript"
    extras: dict[str, Any] = field(default_factory=dict)
    kwargs: dict[str, Any] = field(default_factory=dict)  # forward's keyword arguments


def parse_dtype(text: str) -> torch.dtype:
    try:
        return _DTYPES[text.strip().lower()]
    except KeyError:
        raise UserError(f"unknown dtype {text!r}: use one of {', '.join(sorted(_DTYPES))}") from None


def parse_input(text: str) -> tuple[str | None, InputSpec]:
    """'1x3x224x224', '1x3x224x224:float16' or 'mask=1x128:bool' -> (keyword name or None, spec)."""
    from layerscope.analysis.inputs import check_dims

    name, eq, rest = text.partition("=")
    if not eq:
        name, rest = None, text
    elif not name.strip().isidentifier():
        raise UserError(f"malformed --input {text!r}: a keyword input is NAME=SHAPE, e.g. "
                        "attention_mask=1x128:int64")
    shape_text, _, dtype_text = rest.partition(":")
    if not re.fullmatch(r"-?\d+(x-?\d+)*", shape_text.strip()):
        raise UserError(
            f"malformed --input {text!r}: write the shape as dimensions joined by 'x', "
            "optionally with a dtype, e.g. 1x3x224x224 or 1x128:int64 (NAME=SHAPE for a keyword "
            "argument)")
    shape = check_dims((int(d) for d in shape_text.strip().split("x")), f"--input {text!r}")
    spec = InputSpec(shape, parse_dtype(dtype_text) if dtype_text else torch.float32)
    return (name.strip() if name else None), spec


def with_batch_size(inputs: list[Any], batch_size: int) -> list[Any]:
    """Replace the first dimension of every input by ``batch_size``."""
    if batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {batch_size}")
    return [_batched(x, batch_size) for x in inputs]


def kwargs_with_batch_size(kwargs: dict[str, Any], batch_size: int) -> dict[str, Any]:
    return {k: _batched(x, batch_size) for k, x in kwargs.items()}


def _batched(x: Any, batch_size: int) -> Any:
    if isinstance(x, InputSpec):
        return InputSpec((batch_size,) + tuple(x.shape[1:]), x.dtype)
    if isinstance(x, torch.Tensor) and x.dim() > 0:
        reps = (batch_size + x.shape[0] - 1) // x.shape[0]
        return x.repeat(reps, *([1] * (x.dim() - 1)))[:batch_size]
    return x


def _from_factory(result: Any, spec: str) -> tuple[nn.Module, list[Any], dict[str, Any]]:
    """A factory returns a module, ``(module, args)`` or ``(module, args, kwargs)``.

    ``args``: a tensor, a shape, a tuple of forward's arguments or one other value (an int is one
    argument); a dict is keyword arguments (as in ``model(**tokenizer(text))``)."""
    from layerscope.analysis.inputs import split_inputs

    if not (isinstance(result, tuple) and result and isinstance(result[0], nn.Module)):
        if isinstance(result, nn.Module):
            return result, [], {}
        raise UserError(f"{spec}: the factory returned {type(result).__name__}, not a "
                        "torch.nn.Module, (module, args) or (module, args, kwargs)")
    if len(result) not in (2, 3):
        raise UserError(f"{spec}: the factory returned a tuple of {len(result)} items; return "
                        "(module, args) or (module, args, kwargs)")
    args, kwargs = result[1], (result[2] if len(result) == 3 else None)
    if isinstance(args, dict) and kwargs is None:
        args, kwargs = None, args
    value = args is not None and not isinstance(args, (tuple, list, torch.Tensor, InputSpec))
    if kwargs is not None and not isinstance(kwargs, dict):
        raise UserError(f"{spec}: the factory's keyword inputs (third item) must be a dict, got "
                        f"{type(kwargs).__name__}")
    try:
        args, kwargs = split_inputs(None if value else args, kwargs)
    except UserError as exc:
        raise UserError(f"{spec}: the factory's example inputs: {exc}") from None
    return result[0], [result[1]] if value else args, kwargs


def _load_python_attr(spec: str) -> Any:
    target, _, attr = spec.rpartition(":")
    if target.endswith(".py"):
        if not os.path.isfile(target):
            raise UserError(f"{spec}: no such file {target!r}")
        mod_name = f"_layerscope_user_{abs(hash(os.path.abspath(target)))}"
        loader_spec = importlib.util.spec_from_file_location(mod_name, target)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[mod_name] = module
        try:
            loader_spec.loader.exec_module(module)
        except Exception as exc:
            raise UserError(f"{spec}: importing {target} failed: {type(exc).__name__}: {exc}") from exc
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise UserError(f"{spec}: cannot import module {target!r} ({exc}); "
                            "check the name and PYTHONPATH") from exc
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UserError(f"{spec}: {target!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _looks_like_zip(path: str) -> bool:
    return zipfile.is_zipfile(path)


def load_torchscript(path: str) -> nn.Module:
    if os.path.isdir(path):
        raise UserError(f"{path} is a directory, not a TorchScript file")
    if os.path.getsize(path) == 0:
        raise UserError(f"{path} is empty: expected a TorchScript file saved with torch.jit.save")
    if not _looks_like_zip(path):
        raise UserError(f"{path} is not a TorchScript file (not a torch.jit.save archive); "
                        "save the model with torch.jit.save or pass a factory as file.py:function")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return torch.jit.load(path, map_location="cpu")
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{path} could not be loaded as TorchScript: {first}") from exc


def resolve(spec: str | nn.Module, *, meta: bool = False) -> LoadedModel:
    """Turn a model spec into a module and its default inputs.

    ``meta=True`` builds built-in models on the meta device: no weight memory, no init time
    (enough for static analysis, which never reads values).
    """
    if isinstance(spec, nn.Module):
        return LoadedModel(spec, [], type(spec).__name__, _frontend_of(spec))
    if not isinstance(spec, str) or not spec.strip():
        raise UserError("no model given: name a built-in model (e.g. resnet50), a file.py:factory, "
                        "a package.module:factory or a TorchScript file")
    entry = zoo.lookup(spec)
    if entry is not None:
        if meta:
            with torch.device("meta"):
                module = entry.build()
        else:
            module = entry.build()
        return LoadedModel(module, [InputSpec((1,) + entry.input_shape)], spec, "torch",
                           {"source": entry.source})
    if os.path.exists(spec):
        if spec.endswith(".onnx"):
            raise UserError(f"{spec}: this command needs a PyTorch model; ONNX models are "
                            "analysed with 'layerscope analyze MODEL.onnx'")
        return LoadedModel(load_torchscript(spec), [], os.path.basename(spec), "torchscript")
    if ":" in spec:
        module, args, kwargs = _from_factory(_call_factory(spec), spec)
        return LoadedModel(module, args, spec, _frontend_of(module), kwargs=kwargs)
    if spec.endswith(TORCHSCRIPT_SUFFIXES):
        raise UserError(f"{spec}: no such file")
    close = zoo.suggestions(spec)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise UserError(f"unknown model {spec!r}.{hint} Run 'layerscope models' for the built-in names, "
                    "or pass file.py:factory, package.module:factory or a TorchScript file.")


def _call_factory(spec: str) -> Any:
    factory = _load_python_attr(spec)
    if isinstance(factory, nn.Module):
        return factory
    if not callable(factory):
        raise UserError(f"{spec}: {type(factory).__name__} is not callable")
    try:
        return factory()
    except Exception as exc:
        raise UserError(f"{spec}: the factory raised {type(exc).__name__}: {exc}") from exc


def _frontend_of(module: nn.Module) -> str:
    return "torchscript" if isinstance(module, torch.jit.ScriptModule) else "torch"
