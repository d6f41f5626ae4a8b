"""``detect(ref)``: the one router from what a user names to the kind of model it is.

Every API function and every CLI command asks ``detect`` what a model reference is, so both
accept the same things: an ``nn.Module``, a built-in name (``resnet50``), ``file.py:factory``,
``package.module:factory``, a Hugging Face causal LM's config (``hf:config.json``,
``hf:ORG/NAME``), a TorchScript file (``torch.jit.save``), an ONNX file (``.onnx``), a
``layerscope train`` run folder or one of its checkpoints. It only looks (names, suffixes, the
first bytes of a file); loading is the frontends' job (``torch_module.resolve``,
``onnx_model.load``). Importing this module, or detecting an ONNX file, loads no torch.
"""
from __future__ import annotations

import os
import sys
import zipfile
from dataclasses import dataclass
from typing import Any

from layerscope.core.infiles import special_kind
from layerscope.frontends import run_files
from layerscope.frontends.llm_configs import HF_PREFIX

KINDS = ("module", "builtin", "hf", "factory", "torchscript", "onnx", "trained", "unknown")
TORCHSCRIPT_SUFFIXES = (".pt", ".ts", ".pth", ".jit")
NO_MODEL = ("no model given: name a built-in model (e.g. resnet50), a file.py:factory, "
            "a package.module:factory, a TorchScript file or a training run folder")


@dataclass(frozen=True)
class ModelRef:
    """What a reference names. ``kind``: one of KINDS; ``spec``: the reference as given;
    ``problem``: for kind "unknown", the one-line error that loading it raises."""

    kind: str
    spec: Any
    problem: str | None = None

    @property
    def is_onnx(self) -> bool:
        return self.kind == "onnx"


def is_onnx_path(spec: Any) -> bool:
    """A path named like an ONNX file (it may not exist: loading says so)."""
    return isinstance(spec, (str, os.PathLike)) and str(spec).lower().endswith(".onnx")


def _is_module(ref: Any) -> bool:
    nn = sys.modules.get("torch.nn")  # a module cannot exist before torch is loaded
    return nn is not None and isinstance(ref, nn.Module)


def detect(ref: Any) -> ModelRef:
    if _is_module(ref):
        return ModelRef("module", ref)
    if isinstance(ref, os.PathLike):
        ref = os.fspath(ref)  # a pathlib.Path names what its text names
    if ref is not None and not isinstance(ref, str):
        return ModelRef("unknown", ref, "model must be an nn.Module or a spec string (a "
                        f"built-in name, a file or file.py:factory), got {type(ref).__name__}")
    if not isinstance(ref, str) or not ref.strip():
        return ModelRef("unknown", ref, NO_MODEL)
    kind = special_kind(ref)
    if kind is not None:  # opening it would block (a FIFO) or never end (/dev/zero)
        return ModelRef("unknown", ref, f"{ref} is {kind}, not a model file")
    if is_onnx_path(ref):
        return ModelRef("onnx", ref)
    if ref.startswith(HF_PREFIX):
        return ModelRef("hf", ref)
    from layerscope.frontends import zoo  # built-in models are PyTorch modules: torch from here

    if zoo.lookup(ref) is not None:
        return ModelRef("builtin", ref)
    if os.path.exists(ref):
        return _file(ref)
    if ":" in ref:
        return ModelRef("factory", ref)
    if ref.endswith(TORCHSCRIPT_SUFFIXES):
        return ModelRef("unknown", ref, f"{ref}: no such file")
    close = zoo.suggestions(ref)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return ModelRef("unknown", ref, f"unknown model {ref!r}.{hint} Run 'layerscope models' for the "
                    "built-in names, or pass file.py:factory, package.module:factory, a "
                    "TorchScript file or a training run folder.")


def _file(path: str) -> ModelRef:
    """A path: a training run folder or checkpoint (``torch.save`` bundle), or TorchScript."""
    if os.path.isdir(path) and not run_files.is_run_folder(path):
        return ModelRef("unknown", path, f"{path} is a directory but not a training run folder "
                        "(no model.pt or checkpoints/): pass a run folder, a checkpoint or a "
                        "TorchScript file")
    if os.path.isdir(path) or (zipfile.is_zipfile(path)
                               and not run_files.is_torchscript_archive(path)):
        return ModelRef("trained", path)
    return ModelRef("torchscript", path)  # loading checks that it is one
