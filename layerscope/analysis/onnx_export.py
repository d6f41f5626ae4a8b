"""Export any model spec to ONNX, atomically, and check that onnxruntime loads the file.

Exporters (``torch.onnx.export``):
- ``dynamo`` (default): ``torch.export`` + onnxscript. Each node carries metadata
  ``pkg.torch.onnx.name_scopes`` (its module path), which ``analyze`` puts in each row's
  ``scope``. The full onnxscript optimizer folds BatchNorm into the preceding Conv, which changes
  the parameter count (and loses the BN rows); by default only constants are folded, so the
  graph keeps one node per PyTorch op and its parameters equal the module's. ``fold_batchnorm``
  runs the full optimizer instead.
- ``legacy``: the TorchScript-based exporter; faster, but it folds BatchNorm into Conv in eval
  mode (params then differ from the PyTorch analysis; MACs do not) and names scopes in node names.
"""
from __future__ import annotations

import contextlib
import functools
import io
import os
import time
from dataclasses import dataclass
from typing import Any

from layerscope.analysis import modes
from layerscope.core import options, values
from layerscope.core.errors import UserError, first_line
from layerscope.core.io import check_output, resolve, temp_dir
from layerscope.core.settings import Settings, of_call, option

EXPORTERS = ("dynamo", "legacy")
LEGACY_DEFAULT_OPSET = 17


@dataclass
class ExportResult:
    path: str
    exporter: str
    opset: int
    ir_version: int
    nodes: int
    initializers: int
    batchnorm_folded: bool
    seconds: float
    verified_with: str | None  # "onnxruntime X.Y.Z" when the file was loaded in a session


def _example_inputs(inputs: list[Any]) -> tuple[Any, ...]:
    import torch

    from layerscope.frontends.inputs import InputSpec

    return tuple(torch.zeros(x.shape, dtype=x.dtype) if isinstance(x, InputSpec) else x
                 for x in inputs)


def _drop_exporter_zero_biases(model: Any, parameter_names: set[str]) -> int:
    """The dynamo exporter gives bias-free Conv/Gemm a zero bias built from Shape/Expand ops;
    constant folding turns it into an initializer. Drop those (never a module's own parameter,
    even when it is zero) so the graph has exactly the module's parameters."""
    dropped = 0
    for node in model.graph:
        if node.op_type not in ("Conv", "ConvTranspose", "Gemm") or node.domain not in (
                "", "ai.onnx"):
            continue
        if len(node.inputs) < 3 or node.inputs[2] is None:
            continue
        bias = node.inputs[2]
        if bias.name in parameter_names or bias.const_value is None:
            continue
        if not bias.const_value.numpy().any():
            node.replace_input_with(2, None)
            dropped += 1
    return dropped


def _export_dynamo(module: Any, xs: tuple[Any, ...], path: str, opset: int | None,
                   fold_batchnorm: bool) -> None:
    import torch

    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        program = torch.onnx.export(module, xs, dynamo=True, opset_version=opset,
                                    optimize=fold_batchnorm)
    assert program is not None  # dynamo=True always returns the ONNXProgram
    if not fold_batchnorm:
        import onnxscript.optimizer as optimizer

        optimizer.fold_constants(program.model)
        names = {n for n, _ in module.named_parameters()} | {n for n, _ in module.named_buffers()}
        _drop_exporter_zero_biases(program.model, names)
        optimizer.remove_unused_nodes(program.model)
    program.save(path)  # weights go to external data when the model is over 2 GB


def _export_legacy(module: Any, xs: tuple[Any, ...], path: str, opset: int | None) -> None:
    import torch

    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        torch.onnx.export(module, xs, path, dynamo=False,
                          opset_version=opset or LEGACY_DEFAULT_OPSET, do_constant_folding=True)


@functools.lru_cache(maxsize=1)
def ort_max_ir_version() -> int | None:
    """The newest IR version the installed onnxruntime loads, probed with a one-node model
    (onnx may write a newer IR than onnxruntime reads: onnx 1.23 writes 14, onnxruntime 1.31
    reads up to 13). None when onnxruntime is not installed."""
    import re

    try:
        import onnxruntime as ort
    except ImportError:
        return None
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    for ir in range(onnx.IR_VERSION, 6, -1):
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                                  ir_version=ir)
        try:
            ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            return ir
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
            found = re.search(r"max supported IR version: (\d+)", str(exc))
            if found:
                return int(found.group(1))
    return None


def _cap_ir_version(path: str) -> int:
    """Lower the file's ir_version to what onnxruntime reads (weights stay where they are)."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    cap = ort_max_ir_version()
    if cap is not None and model.ir_version > cap:
        model.ir_version = cap
        onnx.save(model, path)
    return model.ir_version


def verify_loads(path: str) -> str:
    """Open an onnxruntime session on ``path``; the one-line reason if it cannot."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise UserError("verifying the export needs onnxruntime: pip install onnxruntime "
                        "(or pass --no-verify)") from exc
    try:
        ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001
        raise UserError(f"the exported model does not load in onnxruntime {ort.__version__}: "
                        f"{first_line(exc, with_type=True)}") from exc
    return f"onnxruntime {ort.__version__}"


def _summary(path: str) -> tuple[int, int, int]:
    import onnx

    model = onnx.load(path, load_external_data=False)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    return opset, len(model.graph.node), len(model.graph.initializer)


def _move_into_place(tmpdir: str, filename: str, destination_dir: str, path: str) -> None:
    """External data files first, the model last: a reader never sees a model whose data is
    not there yet. Each goes through core.io (a link to the model stays a link)."""
    from layerscope.core.io import place

    names = sorted(os.listdir(tmpdir), key=lambda n: n == filename)
    for name in names:
        place(os.path.join(tmpdir, name),
              path if name == filename else os.path.join(destination_dir, name))


def opset_range(exporter: str) -> tuple[int, int]:
    """The opsets torch's exporter can write: an opset outside is refused, not silently
    replaced (the dynamo exporter otherwise falls back to its default)."""
    from torch.onnx import _constants

    low = getattr(_constants, "ONNX_MIN_OPSET", 7)
    high = getattr(_constants, "ONNX_MAX_OPSET", 20) if exporter == "dynamo" else \
        getattr(_constants, "ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET", 20)
    return low, high


def onnx_path(value: Any, name: str | None = "path") -> str:
    """Where an export goes: a file name ending in .onnx."""
    if not isinstance(value, str) or not value.lower().endswith(".onnx"):
        raise UserError(f"{name} {value!r}: the output file name must end in .onnx",
                        arguments=name or ())
    return value


@dataclass(kw_only=True, eq=False)
class ExportSettings(Settings):
    """Every setting of ``layerscope export`` and ``layerscope.export_onnx`` (``path`` is the
    command line's -o, declared with its other output options)."""

    model: Any = options.model()
    inputs: Any = options.inputs()
    batch_size: int | None = options.batch_size()
    path: str | None = option(None, "where to write", parse=onnx_path, cli=False)
    opset: int | None = option(None, "ONNX opset (default: the exporter's; legacy: 17)",
                               parse=values.positive_int, group=options.PLAIN)
    exporter: str = option("dynamo", choices=EXPORTERS, group=options.PLAIN, consts=(
        ("--dynamo", "dynamo", "torch.export-based exporter (default): nodes keep their "
                               "module path"),
        ("--legacy", "legacy", "TorchScript-based exporter (folds BatchNorm into Conv)")))
    fold_batchnorm: bool = option(False, "dynamo: run the full onnxscript optimizer, folding "
                                         "BatchNorm into Conv", group=options.PLAIN)
    seed: int = option(0, "seed of a built-in model's random weights (default 0, the same in "
                          "every command, so 'verify' agrees)", parse=values.seed,
                       group=options.PLAIN)
    verify: bool = option(True, "do not load the result in an onnxruntime session",
                          flag="--no-verify", group=options.PLAIN)

    def check(self) -> None:
        if self.opset is not None:  # the opsets the chosen exporter writes
            low, high = opset_range(self.exporter)
            try:
                self.opset = values.whole_number(self.opset, "opset", minimum=low,
                                                 maximum=high)
            except UserError as exc:
                raise UserError(f"{exc}; the {self.exporter} exporter writes opsets {low} to "
                                f"{high}", arguments=exc.arguments) from None


def export_onnx(model: Any = None, path: str | None = None, *,
                settings: ExportSettings | None = None, **overrides: Any) -> ExportResult:
    """Export a model spec (or module) to ``path``; see the module docstring for the exporters.

    ``seed``: built-in models and factories draw their random weights from it (as ``verify``
    does, so the export verifies against the same spec). ``settings``: an ``ExportSettings``;
    keyword arguments (``inputs``, ``batch_size``, ``opset``, ``exporter``,
    ``fold_batchnorm``, ``verify``, ``seed``) override its fields."""
    from layerscope.analysis.analyze_torch import load

    if path is not None:
        overrides["path"] = path
    s = of_call(ExportSettings, settings, overrides, "export", model=model)
    if s.path is None:
        raise UserError("give the path to write (a file name ending in .onnx)",
                        arguments="path")
    path, exporter, opset, fold_batchnorm = s.path, s.exporter, s.opset, s.fold_batchnorm
    check_output(path)
    destination_dir = os.path.dirname(os.path.abspath(resolve(path)))
    loaded = load(s.model, s.inputs, s.batch_size, meta=False, seed=s.seed)
    xs = _example_inputs(loaded.inputs)
    module = loaded.module
    flags = modes.flags(module)  # every submodule's (a model may mix train and eval ones)
    filename = os.path.basename(path)
    start = time.perf_counter()
    # the temporary folder goes on Ctrl-C and SIGTERM too (core.io.temp_dir)
    with temp_dir(near=path) as tmpdir:
        tmp_path = os.path.join(tmpdir, filename)
        modes.set_mode(module, False)
        try:
            if exporter == "dynamo":
                _export_dynamo(module, xs, tmp_path, opset, fold_batchnorm)
            else:
                _export_legacy(module, xs, tmp_path, opset)
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 - the exporter's own error, reported as one line
            raise UserError(f"{loaded.name}: the {exporter} exporter failed: "
                            f"{first_line(exc, with_type=True)}") from exc
        finally:
            modes.restore(flags)
        ir_version = _cap_ir_version(tmp_path)
        verified = verify_loads(tmp_path) if s.verify else None
        opset_used, nodes, initializers = _summary(tmp_path)
        _move_into_place(tmpdir, filename, destination_dir, path)
    return ExportResult(path=path, exporter=exporter, opset=opset_used, ir_version=ir_version,
                        nodes=nodes, initializers=initializers,
                        batchnorm_folded=exporter == "legacy" or fold_batchnorm,
                        seconds=time.perf_counter() - start, verified_with=verified)
