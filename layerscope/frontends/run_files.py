"""Trained models: a ``layerscope train`` run folder, one of its checkpoints or its ``model.pt``.

``train`` saves state-dict bundles (``torch.save`` of a dict with ``model`` and ``config``), not
TorchScript, so a ``.pt`` file is sniffed before it is loaded: a TorchScript archive
(``torch.jit.save``) is a zip holding ``constants.pkl`` and ``code/``; a ``torch.save`` bundle
is a zip holding ``data.pkl`` only (or, in the legacy format, a bare pickle).

Rebuilding the model needs the training recipes, a layer above this one: ``training/run_model.py``
does it, and ``layerscope/__init__.py`` installs it here as the run loader (so this layer never
imports training)."""
from __future__ import annotations

import os
import zipfile
from collections.abc import Callable
from typing import Any

from layerscope.core.errors import UserError


def is_torchscript_archive(path: str) -> bool:
    """A ``torch.jit.save`` archive: a zip whose records include ``constants.pkl`` or ``code/``
    (``torch.save`` zips hold ``data.pkl`` and ``data/`` only)."""
    if not zipfile.is_zipfile(path):
        return False
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (zipfile.BadZipFile, OSError):
        return False
    return any(n.endswith("/constants.pkl") or "/code/" in n for n in names)


def is_run_folder(path: str) -> bool:
    return os.path.isdir(path) and (os.path.isfile(os.path.join(path, "model.pt"))
                                    or os.path.isdir(os.path.join(path, "checkpoints")))


_run_loader: Callable[[str], Any] | None = None


def install_run_loader(load: Callable[[str], Any]) -> None:
    """``load(path)`` -> an object with ``module``, ``input_shape``, ``recipe.name``, ``path``."""
    global _run_loader
    _run_loader = load


def load_run(path: str) -> Any:
    """The trained model of a run folder or checkpoint, through the installed loader."""
    if _run_loader is None:
        raise UserError(f"{path}: loading training runs needs the full package: import layerscope")
    return _run_loader(path)
