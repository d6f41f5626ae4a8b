"""Model specs for PyTorch: built-in names, ``file.py:factory``, ``pkg.module:factory``,
TorchScript files saved with ``torch.jit.save`` and ``layerscope train`` run folders or
checkpoints."""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import warnings
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from layerscope.core import values
from layerscope.core.errors import UserError, first_line
from layerscope.frontends import hf_config_keys, llm_configs, llm_models, run_files, zoo
from layerscope.frontends.detect import detect
from layerscope.frontends.inputs import InputSpec, split_inputs


@dataclass
class LoadedModel:
    """A runnable PyTorch model plus the inputs it is analysed with by default."""

    module: nn.Module
    inputs: list[Any]  # forward's positional arguments: tensors, InputSpec (batch first), values
    name: str
    frontend: str  # "torch" or "torchscript"
    extras: dict[str, Any] = field(default_factory=dict)
    kwargs: dict[str, Any] = field(default_factory=dict)  # forward's keyword arguments


def with_batch_size(inputs: list[Any], batch_size: int) -> list[Any]:
    """Replace the first dimension of every input by ``batch_size``."""
    batch_size = values.positive_int(batch_size, "batch_size")
    return [_batched(x, batch_size) for x in inputs]


def kwargs_with_batch_size(kwargs: dict[str, Any], batch_size: int) -> dict[str, Any]:
    return {k: _batched(x, batch_size) for k, x in kwargs.items()}


def _batched(x: Any, batch_size: int) -> Any:
    if isinstance(x, InputSpec) and x.shape:  # a 0-d input has no batch dimension
        return InputSpec(values.check_shape((batch_size,) + tuple(x.shape[1:]), "batch_size",
                                            itemsize=x.dtype.itemsize), x.dtype)
    if isinstance(x, torch.Tensor) and x.dim() > 0:
        values.check_shape((batch_size,) + tuple(x.shape[1:]), "batch_size",
                           itemsize=x.dtype.itemsize)
        reps = (batch_size + x.shape[0] - 1) // x.shape[0]
        return x.repeat(reps, *([1] * (x.dim() - 1)))[:batch_size]
    return x


def with_seq_len(inputs: list[Any], kwargs: dict[str, Any], seq_len: int, name: str,
                 max_position: int | None = None, table: str = "learned position table"
                 ) -> tuple[list[Any], dict[str, Any]]:
    """Set the sequence length: the second dimension of every 2-D input given by shape (token
    ids and attention masks, B x S). ``max_position``: the positions the model's ``table``
    holds (GPT-2's learned positions, MPT's ALiBi biases), which a longer sequence would index
    past."""
    seq_len = values.positive_int(seq_len, "seq_len")
    if max_position is not None and seq_len > max_position:
        raise UserError(f"{name}: seq_len {seq_len} is longer than the model's {table} "
                        f"({max_position} positions)", arguments="seq_len")

    def sequence(x: Any) -> bool:
        return isinstance(x, InputSpec) and len(x.shape) == 2

    def one(x: Any) -> Any:
        if sequence(x):
            return InputSpec(values.check_shape((x.shape[0], seq_len), "seq_len",
                                                itemsize=x.dtype.itemsize), x.dtype)
        return x

    # whether the model takes a B x S input at all, not whether the length changed: the
    # model's own default length is a valid --seq-len
    if not any(sequence(x) for x in [*inputs, *kwargs.values()]):
        raise UserError(f"{name}: seq_len sets the S of token-id tensors shaped B x S, and "
                        "this model takes none; give inputs instead",
                        arguments=("seq_len", "inputs"))
    return [one(x) for x in inputs], {k: one(x) for k, x in kwargs.items()}


def _from_factory(result: Any, spec: str) -> tuple[nn.Module, list[Any], dict[str, Any]]:
    """A factory returns a module, ``(module, args)`` or ``(module, args, kwargs)``.

    ``args``: a tensor, a shape, a tuple of forward's arguments or one other value (an int is one
    argument); a dict is keyword arguments (as in ``model(**tokenizer(text))``)."""
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
        if loader_spec is None or loader_spec.loader is None:  # a .py path always has one
            raise UserError(f"{spec}: {target} cannot be imported as a Python file")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[mod_name] = module
        try:
            loader_spec.loader.exec_module(module)
        except Exception as exc:
            raise UserError(f"{spec}: importing {target} failed: "
                            f"{first_line(exc, with_type=True)}") from exc
    else:
        module = _import_module(spec, target)
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UserError(f"{spec}: {target!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


@contextlib.contextmanager
def _cwd_first_on_path() -> Iterator[None]:
    """The current folder at the front of ``sys.path``, as ``python -m`` puts it, while a
    ``package.module:factory`` is imported and called; ``sys.path`` is restored afterwards."""
    saved = list(sys.path)
    sys.path.insert(0, os.getcwd())
    importlib.invalidate_caches()  # a package written since the finders last looked
    try:
        yield
    finally:
        sys.path[:] = saved


def _import_module(spec: str, target: str) -> Any:
    """Import ``target`` (a dotted module name); not found: say where it was looked for."""
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (target == missing or target.startswith(missing + ".")):
            cwd = os.getcwd()
            where = os.pathsep.join(p or "." for p in sys.path if p != cwd)
            raise UserError(
                f"{spec}: cannot import module {target!r}: no module named {missing!r} in the "
                f"current folder ({cwd}) or on sys.path ({where}); run layerscope from the "
                f"folder that holds {missing.split('.')[0]}/, or add that folder to "
                "PYTHONPATH") from exc
        raise UserError(f"{spec}: importing {target!r} failed: "
                        f"{first_line(exc, with_type=True)}") from exc
    except ImportError as exc:
        raise UserError(f"{spec}: cannot import module {target!r} ({first_line(exc)}); "
                        "check the name and PYTHONPATH") from exc
    except ValueError as exc:  # ':factory': an empty module name
        raise UserError(f"{spec}: cannot import module {target!r} ({first_line(exc)}); "
                        "give it as package.module:factory") from exc
    except Exception as exc:  # the module's own code raised while it was imported
        raise UserError(f"{spec}: importing {target!r} failed: "
                        f"{first_line(exc, with_type=True)}") from exc


def _looks_like_zip(path: str) -> bool:
    return zipfile.is_zipfile(path)


def load_torchscript(path: str) -> nn.Module:
    if os.path.isdir(path):
        raise UserError(f"{path} is a directory, not a TorchScript file")
    if os.path.getsize(path) == 0:
        raise UserError(f"{path} is empty: expected a TorchScript file saved with torch.jit.save")
    if not _looks_like_zip(path):
        raise UserError(f"{path} is neither a TorchScript file (torch.jit.save archive) nor a "
                        "layerscope training checkpoint; save the model with torch.jit.save or "
                        "pass a factory as file.py:function")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            loaded: nn.Module = torch.jit.load(  # type: ignore[no-untyped-call]
                path, map_location="cpu")
            return loaded
    except Exception as exc:
        # drop PyTorch's "(Could this error message be improved? ...)" tail
        first = first_line(exc).split("(Could this error message be improved?")[0].strip()
        raise UserError(f"{path} could not be loaded as TorchScript: {first}") from exc


def resolve(spec: str | nn.Module, *, meta: bool = False, seed: int = zoo.DEFAULT_SEED
            ) -> LoadedModel:
    """Turn a model spec into a module and its default inputs: the one place models are loaded.

    Built-in models and factories are built under ``seed`` (the same weights in every command,
    so ``export`` then ``verify`` agree); a training run folder or its checkpoint gives the
    recipe's model with the trained weights. ``meta=True`` builds built-in models on the meta
    device: no weight memory, no init time (enough for static analysis, which never reads
    values).
    """
    if isinstance(spec, nn.Module):
        return LoadedModel(spec, [], type(spec).__name__, _frontend_of(spec))
    return _resolve_named(spec, meta=meta, seed=seed)


def _resolve_named(spec: str, *, meta: bool, seed: int) -> LoadedModel:
    """``resolve`` for a reference given by name or path (not a module object)."""
    ref = detect(spec)
    if ref.kind == "unknown":
        raise UserError(ref.problem or f"unknown model {spec!r}")
    spec = ref.spec  # a pathlib.Path as its text
    if ref.kind == "onnx":
        raise UserError(f"{spec}: this command needs a PyTorch model; ONNX models are "
                        "analysed with 'layerscope analyze MODEL.onnx'")
    if ref.kind == "builtin":
        entry = zoo.lookup(spec)
        assert entry is not None  # detect says "builtin" only when lookup finds it
        return LoadedModel(zoo.build(entry, seed, meta),
                           [InputSpec((1,) + entry.input_shape, entry.input_dtype)],
                           spec, "torch", {"source": entry.source,
                                           **_llm_extras(llm_configs.PRESETS.get(spec))})
    if ref.kind == "hf":
        module, llm, name = llm_models.from_hf(spec)
        seq = llm.default_seq_len if llm is not None else 2048
        config = getattr(module, "config", None)  # a transformers PreTrainedModel's config
        table = llm_models.position_table(llm, config.to_dict() if config is not None else {})
        notes = hf_config_keys.defaults_note(llm_models.hf_config_dict(spec)[1], spec)
        return LoadedModel(module, [InputSpec((1, seq), torch.int64)], name, "torch",
                           {"source": "hf", **_llm_extras(llm), "notes": notes,
                            **({"position_table": table} if table else {})})
    if ref.kind == "factory":
        with zoo.seeded(seed):
            module, args, kwargs = _from_factory(_call_factory(spec), spec)
        return LoadedModel(module, args, spec, _frontend_of(module), kwargs=kwargs)
    if ref.kind == "trained":
        run = run_files.load_run(spec)
        name = os.path.basename(os.path.normpath(spec))
        return LoadedModel(run.module, [InputSpec((1,) + run.input_shape)], name, "torch",
                           {"source": "trained", "recipe": run.recipe.name,
                            "checkpoint": run.path})
    # "owned": loaded here and never run, so an analysis may use it without copying it first
    return LoadedModel(load_torchscript(spec), [], os.path.basename(spec), "torchscript",
                       {"owned": True})


def _llm_extras(cfg: Any) -> dict[str, Any]:
    """A language model's ``LLMConfig`` rides along as ``extras["llm_config"]``."""
    return {} if cfg is None else {"llm_config": cfg}


def _call_factory(spec: str) -> Any:
    with _cwd_first_on_path():  # a factory may import more of its package when called
        factory = _load_python_attr(spec)
        if isinstance(factory, nn.Module):
            return factory
        if not callable(factory):
            raise UserError(f"{spec}: {type(factory).__name__} is not callable")
        try:
            return factory()
        except Exception as exc:
            raise UserError(f"{spec}: the factory raised "
                            f"{first_line(exc, with_type=True)}") from exc


def _frontend_of(module: nn.Module) -> str:
    return "torchscript" if isinstance(module, torch.jit.ScriptModule) else "torch"
